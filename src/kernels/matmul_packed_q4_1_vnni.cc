// matmul_packed_q4_1.inc compiled for the avx-vnni tier (CMakeLists.txt gives
// this file that tier's flags; matmul_packed_internal.h, "tiers", puts the
// kernels in its namespace).
#include "kernels/matmul_packed_q4_1.inc"  // NOLINT(bugprone-suspicious-include)
