#!/usr/bin/env python3
"""Random-weight GGUFs with the exact tensor shapes of the models people serve, for benchmarks.

Decode and prefill speed depend on the shapes and formats of the weights, not on their values
(dense models; see "MoE" below for the one exception), so these files stand in for the real
checkpoints, which cannot be downloaded here. Each shape is written once as an F16 GGUF with
PyPI's `gguf` package (llama.cpp's own writer, streamed tensor by tensor so the 16 GB of an 8B
never sit in memory) and then quantized by the reference build's `llama-quantize`
(scripts/build_llama_cpp.sh) into the formats users download. The F16 file is deleted after its
last quantization unless --keep-f16.

  shape         what it copies
  llama3.2-1b   Llama 3.2 1B: n_embd 2048, 16 layers, 32 / 8 heads of 64, n_ff 8192,
                vocabulary 128256, tied embeddings (Q4_K_M gives the head Q6_K)
  llama3.1-8b   Llama 3.1 8B: n_embd 4096, 32 layers, 32 / 8 heads of 128, n_ff 14336,
                vocabulary 128256, separate output
  qwen2.5-7b    Qwen 2.5 7B: n_embd 3584, 28 layers, 28 / 4 heads of 128, n_ff 18944,
                vocabulary 152064, Q/K/V biases, separate output
  qwen3-30b-a3b Qwen3-30B-A3B's layer (qwen3moe): n_embd 2048, 32 / 4 heads of 128 with Q/K
                norms, 128 experts of 768 (8 used), an F32 router, vocabulary 151936, separate
                output; 20 of its 48 layers, as many as fit in 8 GiB at Q4_K_M (7.4 GiB).
                Written as Q8_0 by gguf-py (the F16 would need 25 GiB of disk) and requantized
                by llama-quantize --allow-requantize

Weights: seeded normal values, std 1/sqrt(n_in) per matrix, so activations stay of order one
through the layers (no inf / NaN in either engine).

MoE: speed depends on which experts the router picks. The router (ffn_gate_inp, F32 as in the
real files) is a seeded normal matrix with std 1/sqrt(n_embd), so each token's 128 router logits
are independent N(0, 1) draws and its top 8 a uniformly random set: every expert is hit equally
often over a prompt (512 tokens x 8 / 128 = 32 rows each on average), as in a trained model whose
load-balancing loss evens out the experts, and a decode token reads 8 experts' weights like a real
one. (What it does not copy: a real router's preference for some experts on some text, which
makes a prompt's groups less even than here.) To keep the writing fast, every matrix is
cut from one seeded pool of 2^24 values at a per-tensor offset (its values repeat every 16 Mi
elements, which no speed measure can see). The vocabulary is SmolLM2's BPE
(models/smollm2-135m.gguf) padded with unused tokens to the model's size.

Output (git-ignored): models/shapes/<shape>-<QTYPE>.gguf, e.g. llama3.1-8b-Q4_K_M.gguf. Files that
exist are left alone (idempotent); progress goes to stderr.

Usage (run by `make bench-models`, never by `make test`):
  .venv/bin/python tools/bench/make_shape_models.py [--shape S ...] [--qtype Q ...] [--out DIR]
  .venv/bin/python tools/bench/make_shape_models.py --python-q8 [--shape S ...]
      (Q8_0 quantized by gguf-py itself: no reference build needed)
"""

import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import gguf

REPO_ROOT = Path(__file__).resolve().parents[2]

SHAPES = {
    "llama3.2-1b": dict(arch="llama", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8,
                        head_dim=64, n_ff=8192, n_vocab=128256, tied=True, rope_base=500000.0,
                        eps=1e-5, ctx=131072, qtypes=["Q4_K_M"]),
    "llama3.1-8b": dict(arch="llama", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8,
                        head_dim=128, n_ff=14336, n_vocab=128256, tied=False,
                        rope_base=500000.0, eps=1e-5, ctx=131072,
                        qtypes=["Q4_K_M", "Q4_0", "Q8_0"]),
    "qwen2.5-7b": dict(arch="qwen2", n_embd=3584, n_layer=28, n_head=28, n_head_kv=4,
                       head_dim=128, n_ff=18944, n_vocab=152064, tied=False, biases=True,
                       rope_base=1000000.0, eps=1e-6, ctx=32768, qtypes=["Q4_K_M"]),
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_embd=2048, n_layer=20, n_head=32, n_head_kv=4,
                          head_dim=128, n_ff=6144, n_vocab=151936, tied=False, qk_norm=True,
                          n_expert=128, n_expert_used=8, n_ff_exp=768, rope_base=1000000.0,
                          eps=1e-6, ctx=40960, qtypes=["Q4_K_M"], via_q8=True),
}
DEFAULT_SHAPES = ["llama3.2-1b", "llama3.1-8b"]
POOL = 1 << 24


def log(msg: str) -> None:
    print(f"make_shape_models: {msg}", file=sys.stderr, flush=True)


