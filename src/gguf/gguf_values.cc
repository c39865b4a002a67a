// GgufFile's value getters and value_to_string: decode metadata values from
// the mapping. The parser has already checked every extent, so decoding here
// needs no bounds checks beyond the ones the layout implies.
#include <cstring>
#include <limits>

#include "gguf/gguf_file.h"
#include "gguf/gguf_quote.h"

namespace omnibus {

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::optional<int64_t> int_at(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8:
      return load<uint8_t>(p);
    case GgufType::kInt8:
      return load<int8_t>(p);
    case GgufType::kUint16:
      return load<uint16_t>(p);
    case GgufType::kInt16:
      return load<int16_t>(p);
    case GgufType::kUint32:
      return load<uint32_t>(p);
    case GgufType::kInt32:
      return load<int32_t>(p);
    case GgufType::kInt64:
      return load<int64_t>(p);
    case GgufType::kUint64: {
      const uint64_t v = load<uint64_t>(p);
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> float_at(GgufType t, const uint8_t* p) {
  if (t == GgufType::kFloat32) return load<float>(p);
  if (t == GgufType::kFloat64) return load<double>(p);
  return std::nullopt;
}

// Walks a string array's elements: u64 length + bytes each.
template <typename Fn>
void for_each_string(const GgufKv& kv, uint64_t limit, Fn fn) {
  const uint8_t* p = kv.value;
  for (uint64_t i = 0; i < kv.array_size && i < limit; ++i) {
    const uint64_t len = load<uint64_t>(p);
    fn(std::string_view(reinterpret_cast<const char*>(p + 8), len));
    p += 8 + len;
  }
}

std::string type_string(const GgufKv& kv) {
  if (kv.type != GgufType::kArray) return gguf_type_name(kv.type);
  return fmt::format("array[{}]", gguf_type_name(kv.array_type));
}

// One scalar of fixed-size type t at p, as text.
std::string scalar_string(GgufType t, const uint8_t* p) {
  if (t == GgufType::kBool) return load<uint8_t>(p) != 0 ? "true" : "false";
  if (t == GgufType::kFloat32) return fmt::format("{}", load<float>(p));
  if (t == GgufType::kFloat64) return fmt::format("{}", load<double>(p));
  if (t == GgufType::kUint64) return fmt::format("{}", load<uint64_t>(p));
  if (std::optional<int64_t> v = int_at(t, p)) return fmt::format("{}", *v);
  return "?";
}

}  // namespace

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return std::nullopt;
  return int_at(kv->type, kv->value);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return std::nullopt;
  return float_at(kv->type, kv->value);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr || kv->type != GgufType::kBool) return std::nullopt;
  return load<uint8_t>(kv->value) != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr || kv->type != GgufType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(kv->value), kv->value_bytes);
}

std::optional<std::vector<std::string_view>> GgufFile::get_string_array(
    std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr || kv->type != GgufType::kArray || kv->array_type != GgufType::kString) {
    return std::nullopt;
  }
  std::vector<std::string_view> out;
  out.reserve(kv->array_size);
  for_each_string(*kv, kv->array_size, [&](std::string_view s) { out.push_back(s); });
  return out;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr || kv->type != GgufType::kArray) return std::nullopt;
  if (kv->array_type != GgufType::kFloat32 && kv->array_type != GgufType::kFloat64)
    return std::nullopt;
  const size_t step = gguf_type_size(kv->array_type);
  std::vector<float> out(kv->array_size);
  for (uint64_t i = 0; i < kv->array_size; ++i) {
    out[i] = static_cast<float>(*float_at(kv->array_type, kv->value + i * step));
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr || kv->type != GgufType::kArray || !gguf_type_is_integer(kv->array_type)) {
    return std::nullopt;
  }
  const size_t step = gguf_type_size(kv->array_type);
  std::vector<int64_t> out(kv->array_size);
  for (uint64_t i = 0; i < kv->array_size; ++i) {
    std::optional<int64_t> v = int_at(kv->array_type, kv->value + i * step);
    if (!v) return std::nullopt;  // a u64 element above INT64_MAX
    out[i] = *v;
  }
  return out;
}

StatusOr<int64_t> GgufFile::require_int(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return Status::not_found("{}: missing metadata key '{}'", path_, key);
  if (!gguf_type_is_integer(kv->type)) {
    return Status::corrupt("{}: metadata key '{}' has type {}, expected an integer (at byte {})",
                           path_, key, type_string(*kv), kv->key_offset);
  }
  std::optional<int64_t> v = int_at(kv->type, kv->value);
  if (!v) {
    return Status::corrupt("{}: metadata key '{}' value {} is out of range (at byte {})", path_,
                           key, value_to_string(*kv), kv->key_offset);
  }
  return *v;
}

StatusOr<double> GgufFile::require_float(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return Status::not_found("{}: missing metadata key '{}'", path_, key);
  std::optional<double> v = float_at(kv->type, kv->value);
  if (!v) {
    return Status::corrupt("{}: metadata key '{}' has type {}, expected f32 or f64 (at byte {})",
                           path_, key, type_string(*kv), kv->key_offset);
  }
  return *v;
}

StatusOr<std::string_view> GgufFile::require_string(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (kv == nullptr) return Status::not_found("{}: missing metadata key '{}'", path_, key);
  std::optional<std::string_view> v = get_string(key);
  if (!v) {
    return Status::corrupt("{}: metadata key '{}' has type {}, expected string (at byte {})", path_,
                           key, type_string(*kv), kv->key_offset);
  }
  return *v;
}

std::string GgufFile::value_to_string(const GgufKv& kv, size_t max_elements,
                                      size_t max_string_chars) const {
  if (kv.type == GgufType::kString) {
    return gguf_quote(std::string_view(reinterpret_cast<const char*>(kv.value), kv.value_bytes),
                      max_string_chars);
  }
  if (kv.type != GgufType::kArray) return scalar_string(kv.type, kv.value);

  std::string out = fmt::format("[{} {}", kv.array_size,
                                kv.array_type != GgufType::kString ? gguf_type_name(kv.array_type)
                                : kv.array_size == 1               ? "string"
                                                                   : "strings");
  if (kv.array_size == 0) return out + "]";
  out += ": ";
  const uint64_t shown = std::min<uint64_t>(kv.array_size, max_elements);
  if (kv.array_type == GgufType::kString) {
    uint64_t i = 0;
    for_each_string(kv, shown, [&](std::string_view s) {
      out += fmt::format("{}{}", i++ ? ", " : "", gguf_quote(s, max_string_chars));
    });
  } else {
    const size_t step = gguf_type_size(kv.array_type);
    for (uint64_t i = 0; i < shown; ++i) {
      out += fmt::format("{}{}", i ? ", " : "", scalar_string(kv.array_type, kv.value + i * step));
    }
  }
  if (shown < kv.array_size) out += shown ? ", ..." : "...";
  return out + "]";
}

}  // namespace omnibus
