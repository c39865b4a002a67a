#include "server/request_checks.h"

#include <cctype>
#include <string>

namespace omnibus::server {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool bearer_key_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "Bearer";
  if (authorization.size() <= kScheme.size() ||
      !iequals(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return false;
  }
  std::string_view presented = authorization.substr(kScheme.size());
  while (!presented.empty() && presented.front() == ' ') presented.remove_prefix(1);
  if (presented.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(presented[i] ^ key[i]);
  return diff == 0;
}

bool is_json_media_type(std::string_view content_type) {
  const std::string_view type = trim(content_type.substr(0, content_type.find(';')));
  constexpr std::string_view kApplication = "application/";
  if (type.size() <= kApplication.size() ||
      !iequals(type.substr(0, kApplication.size()), kApplication))
    return false;
  const std::string_view subtype = type.substr(kApplication.size());
  constexpr std::string_view kSuffix = "+json";
  return iequals(subtype, "json") ||
         (subtype.size() > kSuffix.size() &&
          iequals(subtype.substr(subtype.size() - kSuffix.size()), kSuffix));
}

}  // namespace omnibus::server
