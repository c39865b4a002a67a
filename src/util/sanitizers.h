// Whether this build runs under a sanitizer (ASan, TSan). Tests that drive a
// real model for tens of seconds skip themselves there: the release run covers
// them, and sanitized builds cover the same code on tiny models.
#pragma once

namespace omnibus {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace omnibus
