#!/usr/bin/env bash
# KL divergence of omnibus's and llama.cpp's token distributions from one base:
# llama.cpp's own logits (f16 KV cache, its default attention path), as
# llama-perplexity --kl-divergence measures quantization fidelity.
#
#   base:       llama-perplexity -m MODEL -f TEXT -c CTX --chunks N -t T --kl-divergence-base BASE
#   llama.cpp:  llama-perplexity -m MODEL -c CTX -t T --kl-divergence --kl-divergence-base BASE ARGS
#               for ARGS in: -fa off | -ctk f32 -ctv f32 | -ctk q8_0 -ctv q8_0 | -ctk q4_0 -ctv q4_0
#   omnibus:    omnibus perplexity -m MODEL -f TEXT --kl-divergence-base BASE --kv-cache-dtype D
#               for D in: f32 f16 q8 q4 kivi2
# and prints one markdown table (mean KLD with its uncertainty, median, 99%,
# maximum, same top token, PPL ratio), every row against the same base.
#
# Then a second table against omnibus's own logits (f16 KV, written with
# --kl-divergence-base-out): llama.cpp reading omnibus's file (its default
# path), omnibus's KV formats (quantization alone, without the constant
# offset between the two engines), and omnibus at OMNIBUS_ISA=avx2 and with
# a 64-token step budget (both must be exactly 0: the tiers and batch shapes
# are bitwise equal).
#
# Usage: tools/kld_table.sh MODEL [CHUNKS]
# Environment: TEXT (tests/data/perplexity.txt), CTX (512), THREADS (2),
# OMNIBUS_LLAMA_CPP_DIR (.ref/build), OMNIBUS_BIN (build/omnibus), WORK (a
# temporary directory; the base file is n_chunks * CTX/2 * n_vocab * 2 bytes:
# 0.4 GB for SmolLM2 at 16 chunks, 1 GB for Gemma 3 at 8).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
model=$1
chunks=${2:-16}
text=${TEXT:-tests/data/perplexity.txt}
ctx=${CTX:-512}
threads=${THREADS:-2}
bin=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}/bin
omnibus=${OMNIBUS_BIN:-build/omnibus}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
base=$work/base.kld

echo "kld_table: base: llama.cpp f16 KV, $chunks chunks of $ctx" >&2
"$bin/llama-perplexity" -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" \
  --kl-divergence-base "$base" > "$work/base.log" 2>&1

row() {  # row LABEL LOG
  python3 - "$1" "$2" <<'PY'
import re, sys
label, log = sys.argv[1], open(sys.argv[2], encoding="utf-8", errors="replace").read()
def num(pat):
    m = re.search(pat, log, re.M)
    return m.groups() if m else ("?", "?")
mean, unc = num(r"^Mean\s+KLD:\s+(-?[0-9.]+) ± +([0-9.]+)")
med = num(r"^Median\s+KLD:\s+(-?[0-9.]+)()")[0]
p99 = num(r"^99\.0%\s+KLD:\s+(-?[0-9.]+)()")[0]
mx = num(r"^Maximum KLD:\s+(-?[0-9.]+)()")[0]
top, top_unc = num(r"^Same top p:\s+([0-9.]+) ± +([0-9.]+) ?%")
ratio, ratio_unc = num(r"^Mean PPL\(Q\)/PPL\(base\)\s+:\s+([0-9.]+) ± +([0-9.]+)")
print(f"| {label} | {mean} ± {unc} | {med} | {p99} | {mx} | {top} ± {top_unc} % | {ratio} ± {ratio_unc} |")
PY
}

echo "| candidate (vs llama.cpp f16 KV) | mean KLD | median | 99% | max | same top token | PPL(Q)/PPL(base) |"
echo "|---|---|---|---|---|---|---|"
while IFS='|' read -r label args; do
  echo "kld_table: llama.cpp $label" >&2
  # shellcheck disable=SC2086
  "$bin/llama-perplexity" -m "$model" -c "$ctx" -t "$threads" --kl-divergence \
    --kl-divergence-base "$base" $args > "$work/llama.log" 2>&1
  row "llama.cpp $label" "$work/llama.log"
done <<'CONFIGS'
flash attention off|-fa off
f32 KV|-ctk f32 -ctv f32
q8_0 KV|-ctk q8_0 -ctv q8_0
q4_0 KV|-ctk q4_0 -ctv q4_0
CONFIGS
for kv in f32 f16 q8 q4 kivi2; do
  echo "kld_table: omnibus $kv" >&2
  "$omnibus" perplexity -m "$model" -f "$text" --kl-divergence-base "$base" --threads "$threads" \
    --kv-cache-dtype "$kv" > "$work/omnibus.log" 2> "$work/omnibus.err"
  row "omnibus $kv KV" "$work/omnibus.log"
done
echo
ours=$work/omnibus-f16.kld
"$omnibus" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" --threads "$threads" \
  --kl-divergence-base-out "$ours" > /dev/null 2> "$work/omnibus.err"
echo "| candidate (vs omnibus f16 KV) | mean KLD | median | 99% | max | same top token | PPL(Q)/PPL(base) |"
echo "|---|---|---|---|---|---|---|"
echo "kld_table: llama.cpp against omnibus's base" >&2
"$bin/llama-perplexity" -m "$model" -c "$ctx" -t "$threads" --kl-divergence \
  --kl-divergence-base "$ours" > "$work/llama.log" 2>&1
row "llama.cpp (default: flash attention, f16 KV)" "$work/llama.log"
for kv in f32 q8 q4 kivi2; do
  echo "kld_table: omnibus $kv against omnibus" >&2
  "$omnibus" perplexity -m "$model" --kl-divergence-base "$ours" --threads "$threads" \
    --kv-cache-dtype "$kv" > "$work/omnibus.log" 2> "$work/omnibus.err"
  row "omnibus $kv KV" "$work/omnibus.log"
done
OMNIBUS_ISA=avx2 "$omnibus" perplexity -m "$model" --kl-divergence-base "$ours" \
  --threads "$threads" > "$work/omnibus.log" 2> "$work/omnibus.err"
row "omnibus f16 KV, OMNIBUS_ISA=avx2" "$work/omnibus.log"
"$omnibus" perplexity -m "$model" --kl-divergence-base "$ours" --threads "$threads" -b 64 \
  > "$work/omnibus.log" 2> "$work/omnibus.err"
row "omnibus f16 KV, -b 64 (prefill in 64-token steps)" "$work/omnibus.log"
echo
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, OMNIBUS_ISA=${OMNIBUS_ISA:-best} ($(grep -o 'avx512_vnni\|avx_vnni\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '))"
[ -n "${WORK:-}" ] || rm -rf "$work"
