// omnibus bench --task embed: an embedding workload through the engine.
// num_requests prompts of random tokens (lengths uniform in --input-len A:B,
// [CLS]/[SEP]-free ids drawn from the vocabulary), at most `concurrency` in
// flight (0: all at once), each an embedding request (Request::embed).
// Prints embeddings/s, prompt tokens/s and per-request latency p50/p90/p99
// (submit to the vector), and writes them to --json when given.
//
// Thread-safety: runs on the calling thread; the engine has its own.
#pragma once

#include <string>

#include "cli/engine_flags.h"

namespace omnibus {

struct EmbedBenchOptions {
  int num_requests = 64;
  int concurrency = 0;
  int min_len = 32, max_len = 512;
  int seed = 1;
  std::string json_path;
};

int run_embed_bench(const ModelFlags& model, const EngineFlags& engine, const EmbedBenchOptions& o);

}  // namespace omnibus
