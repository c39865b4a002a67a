#!/usr/bin/env bash
# The weight formats the bundled models do not use, end to end against
# llama.cpp: SmolLM2-135M requantized by llama.cpp's own llama-quantize to
# each TYPE, then on that same GGUF
#   perplexity:  omnibus perplexity  vs  llama-perplexity  (ctx 512, 2 threads)
#   speed:       tools/bench/single_stream.sh (pp512 / tg128, A B A B)
# and a markdown table of both to OUT, and OUT.svg: the prefill and decode
# ratios omnibus / llama.cpp per type (tools/bench/plot_svg.py).
#
# Requantizing an already 4-bit model loses some quality (the perplexities
# are higher than the bundled Q4_1's); what matters here is that both engines
# read the same file.
#
# Usage: tools/bench/other_formats.sh OUT [TYPE...]
#   default types: Q4_0 Q5_1 Q5_K_M F16 BF16 (Q5_K_M: Q5_K / Q6_K where rows are
#   multiples of 256, the FFN down projections; Q5_1 / Q8_0 elsewhere)
# Environment:
#   OMNIBUS_LLAMA_CPP_DIR  llama.cpp build (default .ref/build, from
#                          scripts/build_llama_cpp.sh)
#   ROUNDS                 single_stream.sh rounds (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."

[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
out=$1
shift
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(Q4_0 Q5_1 Q5_K_M F16 BF16)
build=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}
export OMNIBUS_LLAMA_CPP_DIR=$build
bin=$build/bin
for exe in "$bin/llama-quantize" "$bin/llama-perplexity" build/omnibus; do
  [ -x "$exe" ] || { echo "other_formats: $exe not found (scripts/build_llama_cpp.sh, make build)" >&2; exit 1; }
done
src=models/smollm2-135m.gguf
[ -f "$src" ] || { echo "other_formats: $src not found (scripts/setup.sh)" >&2; exit 1; }
text=tests/data/perplexity.txt
mkdir -p models/requant
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rows=()
for t in "${types[@]}"; do
  model=models/requant/smollm2-135m-$t.gguf
  if [ ! -f "$model" ]; then
    echo "other_formats: llama-quantize --allow-requantize $src $model $t" >&2
    "$bin/llama-quantize" --allow-requantize "$src" "$model" "$t" 2 >"$work/quantize.log" 2>&1 ||
      { tail -n 20 "$work/quantize.log" >&2; exit 1; }
  fi
  echo "other_formats: $t: perplexity" >&2
  ours=$(build/omnibus perplexity -m "$model" -f "$text" --ctx-size 512 --threads 2 2>/dev/null |
         sed -n 's/^perplexity: \([0-9.]*\).*/\1/p')
  ref=$("$bin/llama-perplexity" -m "$model" -f "$text" -c 512 -t 2 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  [ -n "$ours" ] && [ -n "$ref" ] || { echo "other_formats: $t: no perplexity" >&2; exit 1; }
  echo "other_formats: $t: speed" >&2
  tools/bench/single_stream.sh "$model" "$work/speed-$t.md" "${ROUNDS:-2}" >/dev/null
  # single_stream.sh's rows: | prefill ... | omnibus | llama.cpp | ratio |
  speed=$(python3 - "$work/speed-$t.md" <<'PY'
import sys
cells = {}
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split("|")[1:-1]]
    if len(parts) == 4 and parts[0].startswith(("prefill", "decode")):
        cells[parts[0].split()[0]] = f"{parts[2].split()[0]} | {parts[1].split()[0]} | {parts[3]}x"
print(cells["prefill"] + " | " + cells["decode"])
PY
)
  delta=$(python3 -c "print(f'{($ours / $ref - 1) * 100:+.3f}%')")
  rows+=("| $t | $ours | $ref | $delta | $speed |")
done

{
  echo "| type | omnibus PPL | llama.cpp PPL | diff | pp512 llama.cpp tok/s | omnibus | ratio | tg128 llama.cpp tok/s | omnibus | ratio |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out"

python3 - "$out" "$work/plot.json" <<'PY'
import json, sys
series = {"prefill pp512": [], "decode tg128": []}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.split("|")[1:-1]]
    if len(cells) != 10 or not cells[6].endswith("x"):
        continue
    series["prefill pp512"].append([cells[0], float(cells[6][:-1])])
    series["decode tg128"].append([cells[0], float(cells[9][:-1])])
json.dump({"title": "omnibus / llama.cpp on the same requantized SmolLM2 (1.0 = parity)",
           "x_label": "weight type", "y_label": "speed ratio",
           "series": [{"name": k, "points": v} for k, v in series.items()]}, open(sys.argv[2], "w"))
PY
python3 tools/bench/plot_svg.py "$work/plot.json" "$out.svg"
echo "other_formats: wrote $out and $out.svg" >&2
