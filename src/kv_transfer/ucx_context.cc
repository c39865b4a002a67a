#include "kv_transfer/ucx_context.h"

#include "util/check.h"

namespace omnibus::kv_transfer {

std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

StatusOr<std::string> from_hex(const std::string& hex) {
  if (hex.size() % 2 != 0)
    return Status::invalid_argument("hex string of odd length {}", hex.size());
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::invalid_argument("not a hex digit at {}", 2 * i);
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

StatusOr<std::unique_ptr<UcxContext>> UcxContext::create(void* base, uint64_t bytes) {
  std::unique_ptr<UcxContext> u(new UcxContext());
  u->base_ = base;
  u->bytes_ = bytes;
  auto fail = [](const char* what, ucs_status_t s) {
    return Status::unavailable("UCX {}: {}", what, ucs_status_string(s));
  };

  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return fail("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;  // never RMA: see the header
  s = ucp_init(&params, config, &u->context_);
  ucp_config_release(config);
  if (s != UCS_OK) return fail("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(u->context_, &wp, &u->worker_);
  if (s != UCS_OK) return fail("ucp_worker_create", s);

  ucp_address_t* address = nullptr;
  size_t address_size = 0;
  s = ucp_worker_get_address(u->worker_, &address, &address_size);
  if (s != UCS_OK) return fail("ucp_worker_get_address", s);
  u->address_.assign(reinterpret_cast<const char*>(address), address_size);
  ucp_worker_release_address(u->worker_, address);

  s = ucp_worker_get_efd(u->worker_, &u->event_fd_);
  if (s != UCS_OK) return fail("ucp_worker_get_efd", s);
  return u;
}

UcxContext::~UcxContext() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);  // closes event_fd_ too
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace omnibus::kv_transfer
