// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch every
// metadata getter, every tensor's first and last data byte, and the printer.
// Any crash, sanitizer report or hang is a bug: malformed input must come back
// as a Status. Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "gguf/gguf_file.h"
#include "gguf/gguf_print.h"

namespace {

volatile uint64_t g_sink;  // keeps reads from being optimized away

void touch(const omnibus::GgufFile& f) {
  uint64_t h = f.version() + f.alignment() + f.data_offset() + f.file_size();
  for (const omnibus::GgufKv& kv : f.metadata()) {
    if (f.find(kv.key) != &kv) __builtin_trap();  // keys are unique, find must hit this entry
    if (auto v = f.get_int(kv.key)) h += static_cast<uint64_t>(*v);
    if (auto v = f.get_float(kv.key)) h += static_cast<uint64_t>(*v != 0);
    if (auto v = f.get_bool(kv.key)) h += *v;
    if (auto v = f.get_string(kv.key)) h += v->size();
    if (auto v = f.get_string_array(kv.key)) {
      for (std::string_view s : *v) h += s.empty() ? 0 : static_cast<uint8_t>(s.back());
    }
    if (auto v = f.get_float_array(kv.key)) h += v->size();
    if (auto v = f.get_int_array(kv.key)) h += v->size();
    h += f.require_int(kv.key).is_ok() + f.require_float(kv.key).is_ok() +
         f.require_string(kv.key).is_ok();
    h += f.value_to_string(kv, 4, 16).size();
  }
  for (const omnibus::GgufTensor& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    if (t.n_bytes == 0 || t.data == nullptr) __builtin_trap();  // dims > 0, so never empty
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    h += p[0] + p[t.n_bytes - 1];
  }
  g_sink = h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = omnibus::GgufFile::from_bytes(data, size, "fuzz.gguf");
  if (!r.is_ok()) {
    if (r.status().message().empty()) __builtin_trap();  // every error explains itself
    return 0;
  }
  touch(**r);
  static std::FILE* devnull = std::fopen("/dev/null", "w");
  if (devnull != nullptr) omnibus::print_gguf(**r, devnull, (size & 1) != 0);
  return 0;
}
