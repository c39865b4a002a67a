#!/usr/bin/env bash
# Batched generation throughput: omnibus's engine against llama-batched-bench,
# same GGUF, same threads, in one run (A B per batch size).
#
# For each N in NPL (default "16 32 64"):
#   A: llama-batched-bench -m MODEL -c CTX -b 2048 -ub 512 -npp PP -ntg TG -npl N -t THREADS --output-format jsonl
#   B: omnibus bench -m MODEL --num-requests N --concurrency N --input-len PP --output-len TG
#        --threads THREADS --max-num-batched-tokens BUDGET --json FILE
# and prints a markdown table of like-for-like pairs:
#   generation speed: llama.cpp's S_TG (N*TG / time of its generation phase)
#     vs omnibus's generation_throughput (tokens generated after the last
#     request's first token / time from then to the end);
#   total speed: (PP+TG)*N / whole run, both;
# plus omnibus's output tokens/s over the whole run (prefill included).
# BUDGET defaults to N*PP: every prompt is prefilled in the first step, then
# all N sequences decode together, which is batched-bench's shape (its
# prompts all go first too, in ubatches of 512).
#
# Also writes OUT.svg: generation tok/s against sequences for both engines
# (tools/bench/plot_svg.py).
#
# Usage: tools/bench/batched.sh MODEL OUT
# Environment: OMNIBUS_LLAMA_CPP_DIR (default .ref/build), OMNIBUS_BIN (default
# build/omnibus), NPL, PP (128), TG (128), THREADS (2), BUDGET (N*PP), LLAMA_ARGS
# (more llama-batched-bench arguments, e.g. "--no-repack" where its AMX buffer crashes).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n '2,25p' "$0"; exit 2; }
model=$1
out=$2
npl=${NPL:-16 32 64}
pp=${PP:-128}
tg=${TG:-128}
threads=${THREADS:-2}
batched=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}/bin/llama-batched-bench
omnibus=${OMNIBUS_BIN:-build/omnibus}
for exe in "$batched" "$omnibus"; do
  [ -x "$exe" ] || { echo "batched: $exe not found (see docs/reference.md)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

{
  echo "| sequences | llama.cpp S_TG tok/s | omnibus generation tok/s | generation ratio | llama.cpp total tok/s | omnibus total tok/s | total ratio | omnibus output tok/s (whole run) |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$work/table.md"
for n in $npl; do
  ctx=$(( n * (pp + tg) + 256 ))
  echo "batched: N=$n llama-batched-bench" >&2
  # shellcheck disable=SC2086  # LLAMA_ARGS is split into words on purpose
  "$batched" -m "$model" -c "$ctx" -b 2048 -ub 512 -npp "$pp" -ntg "$tg" -npl "$n" -t "$threads" \
    --output-format jsonl ${LLAMA_ARGS:-} > "$work/llama-$n.txt" 2> "$work/llama-$n.err"
  echo "batched: N=$n omnibus bench" >&2
  "$omnibus" bench -m "$model" --num-requests "$n" --concurrency "$n" --input-len "$pp" \
    --output-len "$tg" --threads "$threads" --max-num-batched-tokens "${BUDGET:-$(( n * pp ))}" --json "$work/omnibus-$n.json" > /dev/null 2> "$work/omnibus-$n.err"
  python3 - "$work/llama-$n.txt" "$work/omnibus-$n.json" "$n" "$pp" "$tg" "$work/points.jsonl" >> "$work/table.md" <<'PY'
import json, sys
llama_path, omni_path = sys.argv[1], sys.argv[2]
n, pp, tg = map(int, sys.argv[3:6])
rows = [json.loads(l) for l in open(llama_path) if l.startswith("{")]
l = rows[-1]
o = json.load(open(omni_path))
out = o["output_throughput"]
total = n * (pp + tg) / o["duration_s"]
gen = o["generation_throughput"]
print(f"| {n} | {l['speed_tg']:.1f} | {gen:.1f} | {gen / l['speed_tg']:.2f}x | "
      f"{l['speed']:.1f} | {total:.1f} | {total / l['speed']:.2f}x | {out:.1f} |")
with open(sys.argv[6], "a") as f:
    f.write(json.dumps({"n": n, "llama": l["speed_tg"], "omnibus": gen}) + "\n")
PY
done
{
  echo
  echo "Commands: \`$batched -m $model -c <N*(PP+TG)+256> -b 2048 -ub 512 -npp $pp -ntg $tg -npl N -t $threads${LLAMA_ARGS:+ $LLAMA_ARGS}\`"
  echo "and \`$omnibus bench -m $model --num-requests N --concurrency N --input-len $pp --output-len $tg --threads $threads --max-num-batched-tokens ${BUDGET:-N*PP}\`."
} >> "$work/table.md"
cat "$work/table.md" | tee "$out"
python3 - "$work/points.jsonl" "$work/plot.json" "$pp" "$tg" "$threads" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
pp, tg, threads = sys.argv[3:6]
json.dump({"title": f"Batched generation, PP {pp} / TG {tg}, {threads} threads",
           "x_label": "parallel sequences", "y_label": "generated tokens/s (generation phase)",
           "series": [{"name": "omnibus", "points": [[r["n"], r["omnibus"]] for r in rows]},
                      {"name": "llama.cpp (llama-batched-bench S_TG)", "points": [[r["n"], r["llama"]] for r in rows]}]},
          open(sys.argv[2], "w"))
PY
python3 tools/bench/plot_svg.py "$work/plot.json" "$out.svg"
