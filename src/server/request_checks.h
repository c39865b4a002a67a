// Header checks the API makes before it reads a request: the API key in the
// Authorization header, and the media type of a JSON body.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

namespace omnibus::server {

// Whether `authorization` is "Bearer <key>": the scheme matched
// case-insensitively (RFC 7235 §2.1) and followed by one or more spaces, the
// key compared in time that does not depend on where it differs.
// REQUIRES: !key.empty().
bool bearer_key_matches(std::string_view authorization, std::string_view key);

// Whether a Content-Type names JSON: application/json or application/<x>+json,
// any case, parameters (charset=...) ignored. "" (no header) is not JSON:
// callers that accept a missing header check for "" themselves.
bool is_json_media_type(std::string_view content_type);

}  // namespace omnibus::server
