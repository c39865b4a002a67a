// PeerList: the hosts a KV-transfer worker trusts (--kv-transfer-peers).
//
// A comma-separated list of IP addresses ("10.0.0.7", "::1"), networks in
// CIDR form ("10.0.0.0/24", "fd00::/8") and host names ("prefill-0"). Names
// are resolved once, at parse(), into addresses; the name itself is kept too.
// An empty list trusts nobody: a worker needs the peers it talks to listed.
//
// Two checks use it:
//   - allows_host(): a remote_host named in kv_transfer_params. Only a listed
//     name, or an IP literal inside a listed address or network, passes;
//     nothing is resolved, so a request can never make the server look up or
//     reach a host the operator did not list.
//   - allows_address(): the peer address of a side-channel connection;
//     IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) count as IPv4.
//
// Thread-safety: immutable after parse().
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace omnibus::kv_transfer {

class PeerList {
 public:
  // kInvalidArgument names the entry that is neither an address, a network
  // nor a resolvable name.
  static StatusOr<PeerList> parse(std::string_view spec);

  bool empty() const { return nets_.empty() && names_.empty(); }
  bool allows_host(std::string_view host) const;
  bool allows_address(const sockaddr* addr) const;
  const std::string& spec() const { return spec_; }

 private:
  struct Net {
    int family = 0;                   // AF_INET or AF_INET6
    std::array<uint8_t, 16> bytes{};  // network order; 4 used for AF_INET
    int prefix = 0;                   // bits that must match
  };
  bool allows(const Net& candidate) const;

  std::vector<Net> nets_;
  std::vector<std::string> names_;
  std::string spec_;
};

}  // namespace omnibus::kv_transfer
