#include "kv_transfer/messages.h"

#include <fmt/format.h>

#include <limits>

#include "kv_transfer/ucx_context.h"
#include "util/check.h"

namespace omnibus::kv_transfer {

using nlohmann::json;

namespace {

const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

Status get_string(const json& j, const char* name, std::string* out) {
  const json* f = field(j, name);
  if (f == nullptr || !f->is_string())
    return Status::invalid_argument("'{}' must be a string", name);
  *out = f->get<std::string>();
  return Status::ok();
}

Status get_u64(const json& j, const char* name, uint64_t* out) {
  const json* f = field(j, name);
  if (f == nullptr || !f->is_number_unsigned()) {  // nlohmann parses 0, 1, ... as unsigned
    return Status::invalid_argument("'{}' must be a non-negative integer", name);
  }
  *out = f->get<uint64_t>();
  return Status::ok();
}

Status get_i32(const json& j, const char* name, int32_t* out) {
  uint64_t v = 0;
  OMNIBUS_RETURN_IF_ERROR(get_u64(j, name, &v));
  if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return Status::invalid_argument("'{}' out of range", name);
  }
  *out = static_cast<int32_t>(v);
  return Status::ok();
}

Status get_u64_array(const json& j, const char* name, std::vector<uint64_t>* out) {
  const json* f = field(j, name);
  if (f == nullptr || !f->is_array())
    return Status::invalid_argument("'{}' must be an array", name);
  out->clear();
  out->reserve(f->size());
  for (const json& v : *f) {
    if (!v.is_number_unsigned())
      return Status::invalid_argument("'{}' must hold non-negative integers", name);
    out->push_back(v.get<uint64_t>());
  }
  return Status::ok();
}

Status get_hex_bytes(const json& j, const char* name, std::string* out) {
  std::string hex;
  OMNIBUS_RETURN_IF_ERROR(get_string(j, name, &hex));
  auto bytes = from_hex(hex);
  if (!bytes.is_ok()) return Status::invalid_argument("'{}': {}", name, bytes.status().message());
  *out = std::move(bytes).value();
  return Status::ok();
}

std::string key_hex(uint64_t key) { return fmt::format("{:016x}", key); }

bool parse_key_hex(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

json error_json(const std::string& message) { return json{{"ok", false}, {"error", message}}; }

json to_json(const ClaimRequest& r) {
  json keys = json::array();
  for (uint64_t k : r.keys) keys.push_back(key_hex(k));
  return json{
      {"type", "claim"}, {"id", r.id}, {"blocks", r.blocks}, {"keys", keys}, {"compat", r.compat}};
}

json to_json(const ClaimReply& r) {
  const KvRegionLayout& l = r.layout;
  json layout{{"bytes", l.bytes},
              {"n_blocks", l.n_blocks},
              {"k_offset", l.k_offset},
              {"v_offset", l.v_offset},
              {"k_block_bytes", l.k_block_bytes},
              {"v_block_bytes", l.v_block_bytes},
              {"compat", l.compat}};
  return json{{"ok", true},
              {"layout", layout},
              {"worker_address", to_hex(r.worker_address)},
              {"token", to_hex(r.token)}};
}

json to_json(const ReleaseRequest& r) {
  return json{{"type", "release"}, {"id", r.id}, {"n_blocks", r.n_blocks}};
}

StatusOr<ClaimRequest> parse_claim_request(const json& j) {
  ClaimRequest r;
  OMNIBUS_RETURN_IF_ERROR(get_string(j, "id", &r.id));
  OMNIBUS_RETURN_IF_ERROR(get_string(j, "compat", &r.compat));
  const json* blocks = field(j, "blocks");
  if (blocks == nullptr || !blocks->is_array())
    return Status::invalid_argument("'blocks' must be an array");
  for (const json& b : *blocks) {
    if (!b.is_number_unsigned() ||
        b.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return Status::invalid_argument("'blocks' must hold block ids (non-negative int32)");
    }
    r.blocks.push_back(static_cast<int32_t>(b.get<uint64_t>()));
  }
  const json* keys = field(j, "keys");
  if (keys == nullptr || !keys->is_array())
    return Status::invalid_argument("'keys' must be an array");
  for (const json& k : *keys) {
    uint64_t v = 0;
    if (k.is_number_unsigned()) {  // accepted from clients that send numbers
      v = k.get<uint64_t>();
    } else if (!k.is_string() || !parse_key_hex(k.get_ref<const std::string&>(), &v)) {
      return Status::invalid_argument(
          "'keys' must hold hex strings of at most 16 digits (or unsigned integers)");
    }
    r.keys.push_back(v);
  }
  return r;
}

StatusOr<ClaimReply> parse_claim_reply(const json& j) {
  ClaimReply r;
  const json* layout = field(j, "layout");
  if (layout == nullptr || !layout->is_object())
    return Status::invalid_argument("'layout' must be an object");
  KvRegionLayout& l = r.layout;
  OMNIBUS_RETURN_IF_ERROR(get_u64(*layout, "bytes", &l.bytes));
  OMNIBUS_RETURN_IF_ERROR(get_i32(*layout, "n_blocks", &l.n_blocks));
  OMNIBUS_RETURN_IF_ERROR(get_u64_array(*layout, "k_offset", &l.k_offset));
  OMNIBUS_RETURN_IF_ERROR(get_u64_array(*layout, "v_offset", &l.v_offset));
  OMNIBUS_RETURN_IF_ERROR(get_u64(*layout, "k_block_bytes", &l.k_block_bytes));
  OMNIBUS_RETURN_IF_ERROR(get_u64(*layout, "v_block_bytes", &l.v_block_bytes));
  OMNIBUS_RETURN_IF_ERROR(get_string(*layout, "compat", &l.compat));
  if (l.k_offset.size() != l.v_offset.size()) {
    return Status::invalid_argument("'k_offset' and 'v_offset' differ in length");
  }
  OMNIBUS_RETURN_IF_ERROR(get_hex_bytes(j, "worker_address", &r.worker_address));
  OMNIBUS_RETURN_IF_ERROR(get_hex_bytes(j, "token", &r.token));
  if (r.worker_address.empty() || r.token.size() != kFetchTokenBytes) {
    return Status::invalid_argument("an empty worker address, or a token of other than {} bytes",
                                    kFetchTokenBytes);
  }
  return r;
}

json seal(const TransferAuth& auth, const json& message, int64_t now_ms) {
  std::string text = message.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string mac = auth.mac_hex(fmt::format("{}\n{}", now_ms, text));
  return json{{"msg", std::move(text)}, {"ts", now_ms}, {"mac", mac}};
}

StatusOr<json> unseal(const TransferAuth& auth, const json& envelope, int64_t now_ms) {
  if (!envelope.is_object()) return Status::permission_denied("unauthenticated");
  const json* msg = field(envelope, "msg");
  const json* ts = field(envelope, "ts");
  const json* mac = field(envelope, "mac");
  if (msg == nullptr || !msg->is_string() || ts == nullptr || !ts->is_number_integer() ||
      mac == nullptr || !mac->is_string()) {
    return Status::permission_denied("unauthenticated");
  }
  const int64_t t = ts->get<int64_t>();
  const std::string& text = msg->get_ref<const std::string&>();
  if (!auth.verify_hex(fmt::format("{}\n{}", t, text), mac->get_ref<const std::string&>())) {
    return Status::permission_denied("unauthenticated");
  }
  // Checked after the MAC, so the answer says nothing to whom lacks the secret.
  if (t < now_ms - kMaxSealAgeMs || t > now_ms + kMaxSealAgeMs) {
    return Status::permission_denied(
        "stale message (sealed {} ms from now; clocks more than {} s apart?)", t - now_ms,
        kMaxSealAgeMs / 1000);
  }
  json inner = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (inner.is_discarded() || !inner.is_object())
    return Status::invalid_argument("the message is not a JSON object");
  return inner;
}

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

// Little-endian reads that never go past the end.
struct Reader {
  std::string_view in;
  template <typename T>
  bool read(T& v) {
    if (in.size() < sizeof(T)) return false;
    v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= T(uint8_t(in[i])) << (8 * i);
    in.remove_prefix(sizeof(T));
    return true;
  }
};

}  // namespace

std::string encode_fetch(const FetchRequest& r) {
  OMNIBUS_CHECK(r.token.size() == kFetchTokenBytes);
  OMNIBUS_CHECK(r.ranges.size() <= kMaxFetchRanges);
  std::string out;
  out.reserve(8 + kFetchTokenBytes + 4 + 16 * r.ranges.size());
  put_u64(out, r.fetch_id);
  out += r.token;
  put_u32(out, static_cast<uint32_t>(r.ranges.size()));
  for (const FetchRange& g : r.ranges) {
    put_u64(out, g.offset);
    put_u64(out, g.bytes);
  }
  return out;
}

StatusOr<FetchRequest> parse_fetch(std::string_view bytes) {
  Reader rd{bytes};
  FetchRequest r;
  if (!rd.read(r.fetch_id) || rd.in.size() < kFetchTokenBytes)
    return Status::invalid_argument("truncated fetch");
  r.token.assign(rd.in.substr(0, kFetchTokenBytes));
  rd.in.remove_prefix(kFetchTokenBytes);
  uint32_t n = 0;
  if (!rd.read(n)) return Status::invalid_argument("truncated fetch");
  if (n > kMaxFetchRanges)
    return Status::invalid_argument("{} ranges, more than {}", n, kMaxFetchRanges);
  if (rd.in.size() != size_t(n) * 16) {
    return Status::invalid_argument("{} ranges need {} bytes, the fetch has {}", n, size_t(n) * 16,
                                    rd.in.size());
  }
  r.ranges.resize(n);
  for (FetchRange& g : r.ranges) {
    (void)rd.read(g.offset);
    (void)rd.read(g.bytes);
  }
  return r;
}

StatusOr<ReleaseRequest> parse_release_request(const json& j) {
  ReleaseRequest r;
  OMNIBUS_RETURN_IF_ERROR(get_string(j, "id", &r.id));
  OMNIBUS_RETURN_IF_ERROR(get_i32(j, "n_blocks", &r.n_blocks));
  return r;
}

}  // namespace omnibus::kv_transfer
