#!/usr/bin/env bash
# Single-stream prefill/decode speed: omnibus against llama.cpp, in one run.
#
# Alternates A B A B (ROUNDS rounds, default 3) on the same GGUF, 2 threads:
#   A: llama-bench -m MODEL -p 512 -n 128 -t 2 -r 1 -o json
#   B: omnibus bench -m MODEL --pp 512 --tg 128 --repetitions 1 --threads 2 --json FILE
# (omnibus writes {"pp_tok_s": ..., "tg_tok_s": ...} to FILE), then prints a
# markdown table of the medians (min-max in brackets) and the ratios
# omnibus / llama.cpp, and writes the same table to OUT.
#
# Usage: tools/bench/single_stream.sh MODEL OUT [ROUNDS]
#   e.g. tools/bench/single_stream.sh models/smollm2-135m.gguf bench-single.md
# Environment:
#   OMNIBUS_LLAMA_CPP_DIR  llama.cpp build with bin/llama-bench (default .ref/build,
#                          from scripts/build_llama_cpp.sh)
#   OMNIBUS_BIN            the omnibus binary (default build/omnibus)
#   PP, TG, THREADS        prompt tokens, generated tokens, threads (512, 128, 2)
#   LLAMA_ARGS             more llama-bench arguments, e.g. "--repack 0" where its
#                          AMX weight buffer crashes (docs/performance.md, round (c))
set -euo pipefail
cd "$(dirname "$0")/../.."

[ $# -ge 2 ] || { sed -n '2,21p' "$0"; exit 2; }
model=$1
out=$2
rounds=${3:-3}
pp=${PP:-512}
tg=${TG:-128}
threads=${THREADS:-2}
llama_bench=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}/bin/llama-bench
omnibus=${OMNIBUS_BIN:-build/omnibus}
for exe in "$llama_bench" "$omnibus"; do
  [ -x "$exe" ] || { echo "single_stream: $exe not found (see docs/reference.md)" >&2; exit 1; }
done
[ -f "$model" ] || { echo "single_stream: model $model not found" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2206  # LLAMA_ARGS is split into words on purpose
llama_cmd=("$llama_bench" -m "$model" -p "$pp" -n "$tg" -t "$threads" -r 1 -o json ${LLAMA_ARGS:-})

for r in $(seq 1 "$rounds"); do
  echo "single_stream: round $r/$rounds: llama.cpp" >&2
  "${llama_cmd[@]}" >"$work/llama-$r.json" 2>"$work/llama-$r.err" ||
    { tail -n 20 "$work/llama-$r.err" >&2; exit 1; }
  echo "single_stream: round $r/$rounds: omnibus" >&2
  omnibus_cmd=("$omnibus" bench -m "$model" --pp "$pp" --tg "$tg" --repetitions 1
               --threads "$threads" --json "$work/omnibus-$r.json")
  "${omnibus_cmd[@]}" >"$work/omnibus-$r.log" 2>&1 ||
    { tail -n 20 "$work/omnibus-$r.log" >&2; exit 1; }
done

python3 - "$work" "$rounds" "$out" "$model" "$pp" "$tg" "$threads" \
    "${llama_cmd[*]}" "$omnibus bench -m $model --pp $pp --tg $tg --repetitions 1 --threads $threads --json FILE" <<'PY'
import json, statistics, sys, datetime, platform
work, rounds, out, model, pp, tg, threads, llama_cmd, omnibus_cmd = sys.argv[1:]
rounds = int(rounds)
llama = {"pp": [], "tg": []}
omni = {"pp": [], "tg": []}
for r in range(1, rounds + 1):
    # llama-bench -o json: a list of tests; pp has n_gen == 0, tg has n_prompt == 0.
    for t in json.load(open(f"{work}/llama-{r}.json")):
        if t["n_prompt"] > 0 and t["n_gen"] == 0:
            llama["pp"].append(float(t["avg_ts"]))
        elif t["n_gen"] > 0 and t["n_prompt"] == 0:
            llama["tg"].append(float(t["avg_ts"]))
    o = json.load(open(f"{work}/omnibus-{r}.json"))
    omni["pp"].append(float(o["pp_tok_s"]))
    omni["tg"].append(float(o["tg_tok_s"]))

def cell(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"

rows = []
for key, label in (("pp", f"prefill pp{pp} tok/s"), ("tg", f"decode tg{tg} tok/s")):
    if not llama[key] or not omni[key]:
        sys.exit(f"single_stream: missing {key} results")
    ratio = statistics.median(omni[key]) / statistics.median(llama[key])
    rows.append(f"| {label} | {cell(omni[key])} | {cell(llama[key])} | {ratio:.2f} |")

table = "\n".join([
    f"Single stream, {model}, {threads} threads, {rounds} rounds A B A B, "
    f"{datetime.date.today().isoformat()} on {platform.node()}; median (min-max).",
    "",
    "| test | omnibus | llama.cpp | omnibus / llama.cpp |",
    "|---|---|---|---|",
    *rows,
    "",
    f"llama.cpp: `{llama_cmd}`  ",
    f"omnibus: `{omnibus_cmd}`",
    "",
])
print(table)
open(out, "w").write(table)
PY
echo "single_stream: wrote $out" >&2
