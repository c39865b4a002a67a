// `omnibus bench --read-probe` (single-stream mode): each timed decode run is
// followed by a read probe (kernels/read_probe.h) with the same number of
// threads, and the report states the decode's weight stream in GiB/s against
// the probe taken right after it (issue 35's "decode at >= 95% of the read
// probe", measured in one process and one minute).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace omnibus {

// The file bytes of weights one decode token reads: every tensor but the
// token embedding (a token reads one row of it) unless no separate output
// tensor exists (the head is tied to it); of a mixture of experts' expert
// tensors (names with "_exps"), the n_expert_used of n_expert slices a token
// is routed to. File bytes, the basis llama.cpp's figures take too (omnibus's
// packed layouts are 1-3% larger: docs/quant-formats.md).
uint64_t decode_bytes_per_token(const GgufFile& file, const ModelConfig& config);

// Prints the report's line and adds its keys to `j`: the decode's GiB/s per
// run (tok/s x bytes), the probe's GiB/s after each, and each run's ratio;
// medians with min-max. tg_rates and probe_bytes_s are per run, same length.
void report_read_probe(int tg, uint64_t bytes_per_token, const std::vector<double>& tg_rates,
                       const std::vector<double>& probe_bytes_s, int n_threads, nlohmann::json& j);

// The weights probe (dense models): after each run, the read probe's loops
// over the packed weights' own pages (kernels/read_probe.h, read_spans),
// `packed_bytes` a pass, fastest pass `pass_s[i]` seconds. A token reads
// every packed byte once, so the decode's fraction of this ceiling is
// pass_s x tok/s, whatever the packed layout's size against the file's.
// Prints its lines and adds its keys to `j`; same lengths as tg_rates.
void report_weights_probe(uint64_t packed_bytes, const std::vector<double>& tg_rates,
                          const std::vector<double>& pass_s, nlohmann::json& j);

}  // namespace omnibus
