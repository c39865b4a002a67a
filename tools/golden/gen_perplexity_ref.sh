#!/usr/bin/env bash
# Reference perplexity from llama.cpp's llama-perplexity (comparison only).
#
# Runs, for each context size (default 512 and 128):
#   llama-perplexity -m MODEL -f tests/data/perplexity.txt -c CTX -t 2
# and writes tests/golden/perplexity/<name>.json:
#   {"model", "model_sha256", "text", "llama_cpp_version", "method",
#    "ctx_size", "perplexity", "n_chunks", "command",      <- the first run
#    "runs": [{"ctx_size", "perplexity", "n_chunks", "n_scored_tokens",
#              "command"}, ...]}
# (the "Final estimate: PPL = x" line of each run). llama-perplexity scores
# the second half of every ctx-sized chunk ("method" spells it out);
# `omnibus perplexity` must do the same to be comparable.
#
# Usage: tools/golden/gen_perplexity_ref.sh MODEL NAME [CTX...]
#   e.g. tools/golden/gen_perplexity_ref.sh models/smollm2-135m.gguf smollm2-135m
# OMNIBUS_LLAMA_CPP_DIR: the llama.cpp build (default .ref/build, made by
# scripts/build_llama_cpp.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

[ $# -ge 2 ] || { sed -n '2,20p' "$0"; exit 2; }
model=$1
name=$2
shift 2
ctx_sizes=("$@")
[ ${#ctx_sizes[@]} -gt 0 ] || ctx_sizes=(512 128)

build=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}
bin=$build/bin/llama-perplexity
[ -x "$bin" ] || { echo "gen_perplexity_ref: $bin not found; run scripts/build_llama_cpp.sh" >&2; exit 1; }
text=tests/data/perplexity.txt
out_dir=tests/golden/perplexity
mkdir -p "$out_dir"
log_dir=$(mktemp -d)
trap 'rm -rf "$log_dir"' EXIT

runs=()
for ctx in "${ctx_sizes[@]}"; do
  cmd=(llama-perplexity -m "$model" -f "$text" -c "$ctx" -t 2)
  echo "gen_perplexity_ref: ${cmd[*]}" >&2
  log=$log_dir/ppl-$ctx.log
  if ! "$bin" "${cmd[@]:1}" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    exit 1
  fi
  ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$log" | tail -n 1)
  [ -n "$ppl" ] || { tail -n 20 "$log" >&2; echo "gen_perplexity_ref: no Final estimate" >&2; exit 1; }
  chunks=$(sed -n 's/.*calculating perplexity over \([0-9]*\) chunks.*/\1/p' "$log" | tail -n 1)
  echo "gen_perplexity_ref: ctx $ctx: PPL = $ppl over ${chunks:-?} chunks" >&2
  runs+=("$ctx" "$ppl" "${chunks:-0}" "${cmd[*]}")
done

# The version of the build, as the forward golden data records it.
commit=$(sed -n 's/.*LLAMA_COMMIT = "\([^"]*\)".*/\1/p' "$build/common/build-info.cpp" 2>/dev/null || true)
python3 - "$out_dir/$name.json" "$model" "$name" "$text" "${commit:-unknown}" "${runs[@]}" <<'PY'
import hashlib, json, sys
out, model, name, text, commit, *flat = sys.argv[1:]
h = hashlib.sha256()
with open(model, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
runs = []
for i in range(0, len(flat), 4):
    ctx, chunks = int(flat[i]), int(flat[i + 2])
    runs.append({"ctx_size": ctx, "perplexity": float(flat[i + 1]), "n_chunks": chunks,
                 "n_scored_tokens": chunks * (ctx - ctx // 2 - 1), "command": flat[i + 3]})
doc = {
    "model": name,
    "model_sha256": h.hexdigest(),
    "text": text,
    "llama_cpp_version": f"llama-cpp-python 0.3.36 (vendored llama.cpp commit {commit})",
    "method": "llama-perplexity: tokenize the whole text once (add_special=true, "
              "parse_special=false); split into floor(n_tokens / ctx_size) chunks of ctx_size "
              "tokens, each evaluated from an empty cache (its first token replaced by BOS when "
              "the model adds BOS); in each chunk score tokens ctx_size/2+1 .. ctx_size-1 from "
              "the logits of the position before; PPL = exp(mean NLL over all scored tokens)",
    # The first run also at the top level, for consumers that want one number.
    "ctx_size": runs[0]["ctx_size"],
    "perplexity": runs[0]["perplexity"],
    "n_chunks": runs[0]["n_chunks"],
    "command": runs[0]["command"],
    "runs": runs,
}
with open(out, "w") as f:
    f.write(json.dumps(doc, indent=1) + "\n")
print(f"gen_perplexity_ref: wrote {out}", file=sys.stderr)
PY
