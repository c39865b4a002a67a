#!/usr/bin/env bash
# Output tokens/s of each --kv-cache-dtype at 64 concurrent sequences when
# memory does not limit concurrency (issue "Quantized KV cache"), rounds
# alternating the dtypes so that every dtype sees the same machine state.
#   omnibus bench -m MODEL -t THREADS --num-requests 64 --concurrency 64
#       --input-len IN --output-len OUT --kv-cache-memory 1GiB --kv-cache-dtype X
# Prints a markdown table: median output tok/s (min-max) and the change vs f16.
#
# Usage: tools/bench/kv_dtype_speed.sh [MODEL] [ROUNDS]   (smollm2-135m, 3)
# Environment: OMNIBUS_BIN (build/omnibus), DTYPES ("f16 q8 q4 kivi2"),
# IN (128), OUT (128), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-smollm2-135m}
rounds=${2:-3}
bin=${OMNIBUS_BIN:-build/omnibus}
dtypes=${DTYPES:-f16 q8 q4 kivi2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq 1 "$rounds"); do
  for d in $dtypes; do
    echo "kv_dtype_speed: round $r/$rounds: $d" >&2
    "$bin" bench -m "$model" -t "${THREADS:-2}" --num-requests 64 --concurrency 64 \
      --input-len "${IN:-128}" --output-len "${OUT:-128}" --kv-cache-memory 1GiB \
      --kv-cache-dtype "$d" --json "$work/$d.$r.json" >/dev/null 2>&1
  done
done
python3 - "$work" "$rounds" $dtypes <<'PY'
import json, statistics, sys
work, rounds, dtypes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
res = {}
for d in dtypes:
    v = [json.load(open(f"{work}/{d}.{r}.json"))["output_throughput"] for r in range(1, rounds + 1)]
    res[d] = (statistics.median(v), min(v), max(v))
print("| dtype | output tok/s, median (min-max) | vs f16 |")
print("|---|---|---|")
base = res.get("f16", (None,))[0]
for d in dtypes:
    m, lo, hi = res[d]
    vs = f"{(m / base - 1) * 100:+.1f}%" if base else "-"
    print(f"| {d} | {m:.1f} ({lo:.1f}-{hi:.1f}) | {vs} |")
PY
