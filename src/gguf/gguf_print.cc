#include "gguf/gguf_print.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "gguf/gguf_quote.h"

namespace omnibus {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return out + "]";
}

std::string kv_type_string(const GgufKv& kv) {
  if (kv.type != GgufType::kArray) return gguf_type_name(kv.type);
  return fmt::format("array[{}]", gguf_type_name(kv.array_type));
}

const char* dtype_label(DType t) {
  const char* name = gguf_block_geometry(static_cast<uint32_t>(t)).name;
  return name != nullptr ? name : "?";
}

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

void print_gguf(const GgufFile& f, std::FILE* out, bool show_all_array_elements) {
  const size_t max_elements = show_all_array_elements ? std::numeric_limits<size_t>::max() : 8;
  const size_t max_chars = show_all_array_elements ? std::numeric_limits<size_t>::max() : 120;

  fmt::print(out, "file:        {}\n", f.path());
  fmt::print(out, "version:     {}\n", f.version());
  fmt::print(out, "file size:   {} bytes ({:.2f} MiB)\n", f.file_size(), f.file_size() / kMiB);
  fmt::print(out, "metadata:    {} keys\n", f.metadata().size());
  fmt::print(out, "tensors:     {}\n", f.tensors().size());
  fmt::print(out, "alignment:   {}\n", f.alignment());
  fmt::print(out, "data offset: {}\n", f.data_offset());

  size_t key_w = 3, type_w = 4;
  for (const GgufKv& kv : f.metadata()) {
    key_w = std::max(key_w, gguf_escape(kv.key, 80).size());
    type_w = std::max(type_w, kv_type_string(kv).size());
  }
  fmt::print(out, "\nmetadata:\n  {:<{}}  {:<{}}  {}\n", "key", key_w, "type", type_w, "value");
  for (const GgufKv& kv : f.metadata()) {
    fmt::print(out, "  {:<{}}  {:<{}}  {}\n", gguf_escape(kv.key, 80), key_w, kv_type_string(kv),
               type_w, f.value_to_string(kv, max_elements, max_chars));
  }

  size_t name_w = 4, shape_w = 5;
  for (const GgufTensor& t : f.tensors()) {
    name_w = std::max(name_w, gguf_escape(t.name, 64).size());
    shape_w = std::max(shape_w, shape_string(t.shape).size());
  }
  fmt::print(out, "\ntensors:\n  {:>5}  {:<{}}  {:<6}  {:<{}}  {:>12}  {:>12}\n", "#", "name",
             name_w, "dtype", "shape", shape_w, "offset", "bytes");
  struct Total {
    size_t count = 0;
    uint64_t bytes = 0;
    int64_t elements = 0;
  };
  std::map<std::string, Total> totals;
  Total all;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    fmt::print(out, "  {:>5}  {:<{}}  {:<6}  {:<{}}  {:>12}  {:>12}\n", i, gguf_escape(t.name, 64),
               name_w, dtype_label(t.type), shape_string(t.shape), shape_w, t.offset, t.n_bytes);
    Total& tot = totals[dtype_label(t.type)];
    ++tot.count;
    tot.bytes += t.n_bytes;
    tot.elements += t.n_elements;
    ++all.count;
    all.bytes += t.n_bytes;
    all.elements += t.n_elements;
  }

  fmt::print(out, "\ntotals by dtype:\n  {:<6}  {:>7}  {:>14}  {:>10}\n", "dtype", "tensors",
             "elements", "MiB");
  for (const auto& [name, tot] : totals) {
    fmt::print(out, "  {:<6}  {:>7}  {:>14}  {:>10.2f}\n", name, tot.count, tot.elements,
               tot.bytes / kMiB);
  }
  fmt::print(out, "  {:<6}  {:>7}  {:>14}  {:>10.2f}\n", "all", all.count, all.elements,
             all.bytes / kMiB);
}

}  // namespace omnibus
