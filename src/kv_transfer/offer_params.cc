#include "kv_transfer/offer_params.h"

#include <fmt/format.h>

#include <cctype>

namespace omnibus::kv_transfer {

using nlohmann::json;

namespace {

const char* kParam = "kv_transfer_params";

bool parse_hex64(const json& j, uint64_t& out) {
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | uint64_t(d);
  }
  out = v;
  return true;
}

bool valid_id(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

bool get_string(const json& j, const char* name, std::string& out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) return false;
  out = it->get<std::string>();
  return true;
}

// A refusal of `field`, recorded for the caller.
struct Refusal {
  std::string* bad_field;
  Status operator()(const std::string& field, const std::string& what) const {
    if (bad_field != nullptr) *bad_field = field;
    return Status::invalid_argument("{}.{} {}", kParam, field, what);
  }
};

// omnibus.window: absent/null, or {offset, bytes} of non-negative integers.
Status parse_window(const json& om, ImportParams& p, const Refusal& kv_params_error) {
  auto w = om.find("window");
  if (w == om.end() || w->is_null()) return Status::ok();
  const auto off = w->is_object() ? w->find("offset") : w->end();
  const auto len = w->is_object() ? w->find("bytes") : w->end();
  if (!w->is_object() || off == w->end() || len == w->end() || !off->is_number_integer() ||
      !len->is_number_integer() || off->get<int64_t>() < 0 || len->get<int64_t>() < 0) {
    return kv_params_error("omnibus.window",
                           "must be an object with non-negative integers offset and bytes");
  }
  p.window_offset = off->get<int64_t>();
  p.window_bytes = uint64_t(len->get<int64_t>());
  return Status::ok();
}

}  // namespace

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

StatusOr<ImportParams> parse_offer_params(const json& params, std::string* bad_field) {
  const Refusal kv_params_error{bad_field};
  ImportParams p;
  if (!get_string(params, "remote_engine_id", p.engine_id))
    return kv_params_error("remote_engine_id", "must be a string");
  if (!get_string(params, "remote_request_id", p.request_id) || !valid_id(p.request_id)) {
    return kv_params_error("remote_request_id",
                           "must be a string of at most 128 letters, digits, '-' or '_'");
  }
  if (!get_string(params, "remote_host", p.host) || p.host.empty() || p.host.size() > 255) {
    return kv_params_error("remote_host", "must be a non-empty host name or address");
  }
  auto port = params.find("remote_port");
  if (port == params.end() || !port->is_number_integer() || port->get<int64_t>() < 1 ||
      port->get<int64_t>() > 65535) {
    return kv_params_error("remote_port", "must be an integer port in [1, 65535]");
  }
  p.port = int(port->get<int64_t>());
  auto ids = params.find("remote_block_ids");
  if (ids == params.end() || !ids->is_array())
    return kv_params_error("remote_block_ids", "must be an array of block ids");
  for (const json& b : *ids) {
    if (!b.is_number_integer() || b.get<int64_t>() < 0 || b.get<int64_t>() >= (int64_t(1) << 30)) {
      return kv_params_error("remote_block_ids", "must hold non-negative integer block ids");
    }
    p.blocks.push_back(int32_t(b.get<int64_t>()));
  }
  auto om = params.find("omnibus");
  if (om == params.end() || !om->is_object()) {
    return kv_params_error(
        "omnibus", "is missing: the prefill worker is not an omnibus worker with KV transfer on");
  }
  if (!get_string(*om, "compat", p.compat))
    return kv_params_error("omnibus.compat", "must be a string");
  auto hashes = om->find("block_hashes");
  if (hashes == om->end() || !hashes->is_array() || hashes->size() != p.blocks.size()) {
    return kv_params_error("omnibus.block_hashes",
                           "must be an array of hex keys, one per remote block");
  }
  for (const json& h : *hashes) {
    uint64_t k;
    if (!parse_hex64(h, k))
      return kv_params_error("omnibus.block_hashes", "must hold 16-digit lowercase hex keys");
    p.keys.push_back(k);
  }
  OMNIBUS_RETURN_IF_ERROR(parse_window(*om, p, kv_params_error));
  return p;
}

std::string offer_signed_text(const json& params) {
  json part = json::object();
  for (const char* k : {"remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host",
                        "remote_port"}) {
    auto it = params.find(k);
    part[k] = it == params.end() ? json() : *it;
  }
  auto om = params.find("omnibus");
  json o = om != params.end() && om->is_object() ? *om : json::object();
  o.erase("mac");
  part["omnibus"] = std::move(o);
  return "omnibus-offer\n" +
         part.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

}  // namespace omnibus::kv_transfer
