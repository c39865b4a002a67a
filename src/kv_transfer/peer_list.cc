#include "kv_transfer/peer_list.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

namespace omnibus::kv_transfer {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// An IP literal (no brackets, no port) as a host-sized network.
template <typename NetT>
bool parse_literal(const std::string& text, NetT& out) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out.family = AF_INET;
    std::memcpy(out.bytes.data(), &v4, 4);
    out.prefix = 32;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    out.family = AF_INET6;
    std::memcpy(out.bytes.data(), &v6, 16);
    out.prefix = 128;
    // ::ffff:a.b.c.d is the IPv4 host a.b.c.d.
    static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(out.bytes.data(), kMapped, 12) == 0) {
      out.family = AF_INET;
      std::memmove(out.bytes.data(), out.bytes.data() + 12, 4);
      std::memset(out.bytes.data() + 4, 0, 12);
      out.prefix = 32;
    }
    return true;
  }
  return false;
}

}  // namespace

StatusOr<PeerList> PeerList::parse(std::string_view spec) {
  PeerList list;
  list.spec_ = std::string(spec);
  size_t i = 0;
  while (i <= spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string_view::npos) end = spec.size();
    const std::string entry(trim(spec.substr(i, end - i)));
    i = end + 1;
    if (entry.empty()) continue;
    const size_t slash = entry.find('/');
    Net net;
    if (slash != std::string::npos) {
      const std::string addr = entry.substr(0, slash), bits = entry.substr(slash + 1);
      char* rest = nullptr;
      const long prefix = std::strtol(bits.c_str(), &rest, 10);
      if (!parse_literal(addr, net) || bits.empty() || *rest != '\0' || prefix < 0 ||
          prefix > net.prefix) {
        return Status::invalid_argument(
            "--kv-transfer-peers: '{}' is not a network (address/prefix bits)", entry);
      }
      net.prefix = int(prefix);
      list.nets_.push_back(net);
      continue;
    }
    if (parse_literal(entry, net)) {
      list.nets_.push_back(net);
      continue;
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(entry.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
      return Status::invalid_argument(
          "--kv-transfer-peers: '{}' is not an address, a network or a host name that "
          "resolves",
          entry);
    }
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {0};
      const void* src = a->ai_family == AF_INET
                            ? static_cast<const void*>(
                                  &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr)
                            : static_cast<const void*>(
                                  &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
      Net resolved;
      if (inet_ntop(a->ai_family, src, text, sizeof(text)) != nullptr &&
          parse_literal(text, resolved)) {
        list.nets_.push_back(resolved);
      }
    }
    freeaddrinfo(found);
    list.names_.push_back(entry);
  }
  return list;
}

bool PeerList::allows(const Net& c) const {
  for (const Net& n : nets_) {
    if (n.family != c.family) continue;
    const int full = n.prefix / 8, rest = n.prefix % 8;
    if (std::memcmp(n.bytes.data(), c.bytes.data(), size_t(full)) != 0) continue;
    if (rest != 0) {
      const uint8_t mask = uint8_t(0xff << (8 - rest));
      if ((n.bytes[size_t(full)] & mask) != (c.bytes[size_t(full)] & mask)) continue;
    }
    return true;
  }
  return false;
}

bool PeerList::allows_host(std::string_view host) const {
  for (const std::string& n : names_) {
    if (n == host) return true;
  }
  Net c;
  return parse_literal(std::string(host), c) && allows(c);
}

bool PeerList::allows_address(const sockaddr* addr) const {
  if (addr == nullptr) return false;
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof(text));
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text,
              sizeof(text));
  } else {
    return false;
  }
  Net c;
  return parse_literal(text, c) && allows(c);
}

}  // namespace omnibus::kv_transfer
