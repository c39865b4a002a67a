// The chat page's files (src/server/web/), embedded in the binary so that
// `omnibus serve` needs nothing beside it. web_assets.cc is generated from
// the files by src/server/web/embed.py; web_assets_test.cc fails when the two
// drift apart.
//
// Thread-safety: immutable data.
#pragma once

#include <span>
#include <string_view>

namespace omnibus::server {

struct WebAsset {
  std::string_view path;          // "/index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};

// nullptr when `path` is not one of the page's files.
const WebAsset* find_web_asset(std::string_view path);

// Every embedded file.
std::span<const WebAsset> web_assets();

}  // namespace omnibus::server
