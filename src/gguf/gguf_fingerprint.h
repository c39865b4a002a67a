// A model's identity for caches that outlive the process (the KV disk tier,
// kv/disk_tier.h): two files get the same fingerprint only if they hold the
// same header, metadata and tensor table, and agree on sampled weight bytes.
//
// What it hashes (xxh3_64), in order: the file size; every byte before the
// tensor data (header, metadata, tensor infos: names, types, shapes,
// offsets); and of every tensor, its first and last 4 KiB (all of it when
// smaller). A copy or rename of a file keeps it (unlike path + mtime); a
// fine-tune, a requantization or a different tokenizer changes it (every
// tensor's leading bytes, the types, the metadata). Cost: about
// 8 KiB x n_tensors read, milliseconds, instead of the whole file.
// Not covered: two files that differ only in the middle of every tensor's
// data (not something a real checkpoint does).
//
// Thread-safety: reads the file's read-only mapping; any thread.
#pragma once

#include <cstdint>

#include "gguf/gguf_file.h"

namespace omnibus {

uint64_t gguf_fingerprint(const GgufFile& file);

}  // namespace omnibus