def vocabulary(n_vocab: int):
    """SmolLM2's BPE tokens and merges, padded with unused tokens to n_vocab."""
    path = REPO_ROOT / "models" / "smollm2-135m.gguf"
    if not path.exists():
        sys.exit(f"make_shape_models: {path} missing (scripts/fetch_models.sh)")
    r = gguf.GGUFReader(str(path))

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    for s in ("<|begin_of_text|>", "<|eot_id|>"):
        tokens.append(s)
        types.append(int(gguf.TokenType.CONTROL))
    while len(tokens) < n_vocab:
        tokens.append(f"<|unused_{len(tokens)}|>")
        types.append(int(gguf.TokenType.UNUSED))
    return tokens[:n_vocab], types[:n_vocab], merges


def tensor_list(s: dict):
    """(name, shape as (rows, cols) or (n,), std or None for a norm vector) of every tensor."""
    E, F, V = s["n_embd"], s["n_ff"], s["n_vocab"]
    nq, nkv = s["n_head"] * s["head_dim"], s["n_head_kv"] * s["head_dim"]
    out = [("token_embd.weight", (V, E), 1.0 if not s["tied"] else 4.0 / math.sqrt(E)),
           ("output_norm.weight", (E,), None)]
    if not s["tied"]:
        out.append(("output.weight", (V, E), 4.0 / math.sqrt(E)))
    for il in range(s["n_layer"]):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", (E,), None),
                (p + "attn_q.weight", (nq, E), 1 / math.sqrt(E)),
                (p + "attn_k.weight", (nkv, E), 1 / math.sqrt(E)),
                (p + "attn_v.weight", (nkv, E), 1 / math.sqrt(E))]
        if s.get("biases"):
            out += [(p + "attn_q.bias", (nq,), 0.5), (p + "attn_k.bias", (nkv,), 0.5),
                    (p + "attn_v.bias", (nkv,), 0.5)]
        if s.get("qk_norm"):
            out += [(p + "attn_q_norm.weight", (s["head_dim"],), None),
                    (p + "attn_k_norm.weight", (s["head_dim"],), None)]
        out += [(p + "attn_output.weight", (E, nq), 1 / math.sqrt(nq)),
                (p + "ffn_norm.weight", (E,), None)]
        if s.get("n_expert"):
            X, FX = s["n_expert"], s["n_ff_exp"]
            out += [(p + "ffn_gate_inp.weight", (X, E), -1 / math.sqrt(E)),  # F32 (std < 0)
                    (p + "ffn_gate_exps.weight", (X, FX, E), 1 / math.sqrt(E)),
                    (p + "ffn_up_exps.weight", (X, FX, E), 1 / math.sqrt(E)),
                    (p + "ffn_down_exps.weight", (X, E, FX), 1 / math.sqrt(FX))]
        else:
            out += [(p + "ffn_gate.weight", (F, E), 1 / math.sqrt(E)),
                    (p + "ffn_up.weight", (F, E), 1 / math.sqrt(E)),
                    (p + "ffn_down.weight", (E, F), 1 / math.sqrt(F))]
    return out


def is_matrix(shape, std) -> bool:
    """A weight written as F16 (or Q8_0): 2-D or 3-D, with a positive std (a negative std marks
    an F32 matrix: the MoE router)."""
    return std is not None and std > 0 and len(shape) >= 2


def tensor_data(pool: np.ndarray, index: int, shape, std):
    """The values of one tensor: norms F32 around 1, matrices F16 cut from the pool."""
    n = int(np.prod(shape))
    if std is None:  # a norm's weights
        return (1.0 + 0.1 * pool[(index * 7919) % (POOL - n):][:n].astype(np.float32)).reshape(shape)
    start = (index * 1_000_003) % POOL
    reps = (start + n + POOL - 1) // POOL
    flat = np.tile(pool, reps)[start:start + n] if reps > 1 else pool[start:start + n]
    if len(shape) == 1 or std < 0:  # a bias, or an F32 matrix (the MoE router)
        return (flat.astype(np.float32) * np.float32(abs(std))).reshape(shape)
    return (flat * np.float16(std)).astype(np.float16).reshape(shape)


