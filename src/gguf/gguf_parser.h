// GgufParser (internal to src/gguf): fills a GgufFile from its bytes,
// checking every field against the file size before it is used.
//
// REQUIRES: f->base_ / f->size_ / f->path_ set. On error the GgufFile is left
// partly filled and must be discarded.
// Thread-safety: one parser per file, used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gguf/gguf_file.h"
#include "util/status.h"

namespace omnibus {

class GgufParser {
 public:
  static Status parse(GgufFile* f);

 private:
  explicit GgufParser(GgufFile* f) : f_(f) {}

  // Messages for an entry: "<item> i (<name>): ...", "empty <noun>",
  // "duplicate <noun> (first <first> <item> j)"; `field` names the string read.
  struct EntryKind {
    const char* item;
    const char* field;
    const char* noun;
    const char* first;
  };
  static const EntryKind kKeyEntry, kTensorEntry;

  Status parse_header();
  Status parse_kv(uint64_t i);
  Status parse_alignment();
  Status parse_tensor_info(uint64_t i);
  // Reads the name that opens entry i (a metadata key or a tensor name), sets
  // item_ for later messages and registers it in *index, rejecting an empty
  // or duplicate name.
  Status read_entry_name(uint64_t i, const EntryKind& kind,
                         std::unordered_map<std::string_view, size_t>* index,
                         std::string_view* name);
  Status place_tensors();

  // Bounds-checked reads at pos_; `what` names the field in the error message.
  Status need(uint64_t n, std::string_view what);
  Status read_u32(uint32_t* v, std::string_view what);
  Status read_u64(uint64_t* v, std::string_view what);
  // A u32 GgufType; an unknown one is an error naming `what`.
  Status read_type(GgufType* type, std::string_view what);
  // A GGUF string: u64 length + bytes; the view points into the file.
  Status read_string(std::string_view* s, std::string_view what);

  template <typename... Args>
  Status corrupt(uint64_t at, fmt::format_string<Args...> fmt_str, Args&&... args) {
    return Status::corrupt("{}: {}{} (at byte {})", f_->path_, item_,
                           fmt::format(fmt_str, std::forward<Args>(args)...), at);
  }
  template <typename... Args>
  Status unsupported(uint64_t at, fmt::format_string<Args...> fmt_str, Args&&... args) {
    return Status::unsupported("{}: {}{} (at byte {})", f_->path_, item_,
                               fmt::format(fmt_str, std::forward<Args>(args)...), at);
  }

  GgufFile* f_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string item_;  // "metadata 3 ('general.name'): ", prefixed to messages
};

}  // namespace omnibus
