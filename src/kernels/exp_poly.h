// The constants of the vectorised exp (ops_vec_avx2.h's exp_ps and its 16-lane
// copy in ops_vec_avx512.h, which must stay op for op the same): the
// clamp and saturation bounds, ln 2 split for Cody-Waite reduction, and the
// degree-6 Taylor coefficients of e^r. One place for the numbers, so the two
// widths cannot drift apart.
//
// Thread-safety: constants only.
#pragma once

namespace omnibus::exp_poly {

inline constexpr float kHi = 88.7228393f;   // above: +inf
inline constexpr float kLo = -103.972084f;  // below: 0
inline constexpr float kClampHi = 89.0f;    // the argument is clamped to [kClampLo, kClampHi]
inline constexpr float kClampLo = -105.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;
inline constexpr float kLn2Lo = 1.42860682030941723212e-6f;
// e^r = 1 + r + r^2/2! + ... + r^6/6!, by Horner from the highest degree:
// p = kP6; p = p r + kP5; ... p = p r + kP0. Scalars, not an array: a
// sanitizer build would emit an indexed array as a symbol in every tier's
// object (scripts/check_tier_symbols.sh).
inline constexpr float kP6 = 1.0f / 720.0f;
inline constexpr float kP5 = 1.0f / 120.0f;
inline constexpr float kP4 = 1.0f / 24.0f;
inline constexpr float kP3 = 1.0f / 6.0f;
inline constexpr float kP2 = 0.5f;
inline constexpr float kP1 = 1.0f;
inline constexpr float kP0 = 1.0f;

}  // namespace omnibus::exp_poly
