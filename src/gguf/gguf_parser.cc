#include "gguf/gguf_parser.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "gguf/gguf_quote.h"

namespace omnibus {

namespace {

// Smallest possible encodings, used to reject impossible counts before any
// allocation sized by them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
constexpr int64_t kMaxAlignment = int64_t{1} << 30;  // far above any real file's 32 or 64

}  // namespace

// How read_entry_name() words its messages for a metadata key and a tensor name.
const GgufParser::EntryKind GgufParser::kKeyEntry{"metadata", "key", "key", "defined by"};
const GgufParser::EntryKind GgufParser::kTensorEntry{"tensor", "name", "tensor name", "used by"};

namespace {

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

std::string name_for_message(std::string_view s) { return gguf_quote(s, 80, '\''); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return out + "]";
}

}  // namespace

Status GgufParser::parse(GgufFile* f) {
  GgufParser p(f);
  OMNIBUS_RETURN_IF_ERROR(p.parse_header());
  f->kvs_.reserve(p.n_kv_);
  for (uint64_t i = 0; i < p.n_kv_; ++i) OMNIBUS_RETURN_IF_ERROR(p.parse_kv(i));
  OMNIBUS_RETURN_IF_ERROR(p.parse_alignment());
  f->tensors_.reserve(p.n_tensors_);
  for (uint64_t i = 0; i < p.n_tensors_; ++i) OMNIBUS_RETURN_IF_ERROR(p.parse_tensor_info(i));
  return p.place_tensors();
}

Status GgufParser::need(uint64_t n, std::string_view what) {
  if (n <= f_->size_ - pos_) return Status::ok();
  return corrupt(pos_, "truncated: {} needs {} bytes but the file ends at byte {}", what, n,
                 f_->size_);
}

Status GgufParser::read_u32(uint32_t* v, std::string_view what) {
  OMNIBUS_RETURN_IF_ERROR(need(4, what));
  std::memcpy(v, f_->base_ + pos_, 4);
  pos_ += 4;
  return Status::ok();
}

Status GgufParser::read_u64(uint64_t* v, std::string_view what) {
  OMNIBUS_RETURN_IF_ERROR(need(8, what));
  std::memcpy(v, f_->base_ + pos_, 8);
  pos_ += 8;
  return Status::ok();
}

Status GgufParser::read_string(std::string_view* s, std::string_view what) {
  const uint64_t at = pos_;
  uint64_t len = 0;
  OMNIBUS_RETURN_IF_ERROR(read_u64(&len, fmt::format("{} length", what)));
  if (len > f_->size_ - pos_) {
    return corrupt(at, "{} length {} extends beyond end of file (size {})", what, len, f_->size_);
  }
  *s = std::string_view(reinterpret_cast<const char*>(f_->base_ + pos_), len);
  pos_ += len;
  return Status::ok();
}

Status GgufParser::parse_header() {
  item_ = "header: ";
  if (f_->size_ < 4 || std::memcmp(f_->base_, "GGUF", 4) != 0) {
    const size_t n = std::min<uint64_t>(f_->size_, 4);
    const std::string got(reinterpret_cast<const char*>(f_->base_), n);
    return corrupt(0, "bad magic {} (expected \"GGUF\"); not a GGUF file", gguf_quote(got));
  }
  pos_ = 4;
  uint32_t version = 0;
  OMNIBUS_RETURN_IF_ERROR(read_u32(&version, "version"));
  if (version == 1) {
    return unsupported(4,
                       "GGUF version 1 is not supported (only versions 2 and 3); "
                       "convert the file with a current llama.cpp");
  }
  if (version != 0 && (version & 0xFFFF) == 0) {
    return unsupported(4, "big-endian GGUF (version field {:#010x}) is not supported", version);
  }
  if (version != 2 && version != 3) {
    return unsupported(4, "GGUF version {} is not supported (only versions 2 and 3)", version);
  }
  f_->version_ = version;
  OMNIBUS_RETURN_IF_ERROR(read_u64(&n_tensors_, "n_tensors"));
  OMNIBUS_RETURN_IF_ERROR(read_u64(&n_kv_, "n_kv"));
  const uint64_t rest = f_->size_ - kHeaderBytes;
  if (n_kv_ > rest / kMinKvBytes) {
    return corrupt(16, "n_kv {} cannot fit in the {} bytes after the header", n_kv_, rest);
  }
  if (n_tensors_ > rest / kMinTensorInfoBytes) {
    return corrupt(8, "n_tensors {} cannot fit in the {} bytes after the header", n_tensors_, rest);
  }
  return Status::ok();
}

Status GgufParser::read_entry_name(uint64_t i, const EntryKind& kind,
                                   std::unordered_map<std::string_view, size_t>* index,
                                   std::string_view* name) {
  const uint64_t start = pos_;
  item_ = fmt::format("{} {}: ", kind.item, i);
  OMNIBUS_RETURN_IF_ERROR(read_string(name, kind.field));
  if (name->empty()) return corrupt(start, "empty {}", kind.noun);
  item_ = fmt::format("{} {} ({}): ", kind.item, i, name_for_message(*name));
  auto [it, inserted] = index->emplace(*name, i);
  if (!inserted) {
    return corrupt(start, "duplicate {} (first {} {} {})", kind.noun, kind.first, kind.item,
                   it->second);
  }
  return Status::ok();
}

Status GgufParser::read_type(GgufType* type, std::string_view what) {
  const uint64_t at = pos_;
  uint32_t raw = 0;
  OMNIBUS_RETURN_IF_ERROR(read_u32(&raw, what));
  if (raw >= kGgufTypeCount) return corrupt(at, "unknown {} {}", what, raw);
  *type = static_cast<GgufType>(raw);
  return Status::ok();
}

Status GgufParser::parse_kv(uint64_t i) {
  GgufKv kv;
  kv.key_offset = pos_;
  std::string_view key;
  OMNIBUS_RETURN_IF_ERROR(read_entry_name(i, kKeyEntry, &f_->kv_index_, &key));
  kv.key = std::string(key);
  OMNIBUS_RETURN_IF_ERROR(read_type(&kv.type, "value type"));

  if (kv.type == GgufType::kArray) {
    const uint64_t elem_at = pos_;
    OMNIBUS_RETURN_IF_ERROR(read_type(&kv.array_type, "array element type"));
    if (kv.array_type == GgufType::kArray) {
      return unsupported(elem_at, "arrays of arrays are not supported");
    }
    const uint64_t count_at = pos_;
    OMNIBUS_RETURN_IF_ERROR(read_u64(&kv.array_size, "array size"));
    const uint64_t remaining = f_->size_ - pos_;
    const uint64_t elem_min =
        kv.array_type == GgufType::kString ? 8 : gguf_type_size(kv.array_type);
    if (kv.array_size > remaining / elem_min) {
      return corrupt(count_at, "array of {} {} values extends beyond end of file (size {})",
                     kv.array_size, gguf_type_name(kv.array_type), f_->size_);
    }
    kv.value = f_->base_ + pos_;
    if (kv.array_type == GgufType::kString) {
      for (uint64_t e = 0; e < kv.array_size; ++e) {
        const uint64_t at = pos_;
        uint64_t len = 0;
        OMNIBUS_RETURN_IF_ERROR(read_u64(&len, "string length"));
        if (len > f_->size_ - pos_) {
          return corrupt(at,
                         "array element {}: string length {} extends beyond end of file (size {})",
                         e, len, f_->size_);
        }
        pos_ += len;
      }
    } else {
      pos_ += kv.array_size * elem_min;
    }
    kv.value_bytes = pos_ - (kv.value - f_->base_);
  } else if (kv.type == GgufType::kString) {
    std::string_view s;
    OMNIBUS_RETURN_IF_ERROR(read_string(&s, "string value"));
    kv.value = reinterpret_cast<const uint8_t*>(s.data());
    kv.value_bytes = s.size();
  } else {
    const uint64_t n = gguf_type_size(kv.type);
    OMNIBUS_RETURN_IF_ERROR(need(n, fmt::format("{} value", gguf_type_name(kv.type))));
    kv.value = f_->base_ + pos_;
    kv.value_bytes = n;
    pos_ += n;
  }
  f_->kvs_.push_back(std::move(kv));
  return Status::ok();
}

Status GgufParser::parse_alignment() {
  const GgufKv* kv = f_->find(kGgufAlignmentKey);
  if (kv == nullptr) return Status::ok();
  item_ = fmt::format("metadata '{}': ", kGgufAlignmentKey);
  if (!gguf_type_is_integer(kv->type)) {
    return corrupt(kv->key_offset, "has type {}, expected u32", gguf_type_name(kv->type));
  }
  const std::optional<int64_t> a = f_->get_int(kGgufAlignmentKey);
  if (!a || *a <= 0 || *a > kMaxAlignment || !is_power_of_two(static_cast<uint64_t>(*a))) {
    return corrupt(kv->key_offset, "value {} is not a power of two in [1, {}]",
                   f_->value_to_string(*kv), kMaxAlignment);
  }
  f_->alignment_ = static_cast<uint64_t>(*a);
  return Status::ok();
}

Status GgufParser::parse_tensor_info(uint64_t i) {
  const uint64_t start = pos_;
  std::string_view name;
  OMNIBUS_RETURN_IF_ERROR(read_entry_name(i, kTensorEntry, &f_->tensor_index_, &name));

  GgufTensor t;
  t.name = std::string(name);
  t.info_offset = start;
  const uint64_t dims_at = pos_;
  uint32_t n_dims = 0;
  OMNIBUS_RETURN_IF_ERROR(read_u32(&n_dims, "n_dims"));
  if (n_dims < 1 || n_dims > kGgufMaxDims) {
    return corrupt(dims_at, "n_dims {} is out of range [1, {}]", n_dims, kGgufMaxDims);
  }
  t.shape.resize(n_dims);
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t at = pos_;
    uint64_t raw = 0;
    OMNIBUS_RETURN_IF_ERROR(read_u64(&raw, "dimension"));
    const int64_t ne = static_cast<int64_t>(raw);
    if (ne <= 0) return corrupt(at, "dimension {} is {} (must be > 0)", d, ne);
    if (ne > std::numeric_limits<int64_t>::max() / n_elements) {
      return corrupt(at, "dimension {} ({}) makes the element count overflow int64", d, ne);
    }
    n_elements *= ne;
    t.shape[d] = ne;
  }
  t.n_elements = n_elements;

