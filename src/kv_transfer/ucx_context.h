// UcxContext: the UCX objects one KvTransferAgent owns, created and destroyed
// in the order UCX requires.
//
// create(): ucp_init with active messages and wakeup only, one worker in
// UCS_THREAD_MODE_SINGLE, the worker's address (copied into a byte string to
// send to peers) and its wakeup fd. No RMA feature and no memory mapping:
// UCX then installs no put/get handlers, so no peer can read or write this
// process's memory (it would otherwise reach any address, not only a mapped
// region: UCX's emulated RMA over tcp checks none). The region [base, base +
// bytes) is only remembered for the transport's own copies. The destructor
// destroys the worker and cleans up the context; every endpoint of this
// worker must be gone before that.
//
// Thread-safety: none. The worker (worker()) must be used by one thread at a
// time: KvTransferAgent hands it to its progress thread after create() and
// takes it back (thread join) before the destructor.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "util/status.h"

namespace omnibus::kv_transfer {

// Bytes <-> lowercase hex (the side channel's encoding of worker addresses and tokens).
std::string to_hex(const std::string& bytes);
// kInvalidArgument on odd length or a non-hex digit.
StatusOr<std::string> from_hex(const std::string& hex);

class UcxContext {
 public:
  // kUnavailable with UCX's status string when any step fails.
  static StatusOr<std::unique_ptr<UcxContext>> create(void* base, uint64_t bytes);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_worker_h worker() const { return worker_; }
  int event_fd() const { return event_fd_; }  // for ucp_worker_arm + poll
  const std::string& worker_address() const { return address_; }
  uint64_t base() const { return reinterpret_cast<uint64_t>(base_); }
  uint64_t bytes() const { return bytes_; }

 private:
  UcxContext() = default;
  void* base_ = nullptr;
  uint64_t bytes_ = 0;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::string address_;
};

}  // namespace omnibus::kv_transfer
