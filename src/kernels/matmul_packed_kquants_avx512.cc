// matmul_packed_kquants.inc compiled for the avx512 tier (CMakeLists.txt gives
// this file that tier's flags; matmul_packed_internal.h, "tiers", puts the
// kernels in its namespace).
#include "kernels/matmul_packed_kquants.inc"  // NOLINT(bugprone-suspicious-include)