  const uint64_t type_at = pos_;
  uint32_t type = 0;
  OMNIBUS_RETURN_IF_ERROR(read_u32(&type, "tensor type"));
  const GgufBlockGeometry g = gguf_block_geometry(type);
  if (g.block_size == 0) {
    if (g.name != nullptr) {
      return unsupported(type_at, "tensor type {} (ggml type {}) is not supported", g.name, type);
    }
    return corrupt(type_at, "unknown tensor type id {}", type);
  }
  t.type = static_cast<DType>(type);
  if (t.shape[0] % g.block_size != 0) {
    return corrupt(type_at, "row of {} elements is not a multiple of the {} block size {}",
                   t.shape[0], g.name, g.block_size);
  }
  // n_bytes = (ne0 / block_size) * type_size * ne1 * ne2 * ne3, overflow-checked.
  uint64_t n_bytes = 0;
  bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(t.shape[0] / g.block_size),
                                         g.type_size, &n_bytes);
  for (uint32_t d = 1; d < n_dims && !overflow; ++d) {
    overflow = __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(t.shape[d]), &n_bytes);
  }
  if (overflow || n_bytes > std::numeric_limits<size_t>::max()) {
    return corrupt(type_at, "{} tensor of shape {} has a size in bytes that overflows", g.name,
                   shape_string(t.shape));
  }
  t.n_bytes = static_cast<size_t>(n_bytes);
  OMNIBUS_RETURN_IF_ERROR(read_u64(&t.offset, "data offset"));
  f_->tensors_.push_back(std::move(t));
  return Status::ok();
}

