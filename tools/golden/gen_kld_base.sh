#!/usr/bin/env bash
# llama.cpp's logits for the KL-divergence test (tests/python/test_kl_divergence.py):
#   llama-perplexity -m models/random/tiny.gguf -f tests/data/perplexity.txt -c 128
#     --chunks 4 -t 2 --kl-divergence-base tests/golden/kld/tiny.kld
# (tiny.gguf: tools/golden/make_random_models.py, a 512-token vocabulary so the
# file is 0.27 MB), and tests/golden/kld/tiny.json: the model's sha256, the
# command, and llama.cpp's own KL divergence from that base with flash
# attention off (its agreement with itself, the yardstick for omnibus's).
#
# Usage: tools/golden/gen_kld_base.sh    (OMNIBUS_LLAMA_CPP_DIR: default .ref/build)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${OMNIBUS_LLAMA_CPP_DIR:-.ref/build}/bin
model=models/random/tiny.gguf
out=tests/golden/kld
mkdir -p "$out"
cmd=(-m "$model" -f tests/data/perplexity.txt -c 128 --chunks 4 -t 2)
"$bin/llama-perplexity" "${cmd[@]}" --kl-divergence-base "$out/tiny.kld" > /tmp/gen_kld_base.log 2>&1
"$bin/llama-perplexity" -m "$model" -c 128 -t 2 -fa off --kl-divergence \
  --kl-divergence-base "$out/tiny.kld" > /tmp/gen_kld_self.log 2>&1
python3 - "$model" "$out/tiny.json" /tmp/gen_kld_self.log "${cmd[*]}" <<'PY'
import hashlib, json, re, sys
model, out, log, cmd = sys.argv[1:5]
text = open(log, encoding="utf-8", errors="replace").read()
mean = float(re.search(r"^Mean\s+KLD:\s+(-?[0-9.]+)", text, re.M).group(1))
top = float(re.search(r"^Same top p:\s+([0-9.]+)", text, re.M).group(1))
json.dump({
    "model": model,
    "model_sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(),
    "command": f"llama-perplexity {cmd} --kl-divergence-base tests/golden/kld/tiny.kld",
    "n_ctx": 128, "n_chunks": 4,
    "llama_cpp_flash_attn_off": {"mean_kld": mean, "same_top_percent": top},
}, open(out, "w"), indent=1)
print(f"wrote {out}: llama.cpp flash attention off vs base: mean KLD {mean}, same top {top}%")
PY