def write_f16(name: str, s: dict, path: Path, q8: bool = False) -> None:
    """The shape's GGUF with F16 matrices, or with q8, Q8_0 ones quantized here by gguf-py's
    reference quantizer (ggml's quantize_row_q8_0 in numpy; no llama-quantize needed)."""
    tokens, types, merges = vocabulary(s["n_vocab"])
    tensors = tensor_list(s)
    rng = np.random.default_rng(int.from_bytes(name.encode()[:8], "little"))
    pool = rng.standard_normal(POOL, dtype=np.float32).astype(np.float16)
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), s["arch"])
    w.add_name(f"shape-{name}")
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    if s["head_dim"] != s["n_embd"] // s["n_head"]:
        w.add_key_length(s["head_dim"])
        w.add_value_length(s["head_dim"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_rope_dimension_count(s["head_dim"])
    if s.get("n_expert"):
        w.add_expert_count(s["n_expert"])
        w.add_expert_used_count(s["n_expert_used"])
        w.add_expert_feed_forward_length(s["n_ff_exp"])
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_F16))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if s["arch"] == "llama" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_eos_token_id(tokens.index("<|eot_id|>"))
    w.add_add_bos_token(s["arch"] == "llama")
    Q8 = gguf.GGMLQuantizationType.Q8_0
    for i, (tname, shape, std) in enumerate(tensors):
        f16 = is_matrix(shape, std)
        if f16 and q8:
            byte_shape = gguf.quant_shape_to_byte_shape(shape, Q8)
            w.add_tensor_info(tname, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)),
                              raw_dtype=Q8)
            continue
        dtype = np.float16 if f16 else np.float32
        w.add_tensor_info(tname, shape, np.dtype(dtype), int(np.prod(shape)) * (2 if f16 else 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = sum(int(np.prod(sh)) for _, sh, _ in tensors)
    done, t0 = 0, time.time()
    for i, (tname, shape, std) in enumerate(tensors):
        data = tensor_data(pool, i, shape, std)
        if q8 and is_matrix(shape, std):
            data = gguf.quants.quantize(data.astype(np.float32), Q8)
        w.write_tensor_data(data)
        done += int(np.prod(shape))
        if i % 16 == 0 or i == len(tensors) - 1:
            log(f"{path.name}: {done / total:6.1%} of {total / 1e9:.2f} G parameters "
                f"({time.time() - t0:.0f} s)")
    w.close()
    tmp.replace(path)


def quantize(llama_quantize: Path, src: Path, dst: Path, qtype: str, threads: int,
             requantize: bool = False) -> None:
    tmp = dst.with_suffix(".tmp")
    log(f"llama-quantize {src.name} -> {dst.name} ({qtype})")
    t0 = time.time()
    flags = ["--allow-requantize"] if requantize else []
    with open(dst.with_suffix(".log"), "w") as logf:
        rc = subprocess.run([str(llama_quantize)] + flags + [str(src), str(tmp), qtype, str(threads)],
                            stdout=logf, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"make_shape_models: llama-quantize failed (see {dst.with_suffix('.log')})")
    tmp.replace(dst)
    log(f"{dst.name}: {dst.stat().st_size / 2**30:.2f} GiB in {time.time() - t0:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES),
                    help=f"only these shapes (default: {' '.join(DEFAULT_SHAPES)})")
    ap.add_argument("--qtype", action="append", help="only these types (default: per shape)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "models" / "shapes")
    ap.add_argument("--llama-bin", type=Path,
                    default=Path(os.environ.get("OMNIBUS_LLAMA_CPP_DIR", REPO_ROOT / ".ref" / "build"))
                    / "bin")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--keep-f16", action="store_true")
    ap.add_argument("--python-q8", action="store_true",
                    help="write <shape>-Q8_0.gguf directly (gguf-py's Q8_0 quantizer), without "
                         "llama-quantize")
    args = ap.parse_args()
    if args.python_q8:
        args.out.mkdir(parents=True, exist_ok=True)
        for name in args.shape or DEFAULT_SHAPES:
            dst = args.out / f"{name}-Q8_0.gguf"
            if dst.exists():
                log(f"{dst.name} present")
            else:
                write_f16(name, SHAPES[name], dst, q8=True)
        return
    quantizer = args.llama_bin / "llama-quantize"
    if not quantizer.exists():
        sys.exit(f"make_shape_models: {quantizer} missing (scripts/build_llama_cpp.sh)")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.shape or DEFAULT_SHAPES:
        s = SHAPES[name]
        wanted = [q for q in (args.qtype or s["qtypes"])]
        todo = [q for q in wanted if not (args.out / f"{name}-{q}.gguf").exists()]
        for q in wanted:
            if q not in todo:
                log(f"{name}-{q}.gguf present")
        if not todo:
            continue
        via_q8 = s.get("via_q8", False)  # too large as F16: Q8_0 from gguf-py, then requantized
        src = args.out / (f"{name}-Q8_0-src.gguf" if via_q8 else f"{name}-F16.gguf")
        if not src.exists():
            need = sum(int(np.prod(sh)) * 2 for _, sh, _ in tensor_list(s))
            need = need * (0.53 + 0.35 if via_q8 else 1.6)
            free = shutil.disk_usage(args.out).free
            if free < need:
                sys.exit(f"make_shape_models: {name} needs {need / 2**30:.1f} GiB free "
                         f"(source + quantized), {free / 2**30:.1f} GiB there")
            write_f16(name, s, src, q8=via_q8)
        for q in todo:
            quantize(quantizer, src, args.out / f"{name}-{q}.gguf", q, args.threads,
                     requantize=via_q8)
        if not args.keep_f16:
            src.unlink()
            log(f"removed {src.name}")


if __name__ == "__main__":
    main()