Status GgufParser::place_tensors() {
  const uint64_t a = f_->alignment_;
  // Like ggml, a file without tensors has its (empty) data section right after
  // the tensor infos, unpadded; otherwise it starts at the next multiple of a.
  f_->data_offset_ = pos_;
  if (f_->tensors_.empty()) return Status::ok();
  // pos_ <= size, so pos_ + a - 1 overflows only for absurd alignments; check anyway.
  uint64_t padded = 0;
  if (__builtin_add_overflow(pos_, a - 1, &padded)) padded = std::numeric_limits<uint64_t>::max();
  f_->data_offset_ = padded / a * a;
  if (f_->data_offset_ > f_->size_) {
    item_ = "data section: ";
    return corrupt(
        pos_,
        "starts at byte {} (tensor infos padded to alignment {}), beyond end of file (size {})",
        f_->data_offset_, a, f_->size_);
  }
  std::vector<size_t> order(f_->tensors_.size());
  for (size_t i = 0; i < f_->tensors_.size(); ++i) {
    GgufTensor& t = f_->tensors_[i];
    item_ = fmt::format("tensor {} ({}): ", i, name_for_message(t.name));
    if (t.offset % a != 0) {
      return Status::corrupt(
          "{}: {}data offset {} is not a multiple of the alignment {} (tensor info at byte {})",
          f_->path_, item_, t.offset, a, t.info_offset);
    }
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(f_->data_offset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, uint64_t{t.n_bytes}, &end)) {
      return Status::corrupt("{}: {}data offset {} + {} bytes overflows (tensor info at byte {})",
                             f_->path_, item_, t.offset, t.n_bytes, t.info_offset);
    }
    if (end > f_->size_) {
      return Status::corrupt(
          "{}: {}data [{}, {}) extends beyond end of file (size {}) (tensor info at byte {})",
          f_->path_, item_, begin, end, f_->size_, t.info_offset);
    }
    t.file_offset = begin;
    t.data = f_->base_ + begin;
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return f_->tensors_[x].file_offset < f_->tensors_[y].file_offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& prev = f_->tensors_[order[k - 1]];
    const GgufTensor& cur = f_->tensors_[order[k]];
    if (cur.file_offset < prev.file_offset + prev.n_bytes) {
      return Status::corrupt(
          "{}: tensor {} ({}): data [{}, {}) overlaps tensor {} ({}) data [{}, {}) (tensor info at "
          "byte {})",
          f_->path_, order[k], name_for_message(cur.name), cur.file_offset,
          cur.file_offset + cur.n_bytes, order[k - 1], name_for_message(prev.name),
          prev.file_offset, prev.file_offset + prev.n_bytes, cur.info_offset);
    }
  }
  return Status::ok();
}

}  // namespace omnibus
