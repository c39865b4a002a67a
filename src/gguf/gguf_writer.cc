#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/check.h"

namespace omnibus {

namespace {

template <typename T>
void put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>* out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out->insert(out->end(), s.begin(), s.end());
}

template <typename T>
std::vector<uint8_t> encode(const std::vector<T>& v) {
  std::vector<uint8_t> out;
  out.reserve(v.size() * sizeof(T));
  for (const T& x : v) put<T>(&out, x);
  return out;
}

template <typename T>
std::vector<uint8_t> encode1(T v) {
  std::vector<uint8_t> out;
  put<T>(&out, v);
  return out;
}

void pad_to(std::vector<uint8_t>* out, uint64_t alignment) {
  out->resize((out->size() + alignment - 1) / alignment * alignment, 0);
}

}  // namespace

void GgufWriter::set(Kv kv) {
  for (Kv& existing : kvs_) {
    if (existing.key == kv.key) {
      existing = std::move(kv);
      return;
    }
  }
  kvs_.push_back(std::move(kv));
}

void GgufWriter::set_u8(std::string key, uint8_t v) {
  set({std::move(key), GgufType::kUint8, {}, 0, encode1(v)});
}
void GgufWriter::set_i8(std::string key, int8_t v) {
  set({std::move(key), GgufType::kInt8, {}, 0, encode1(v)});
}
void GgufWriter::set_u16(std::string key, uint16_t v) {
  set({std::move(key), GgufType::kUint16, {}, 0, encode1(v)});
}
void GgufWriter::set_i16(std::string key, int16_t v) {
  set({std::move(key), GgufType::kInt16, {}, 0, encode1(v)});
}
void GgufWriter::set_u32(std::string key, uint32_t v) {
  set({std::move(key), GgufType::kUint32, {}, 0, encode1(v)});
}
void GgufWriter::set_i32(std::string key, int32_t v) {
  set({std::move(key), GgufType::kInt32, {}, 0, encode1(v)});
}
void GgufWriter::set_u64(std::string key, uint64_t v) {
  set({std::move(key), GgufType::kUint64, {}, 0, encode1(v)});
}
void GgufWriter::set_i64(std::string key, int64_t v) {
  set({std::move(key), GgufType::kInt64, {}, 0, encode1(v)});
}
void GgufWriter::set_f32(std::string key, float v) {
  set({std::move(key), GgufType::kFloat32, {}, 0, encode1(v)});
}
void GgufWriter::set_f64(std::string key, double v) {
  set({std::move(key), GgufType::kFloat64, {}, 0, encode1(v)});
}
void GgufWriter::set_bool(std::string key, bool v) {
  set({std::move(key), GgufType::kBool, {}, 0, encode1<uint8_t>(v ? 1 : 0)});
}
void GgufWriter::set_string(std::string key, std::string v) {
  std::vector<uint8_t> payload;
  put_string(&payload, v);
  set({std::move(key), GgufType::kString, {}, 0, std::move(payload)});
}

void GgufWriter::set_string_array(std::string key, std::vector<std::string> v) {
  std::vector<uint8_t> payload;
  for (const std::string& s : v) put_string(&payload, s);
  set({std::move(key), GgufType::kArray, GgufType::kString, v.size(), std::move(payload)});
}

void GgufWriter::set_array_raw(std::string key, GgufType elem_type, uint64_t count,
                               std::vector<uint8_t> payload) {
  OMNIBUS_CHECK(elem_type != GgufType::kString && elem_type != GgufType::kArray);
  OMNIBUS_CHECK(payload.size() == count * gguf_type_size(elem_type));
  set({std::move(key), GgufType::kArray, elem_type, count, std::move(payload)});
}

