#!/usr/bin/env python3
"""Golden forward-pass data from the reference llama.cpp (comparison only).

For each prompt below, llama.cpp (n_ctx 2048, n_batch 512, 2 threads):
  1. tokenizes it as llama.cpp does (the model's own add_bos/add_eos setting,
     special tokens such as <|im_start|> parsed: add_special=True,
     parse_special=True);
  2. decodes the prompt and saves the logits of its LAST position, the full
     [n_vocab] vector, as raw little-endian float32: <out>/<name>/<i>.f32;
  3. greedy-generates exactly --n-gen tokens: argmax of the logits (ties: the
     lowest id), never stopping at EOS, no sampling chain.
and writes the index <out>/<name>.json:
  {"model", "model_file", "model_sha256", "llama_cpp_version", "command",
   "n_vocab", "n_ctx", "n_batch", "n_threads", "add_bos", "logits_format",
   "prompts": [{"text", "prompt_ids", "generated_ids", "generated_text",
                "generated_margins", "logits_file"}]}
logits_file is relative to the JSON file's directory. generated_margins[k] is
the gap between the best and second-best logit at generation step k: where it
is within the comparison tolerance, an exact match of the ids from step k on
cannot be expected of a different (correct) implementation.

Usage (from the repository root, with the project venv and
tools/requirements-ref.txt installed):
  OMNIBUS_LLAMA_CPP_DIR=/path/to/llama.cpp/build \\
  .venv/bin/python tools/golden/gen_forward_golden.py \\
      --model models/smollm2-135m.gguf --name smollm2-135m
OMNIBUS_LLAMA_CPP_DIR defaults to .ref/build (scripts/build_llama_cpp.sh).
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

LONG_PROMPT = (
    "The lighthouse at the end of the northern breakwater was built in 1874 from granite "
    "quarried a few miles inland, and for more than a century it was kept by the same family. "
    "Each evening the keeper climbed the one hundred and twelve steps of the spiral staircase, "
    "trimmed the wick, polished the great lens, and wrote the weather into a leather-bound log: "
    "the direction of the wind, the height of the swell, the ships that passed and the ones that "
    "sheltered in the bay. In winter the spray reached the gallery windows, and ice had to be "
    "chipped from the railings before dawn. The log books survive in the town library, forty-one "
    "volumes in all, and historians have used them to reconstruct storms that no other record "
    "mentions. When the light was automated in 1983, the last keeper, a quiet woman named Agnes "
    "Whitlow, handed over the keys, the brass telescope and the final volume of the log. She "
    "lived in the cottage at the foot of the tower until she was ninety, and visitors remember "
    "that she still looked out at the sea every evening at the hour the lamp used to be lit. "
    "Today the tower is a small museum run by volunteers from the town. School classes come in "
    "spring to climb the staircase, sailors' families leave flowers at the memorial stone beside "
    "the door, and on clear nights the old lens is lit once more for an hour. Of everything in "
    "the collection, its most popular exhibit is"
)

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Here is a list of the planets in the solar system, in order from the Sun:\n1.",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "La tour Eiffel se trouve à",
    "中国的首都是",
    "Der schnellste Weg von Berlin nach München ist",
    "Question: What is 12 + 30?\nAnswer:",
    '{"name": "Alice", "age": 30, "languages": [',
    "I love pizza 🍕 because",
    LONG_PROMPT,
    "Hello",
    "| Name | Age |\n|------|-----|\n| Bob  | 25  |\n| Eve  |",
    "<|im_start|>user\nHi! Can you give me three tips for sleeping better?<|im_end|>\n"
    "<|im_start|>assistant\nSure! 1. Keep a regular schedule.<|im_end|>\n"
    "<|im_start|>user\nAnd a fourth one?<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, Neil Armstrong's famous words on the Moon were",
    "#include <stdio.h>\n\nint main(void) {\n    for (int i = 0; i < 10; i++) {",
]


# --prompt-set gemma3: the same prompts, with the two chat prompts in Gemma's
# turn format instead of ChatML.
GEMMA3_PROMPTS = [
    "<start_of_turn>user\nWhat is the boiling point of water at sea level?<end_of_turn>\n"
    "<start_of_turn>model\n" if p.startswith("<|im_start|>system") else
    "<start_of_turn>user\nHi! Can you give me three tips for sleeping better?<end_of_turn>\n"
    "<start_of_turn>model\nSure! 1. Keep a regular schedule.<end_of_turn>\n"
    "<start_of_turn>user\nAnd a fourth one?<end_of_turn>\n<start_of_turn>model\n"
    if p.startswith("<|im_start|>user") else p
    for p in PROMPTS
]

PROMPT_SETS = {"default": PROMPTS, "gemma3": GEMMA3_PROMPTS}


# ------------------------------------------------------------ locating llama.cpp

def llama_build_dir() -> Path:
    return Path(os.environ.get("OMNIBUS_LLAMA_CPP_DIR", REPO_ROOT / ".ref" / "build")).resolve()


def llama_source_dir(build: Path) -> Path:
    cache = (build / "CMakeCache.txt").read_text()
    m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
    if not m:
        sys.exit(f"gen_forward_golden: no CMAKE_HOME_DIRECTORY in {build}/CMakeCache.txt")
    return Path(m.group(1))


def llama_version(build: Path) -> str:
    sdist = llama_source_dir(build).parent.parent  # <sdist>/vendor/llama.cpp
    pkg = "llama-cpp-python " + sdist.name.rsplit("-", 1)[-1]
    commit = "unknown"
    info = build / "common" / "build-info.cpp"
    if info.exists():
        m = re.search(r'LLAMA_COMMIT = "([^"]+)"', info.read_text())
        if m:
            commit = m.group(1)
    libs = sorted((build / "bin").glob("libggml.so.*.*.*"))
    ggml = f", ggml {libs[0].name[len('libggml.so.'):]}" if libs else ""
    return f"{pkg} (vendored llama.cpp commit {commit}{ggml})"


def import_llama_cpp(build: Path):
    """The sdist's pure-ctypes `llama_cpp` package, bound to <build>/bin/libllama.so."""
    lib_dir = build / "bin"
    if not (lib_dir / "libllama.so").exists():
        sys.exit(f"gen_forward_golden: {lib_dir}/libllama.so not found; run "
                 "scripts/build_llama_cpp.sh or set OMNIBUS_LLAMA_CPP_DIR")
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    sys.path.insert(0, str(llama_source_dir(build).parent.parent))
    import llama_cpp  # needs typing_extensions and diskcache (tools/requirements-ref.txt)

    return llama_cpp


