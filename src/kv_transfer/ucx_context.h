// UcxContext: the UCX objects one KvTransferAgent owns, created and destroyed
// in the order UCX requires.
//
// create(): ucp_init (RMA + WAKEUP), one worker in UCS_THREAD_MODE_SINGLE,
// ucp_mem_map of [base, base + bytes) (existing memory: registered, never
// allocated), its packed rkey and the worker's address (both copied into
// byte strings to send to peers), the worker's wakeup fd. The destructor
// unmaps the region, destroys the worker and cleans up the context; every
// endpoint and rkey of this worker must be gone before that.
//
// Thread-safety: none. The worker (worker()) must be used by one thread at a
// time: KvTransferAgent hands it to its progress thread after create() and
// takes it back (thread join) before the destructor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <ucp/api/ucp.h>

#include "util/status.h"

namespace omnibus::kv_transfer {

// Bytes <-> lowercase hex (the side channel's encoding of addresses and rkeys).
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
  int event_fd() const { return event_fd_; }                 // for ucp_worker_arm + poll
  const std::string& worker_address() const { return address_; }
  const std::string& packed_rkey() const { return rkey_; }
  uint64_t base() const { return reinterpret_cast<uint64_t>(base_); }

 private:
  UcxContext() = default;
  void* base_ = nullptr;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  int event_fd_ = -1;
  std::string address_;
  std::string rkey_;
};

}  // namespace omnibus::kv_transfer
