#!/usr/bin/env python3
"""How well does llama.cpp agree with *itself* on the forward golden data?

The golden data (tests/golden/forward/<name>.json) is made with llama.cpp's
default settings (flash attention auto = on for CPU, f16 KV cache). This script
reruns the same prompts with llama.cpp's other attention path (flash attention
off) and prints the same statistics src/model/llama_golden_test.cc prints for
omnibus: identical free-running greedy continuations, teacher-forced greedy
agreement, and last-position logit differences. It is the baseline for how much
two correct implementations of the same GGUF can differ (see docs/correctness.md).

Run (after scripts/build_llama_cpp.sh, or with OMNIBUS_LLAMA_CPP_DIR set):
  LLAMA_CPP_LIB_PATH=<build>/bin PYTHONPATH=<llama-cpp-python sdist dir> \
    .venv/bin/python tools/golden/llama_self_agreement.py --name smollm2-135m
"""
import argparse, ctypes, json, sys
from pathlib import Path

import numpy as np
import llama_cpp as L

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="smollm2-135m")
    ap.add_argument("--flash-attn", type=int, default=0, help="0 off, 1 on, -1 auto")
    ap.add_argument("--kv-type", choices=["f16", "f32"], default="f16")
    args = ap.parse_args()
    golden = json.loads((ROOT / "tests/golden/forward" / f"{args.name}.json").read_text())
    cb = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(cb, ctypes.c_void_p(0))
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(ROOT / golden["model_file"]).encode(),
                                         L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = golden["n_ctx"], golden["n_batch"], golden["n_batch"]
    cp.n_threads = cp.n_threads_batch = golden["n_threads"]
    cp.flash_attn_type = args.flash_attn
    cp.type_k = cp.type_v = 1 if args.kv_type == "f16" else 0
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = golden["n_vocab"]

    def decode(ids, all_logits=False):
        batch = L.llama_batch_init(len(ids), 0, 1)
        for i, t in enumerate(ids):
            batch.token[i] = t
            batch.pos[i] = decode.pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = all_logits or i == len(ids) - 1
        batch.n_tokens = len(ids)
        assert L.llama_decode(ctx, batch) == 0
        L.llama_batch_free(batch)
        decode.pos += len(ids)
        if all_logits:
            return np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                             for i in range(len(ids))])
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

    identical = steps = agree = 0
    worst = mean_abs = 0.0
    worst_missed = 0.0
    for p in golden["prompts"]:
        logits_file = ROOT / "tests/golden/forward" / p["logits_file"]
        ref = np.fromfile(logits_file, dtype=np.float16 if logits_file.suffix == ".f16"
                          else np.float32).astype(np.float32)
        want = p["generated_ids"]
        L.llama_memory_clear(L.llama_get_memory(ctx), True); decode.pos = 0
        logits = decode(p["prompt_ids"])
        # compared up to a constant shift, as the C++ golden test does
        d = np.abs((logits - logits.mean()) - (ref - ref.mean()))
        worst = max(worst, float(d.max()))
        mean_abs += float(d.mean()) / len(golden["prompts"])
        got = []
        for i in range(len(want)):
            got.append(int(np.argmax(logits)))
            if i + 1 < len(want):
                logits = decode([got[-1]])
        identical += got == want
        L.llama_memory_clear(L.llama_get_memory(ctx), True); decode.pos = 0
        rows = decode(p["prompt_ids"] + want[:-1], all_logits=True)
        for i, w in enumerate(want):
            ours = int(np.argmax(rows[len(p["prompt_ids"]) - 1 + i]))
            steps += 1
            agree += ours == w
            if ours != w:
                worst_missed = max(worst_missed, p["generated_margins"][i])
    print(f"llama.cpp (flash_attn={args.flash_attn}, kv {args.kv_type}) vs golden {args.name}: "
          f"{identical}/{len(golden['prompts'])} greedy continuations identical; teacher-forced "
          f"agreement {agree}/{steps} (largest margin among disagreements {worst_missed:.3f}); "
          f"last-position logits max |diff| {worst:.4f}, mean |diff| {mean_abs:.4f}")


if __name__ == "__main__":
    sys.exit(main())