void GgufWriter::set_f32_array(std::string key, std::vector<float> v) {
  set_array_raw(std::move(key), GgufType::kFloat32, v.size(), encode(v));
}
void GgufWriter::set_f64_array(std::string key, std::vector<double> v) {
  set_array_raw(std::move(key), GgufType::kFloat64, v.size(), encode(v));
}
void GgufWriter::set_i32_array(std::string key, std::vector<int32_t> v) {
  set_array_raw(std::move(key), GgufType::kInt32, v.size(), encode(v));
}
void GgufWriter::set_u32_array(std::string key, std::vector<uint32_t> v) {
  set_array_raw(std::move(key), GgufType::kUint32, v.size(), encode(v));
}
void GgufWriter::set_i64_array(std::string key, std::vector<int64_t> v) {
  set_array_raw(std::move(key), GgufType::kInt64, v.size(), encode(v));
}
void GgufWriter::set_u8_array(std::string key, std::vector<uint8_t> v) {
  set_array_raw(std::move(key), GgufType::kUint8, v.size(), encode(v));
}
void GgufWriter::set_bool_array(std::string key, std::vector<bool> v) {
  std::vector<uint8_t> payload(v.size());
  for (size_t i = 0; i < v.size(); ++i) payload[i] = v[i] ? 1 : 0;
  set_array_raw(std::move(key), GgufType::kBool, v.size(), std::move(payload));
}

size_t GgufWriter::tensor_bytes(DType type, const std::vector<int64_t>& shape) {
  const GgufBlockGeometry g = gguf_block_geometry(static_cast<uint32_t>(type));
  OMNIBUS_CHECK(g.block_size > 0);
  OMNIBUS_CHECK(!shape.empty() && shape.size() <= kGgufMaxDims);
  OMNIBUS_CHECK(shape[0] > 0 && shape[0] % g.block_size == 0);
  size_t n = static_cast<size_t>(shape[0] / g.block_size) * g.type_size;
  for (size_t d = 1; d < shape.size(); ++d) {
    OMNIBUS_CHECK(shape[d] > 0);
    n *= static_cast<size_t>(shape[d]);
  }
  return n;
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  OMNIBUS_CHECK(data.size() == tensor_bytes(type, shape));
  for (const Tensor& t : tensors_) OMNIBUS_CHECK(t.name != name);
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(data)});
}

uint64_t GgufWriter::alignment() const {
  for (const Kv& kv : kvs_) {
    if (kv.key != kGgufAlignmentKey || kv.type == GgufType::kArray) continue;
    const size_t n = gguf_type_size(kv.type);
    if (n == 0 || !gguf_type_is_integer(kv.type)) break;
    uint64_t a = 0;
    std::memcpy(&a, kv.payload.data(), n);  // little-endian: low bytes first
    if (a != 0 && (a & (a - 1)) == 0) return a;
    break;  // a bad value is written as is (tests of the reader use that)
  }
  return kGgufDefaultAlignment;
}

std::vector<uint8_t> GgufWriter::to_bytes(uint32_t version) const {
  OMNIBUS_CHECK(version == 2 || version == 3);
  const uint64_t a = alignment();
  std::vector<uint8_t> out;
  put<uint32_t>(&out, kGgufMagic);
  put<uint32_t>(&out, version);
  put<uint64_t>(&out, tensors_.size());
  put<uint64_t>(&out, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_string(&out, kv.key);
    put<uint32_t>(&out, static_cast<uint32_t>(kv.type));
    if (kv.type == GgufType::kArray) {
      put<uint32_t>(&out, static_cast<uint32_t>(kv.array_type));
      put<uint64_t>(&out, kv.array_size);
    }
    out.insert(out.end(), kv.payload.begin(), kv.payload.end());
  }
  uint64_t offset = 0;  // relative to the data section
  for (const Tensor& t : tensors_) {
    put_string(&out, t.name);
    put<uint32_t>(&out, static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) put<int64_t>(&out, ne);
    put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    put<uint64_t>(&out, offset);
    offset += (t.data.size() + a - 1) / a * a;
  }
  pad_to(&out, a);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    pad_to(&out, a);
  }
  return out;
}

Status GgufWriter::write(const std::string& path, uint32_t version) const {
  const std::vector<uint8_t> bytes = to_bytes(version);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::io("{}: cannot create: {}", path, std::strerror(errno));
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (n != bytes.size() || !closed)
    return Status::io("{}: write failed: {}", path, std::strerror(errno));
  return Status::ok();
}

}  // namespace omnibus
