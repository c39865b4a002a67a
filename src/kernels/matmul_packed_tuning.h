// Run-time tuning choices of the packed matmul kernels (matmul_packed_avx2.cc
// and the tier files): where measurements on different CPUs disagree on the
// faster of two ways. Every choice gives the same bits (each way is bitwise
// the scalar reference); only speed depends on it. Each is made once, from
// cpu_features() unless its environment variable forces it (benchmarks), and
// docs/performance.md has the measurements behind the defaults.
//
// Thread-safety: the first call chooses; concurrent first calls store the
// same value. set_one_token_pairs_for_testing is not to be called while a
// matmul runs.
#pragma once

namespace omnibus::matmul_packed {

// Whether a one-token call of a type with a one-token wide kernel (the
// avx512 tier's Q4_K, Q5_K, Q4_0, Q4_1, Q5_0, Q5_1) takes it, two groups a
// pass (true), or the single-group kernel, one sequential stream a thread
// (false). OMNIBUS_ONE_TOKEN_PAIRS forces it: 0 single groups, any other
// non-empty value pairs.
bool one_token_pairs();

// Tests only: force the choice; returns the previous one.
bool set_one_token_pairs_for_testing(bool pairs);

}  // namespace omnibus::matmul_packed