# ------------------------------------------------------------ llama.cpp driving

class Reference:
    def __init__(self, llama_cpp, model_path: Path, n_ctx: int, n_batch: int, n_threads: int):
        self.L = llama_cpp
        L = llama_cpp
        self._log_cb = L.llama_log_callback(lambda level, text, data: None)  # keep a reference
        L.llama_log_set(self._log_cb, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mp)
        if not self.model:
            sys.exit(f"gen_forward_golden: llama.cpp could not load {model_path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit("gen_forward_golden: llama_init_from_model failed")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, cap, True, True)
        if n < 0:
            sys.exit(f"gen_forward_golden: tokenize failed ({n})")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:max(n, 0)]

    def _decode(self, ids: list[int]) -> np.ndarray:
        """Decodes ids (appending to the cache); returns the last position's logits."""
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start:start + self.n_batch]
            arr = (self.L.llama_token * len(chunk))(*chunk)
            # llama_batch_get_one: one sequence, logits for the last token only.
            rc = self.L.llama_decode(self.ctx, self.L.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                sys.exit(f"gen_forward_golden: llama_decode returned {rc}")
        ptr = self.L.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32, copy=True)

    def run(self, prompt_ids: list[int], n_gen: int):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        logits = self._decode(prompt_ids)
        last_prompt_logits = logits
        generated, margins = [], []
        for step in range(n_gen):
            token = int(np.argmax(logits))  # first maximum: ties -> lowest id
            generated.append(token)
            top2 = np.partition(logits, -2)[-2:]
            margins.append(round(float(top2[1] - top2[0]), 4))
            if step + 1 < n_gen:
                logits = self._decode([token])
        return last_prompt_logits, generated, margins


# ------------------------------------------------------------ main

def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--name", required=True, help="e.g. smollm2-135m")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "golden" / "forward")
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-set", choices=sorted(PROMPT_SETS), default="default",
                    help="gemma3: the chat prompts in Gemma's turn format")
    ap.add_argument("--logits-dtype", choices=["f32", "f16"], default="f32",
                    help="f16 halves the committed size (the random-weight families: their "
                         "tolerances are far above f16's rounding)")
    args = ap.parse_args()

    build = llama_build_dir()
    ref = Reference(import_llama_cpp(build), args.model, args.n_ctx, args.n_batch, args.threads)
    out_dir = args.out / args.name
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in list(out_dir.glob("*.f32")) + list(out_dir.glob("*.f16")):
        stale.unlink()
    ext = args.logits_dtype

    entries = []
    for i, text in enumerate(PROMPT_SETS[args.prompt_set]):
        ids = ref.tokenize(text)
        if len(ids) + args.n_gen > args.n_ctx:
            sys.exit(f"gen_forward_golden: prompt {i} too long for n_ctx")
        logits, generated, margins = ref.run(ids, args.n_gen)
        logits.astype("<f4" if ext == "f32" else "<f2").tofile(out_dir / f"{i}.{ext}")
        gen_text = b"".join(ref.piece(t) for t in generated).decode("utf-8", errors="replace")
        entries.append({
            "text": text,
            "prompt_ids": ids,
            "generated_ids": generated,
            "generated_text": gen_text,
            "generated_margins": margins,
            "logits_file": f"{args.name}/{i}.{ext}",
        })
        print(f"[{i}] {len(ids)} prompt tokens -> {gen_text!r}", file=sys.stderr)

    try:
        model_file = str(args.model.resolve().relative_to(REPO_ROOT))
    except ValueError:
        model_file = args.model.name
    argv = ["tools/golden/gen_forward_golden.py"] + [
        a if not a.startswith("/") else os.path.relpath(a, REPO_ROOT) for a in sys.argv[1:]]
    index = {
        "model": args.name,
        "model_file": model_file,
        "model_sha256": sha256_of(args.model),
        "llama_cpp_version": llama_version(build),
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
        "n_vocab": ref.n_vocab,
        "n_ctx": args.n_ctx,
        "n_batch": args.n_batch,
        "n_threads": args.threads,
        "add_bos": ref.add_bos,
        "prompt_set": args.prompt_set,
        "tokenize": "llama_tokenize(add_special=true, parse_special=true)",
        "generation": f"greedy argmax (ties -> lowest id), exactly {args.n_gen} tokens, "
                      "no stop at EOS",
        "logits_format": ("raw little-endian float32" if ext == "f32" else
                          "raw little-endian float16 (IEEE half)") +
                         ", n_vocab values: the logits of the last prompt position",
        "prompts": entries,
    }
    index_path = args.out / f"{args.name}.json"
    index_path.write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {index_path} and {len(entries)} logits files in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
