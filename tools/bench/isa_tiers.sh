#!/usr/bin/env bash
# One binary at two ISA tiers (kernels/cpu_features.h), side by side in one run:
# OMNIBUS_ISA=avx2 (A) against the CPU's best tier (B), rounds A B A B.
#
# Each round runs, for A then B, on the same GGUF and threads:
#   single:   omnibus bench -m MODEL --pp 512 --tg 128 -r 1 --json F
#   batched:  omnibus bench -m MODEL --num-requests 64 --concurrency 64 --input-len 128 --output-len 128
#             --max-num-batched-tokens 8192 --json F
#   one:      omnibus bench -m MODEL --num-requests 4 --concurrency 1 --input-len 128 --output-len 128 --json F
# then the read-bandwidth probe (kernels_microbench --benchmark_filter=ReadBandwidth/THREADS/1/:
# huge pages, the fastest of its three read shapes), and
# prints a markdown table of the medians (min-max in brackets), B / A, 64-concurrent over one
# request, and decode read rate (GGUF bytes x decode tok/s) as a fraction of the probe.
#
# Usage: tools/bench/isa_tiers.sh MODEL [ROUNDS]   e.g. tools/bench/isa_tiers.sh models/smollm2-135m.gguf 2
# Environment: THREADS (default 2), OMNIBUS (default build/omnibus), MICROBENCH (default
# build/kernels_microbench).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0"; exit 2; }
model=$1
rounds=${2:-2}
threads=${THREADS:-2}
exe=${OMNIBUS:-build/omnibus}
micro=${MICROBENCH:-build/kernels_microbench}
for f in "$exe" "$micro"; do [ -x "$f" ] || { echo "isa_tiers: $f not found (build it)" >&2; exit 1; }; done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$exe" bench -m "$model" -t "$threads" --pp 16 --tg 1 -r 1 --json "$work/tier.json" >/dev/null 2>&1
best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["isa"])' "$work/tier.json")

for r in $(seq 1 "$rounds"); do
  for side in a b; do
    isa=avx2
    [ "$side" = b ] && isa=
    label=${isa:-$best}
    echo "isa_tiers: round $r/$rounds: $label single" >&2
    OMNIBUS_ISA=$isa "$exe" bench -m "$model" -t "$threads" --pp 512 --tg 128 -r 1 \
      --json "$work/single-$side-$r.json" >/dev/null
    echo "isa_tiers: round $r/$rounds: $label 64 concurrent" >&2
    OMNIBUS_ISA=$isa "$exe" bench -m "$model" -t "$threads" --num-requests 64 --concurrency 64 \
      --input-len 128 --output-len 128 --max-num-batched-tokens 8192 --json "$work/batched-$side-$r.json" >/dev/null
    echo "isa_tiers: round $r/$rounds: $label one request" >&2
    OMNIBUS_ISA=$isa "$exe" bench -m "$model" -t "$threads" --num-requests 4 --concurrency 1 \
      --input-len 128 --output-len 128 --json "$work/one-$side-$r.json" >/dev/null
  done
done
echo "isa_tiers: read-bandwidth probe" >&2
"$micro" --benchmark_filter="ReadBandwidth/$threads/1/" --benchmark_repetitions=3 \
  --benchmark_format=json >"$work/bw.json" 2>/dev/null

python3 - "$work" "$rounds" "$model" "$best" "$threads" <<'PY'
import json, os, statistics, sys
work, rounds, model, best, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def vals(kind, side, key):
    return [json.load(open(f"{work}/{kind}-{side}-{r}.json"))[key] for r in range(1, rounds + 1)]
def cell(v):
    return f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"
rows = [("prefill tok/s (pp512)", "single", "pp_tok_s"),
        ("decode tok/s (tg128)", "single", "tg_tok_s"),
        ("64 concurrent (128 in, 128 out), output tok/s", "batched", "output_throughput"),
        ("one request (128 in, 128 out), output tok/s", "one", "output_throughput")]
print(f"{os.path.basename(model)}, {threads} threads, {rounds} rounds: A = OMNIBUS_ISA=avx2, B = {best}\n")
print(f"| measure | A: avx2 | B: {best} | B / A |")
print("|---|---|---|---|")
med = {}
for name, kind, key in rows:
    a, b = vals(kind, "a", key), vals(kind, "b", key)
    med[(kind, "a")], med[(kind, "b")] = statistics.median(a), statistics.median(b)
    print(f"| {name} | {cell(a)} | {cell(b)} | {statistics.median(b) / statistics.median(a):.2f} |")
ra = med[("batched", "a")] / med[("one", "a")]
rb = med[("batched", "b")] / med[("one", "b")]
print(f"| 64 concurrent / one request | {ra:.2f} | {rb:.2f} | |")
# the fastest read shape (kernels/read_probe.h), as omnibus bench --read-probe
bw = {}
for b in json.load(open(f"{work}/bw.json"))["benchmarks"]:
    if b.get("run_type") == "iteration":
        bw.setdefault(b["run_name"], []).append(b["bytes_per_second"])
probe = max(statistics.median(v) for v in bw.values())
size = os.path.getsize(model)
for side, label in (("a", "avx2"), ("b", best)):
    rate = size * statistics.median(vals("single", side, "tg_tok_s"))
    print(f"| decode read rate, {label} (GGUF bytes x tok/s) | {rate / 2**30:.2f} GiB/s | "
          f"{100 * rate / probe:.0f}% of the probe | |")
print(f"\nread-bandwidth probe ({threads} threads): {probe / 2**30:.2f} GiB/s")
PY
