#!/usr/bin/env bash
# omnibus against itself: two binaries (before/after a change), A B A B, one run.
#
# Each round runs, for A then B, on the same GGUF and threads:
#   single:  omnibus bench -m MODEL --pp 512 --tg 128 -r 1 --json F
#   batched: omnibus bench -m MODEL --num-requests 64 --input-len 128 --output-len 64 --json F
# and prints a markdown table of the medians (min-max in brackets) and B / A.
#
# Usage: tools/bench/ab_omnibus.sh BIN_A BIN_B MODEL [ROUNDS]
#   e.g. tools/bench/ab_omnibus.sh /tmp/omnibus-before build/omnibus models/smollm2-135m.gguf 3
# Environment: THREADS (default 2).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0"; exit 2; }
bin_a=$1
bin_b=$2
model=$3
rounds=${4:-3}
threads=${THREADS:-2}
for exe in "$bin_a" "$bin_b"; do
  [ -x "$exe" ] || { echo "ab_omnibus: $exe not found" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for r in $(seq 1 "$rounds"); do
  for side in a b; do
    exe=$bin_a
    [ "$side" = b ] && exe=$bin_b
    echo "ab_omnibus: round $r/$rounds: $side single" >&2
    "$exe" bench -m "$model" -t "$threads" --pp 512 --tg 128 -r 1 --json "$work/single-$side-$r.json" >/dev/null
    echo "ab_omnibus: round $r/$rounds: $side batched" >&2
    "$exe" bench -m "$model" -t "$threads" --num-requests 64 --input-len 128 --output-len 64 \
      --json "$work/batched-$side-$r.json" >/dev/null
  done
done

python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def vals(kind, side, key):
    return [json.load(open(f"{work}/{kind}-{side}-{r}.json"))[key] for r in range(1, rounds + 1)]
rows = [("prefill tok/s (pp512)", "single", "pp_tok_s"),
        ("decode tok/s (tg128)", "single", "tg_tok_s"),
        ("64 requests, output tok/s", "batched", "output_throughput")]
print("| measure | A | B | B / A |")
print("|---|---|---|---|")
for name, kind, key in rows:
    a, b = vals(kind, "a", key), vals(kind, "b", key)
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| {name} | {ma:.1f} [{min(a):.1f}-{max(a):.1f}] | {mb:.1f} [{min(b):.1f}-{max(b):.1f}] "
          f"| {mb / ma:.3f} |")
EOF
