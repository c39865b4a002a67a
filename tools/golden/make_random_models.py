#!/usr/bin/env python3
"""Random-weight GGUFs of every model family omnibus runs, for tests without downloads.

Each file is a small model (a few layers, narrow) with real metadata for its
family, written with PyPI's `gguf` package (llama.cpp's own writer), and a
real vocabulary: SmolLM2's byte-level BPE (tokens, merges, types, taken from
models/smollm2-135m.gguf) with the family's `tokenizer.ggml.pre`, the family's
special tokens appended and its real chat template
(tests/golden/chat/templates/). The weights come from a seeded NumPy
generator and the quantizers of `gguf.quants`, so the files are byte-identical
on every machine: tests/golden/forward/random-<family>.json records each
file's sha256, and the tests check it before comparing against llama.cpp.

  family     architecture  what it exercises
  llama3     llama         Llama 3: rope_freqs.weight (llama3 RoPE scaling), llama-bpe, GQA, Q8_0
  mistral    llama         Mistral: head_dim 64 != n_embd / n_head (key_length), rope base 1e6, Q4_0
  qwen2      qwen2         Q/K/V biases, NEOX RoPE, tied embeddings, qwen2 pre-tokenizer, Q8_0
  qwen3      qwen3         per-head RMSNorm on Q and K, head_dim 128, Q5_0
  qwen3moe   qwen3moe      8 experts, top-2 with normalised softmax weights, Q8_0 / Q4_1 experts
  phi3       phi3          fused QKV and gate-up tensors, LongRoPE factors (short/long), Q5_1
  tiny       llama         a 512-token slice of SmolLM2's vocabulary (merges kept where all three
                           tokens remain), n_embd 64: small enough that llama.cpp's logits over a
                           text fit a committed file (the KL-divergence test)

Usage (from the repository root; idempotent: existing files are left alone
unless --force, which rewrites them):
  .venv/bin/python tools/golden/make_random_models.py [--out models/random] [--family F ...]
"""

import argparse
import hashlib
import math
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = REPO_ROOT / "tests" / "golden" / "chat" / "templates"

# Shapes shared by every family (a family may override).
BASE = dict(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, ctx=4096,
            eps=1e-5, rope_base=10000.0)

FAMILIES = {
    "llama3": dict(arch="llama", pre="llama-bpe", qtype=Q.Q8_0, rope_base=500000.0, ctx=8192,
                   template="llama3.1.jinja", add_bos=True, bos="<|begin_of_text|>",
                   eos="<|eot_id|>",
                   specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                             "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"],
                   llama3_rope=dict(factor=8.0, low=1.0, high=4.0, orig_ctx=1024)),
    "mistral": dict(arch="llama", pre="smollm", qtype=Q.Q4_0, n_head=8, head_dim=64,
                    rope_base=1000000.0, template="mistral-nemo.jinja", add_bos=True, bos="<s>",
                    eos="</s>", specials=["<s>", "</s>", "[INST]", "[/INST]"]),
    "qwen2": dict(arch="qwen2", pre="qwen2", qtype=Q.Q8_0, rope_base=1000000.0, eps=1e-6,
                  tied=True, biases=True, template="qwen2.5.jinja", add_bos=False,
                  eos="<|im_end|>", specials=["<tool_call>", "</tool_call>"]),
    "qwen3": dict(arch="qwen3", pre="qwen2", qtype=Q.Q5_0, head_dim=128, rope_base=1000000.0,
                  eps=1e-6, qk_norm=True, template="qwen3.jinja", add_bos=False,
                  eos="<|im_end|>", specials=["<tool_call>", "</tool_call>", "<think>", "</think>"]),
    "qwen3moe": dict(arch="qwen3moe", pre="qwen2", qtype=Q.Q8_0, expert_qtype=Q.Q4_1,
                     head_dim=64, rope_base=1000000.0, eps=1e-6, qk_norm=True,
                     n_expert=8, n_expert_used=2, n_ff_exp=128, template="qwen3.jinja",
                     add_bos=False, eos="<|im_end|>",
                     specials=["<tool_call>", "</tool_call>", "<think>", "</think>"]),
    # Not made by default (--family qwen3moe-bench): a larger MoE for
    # tools/bench/moe.sh, shaped like a scaled-down Qwen3-30B-A3B (32 experts,
    # 4 per token, 6 layers; ~330 MB).
    "qwen3moe-bench": dict(arch="qwen3moe", pre="qwen2", qtype=Q.Q8_0, expert_qtype=Q.Q4_1,
                           n_embd=1024, n_layer=6, n_head=16, n_head_kv=4, head_dim=64,
                           rope_base=1000000.0, eps=1e-6, qk_norm=True, n_expert=32,
                           n_expert_used=4, n_ff_exp=512, template="qwen3.jinja",
                           add_bos=False, eos="<|im_end|>",
                           specials=["<tool_call>", "</tool_call>", "<think>", "</think>"]),
    "tiny": dict(arch="llama", pre="smollm", qtype=Q.Q8_0, vocab_size=512, n_embd=64, n_layer=2,
                 n_head=2, n_head_kv=1, head_dim=32, n_ff=128, template="chatml.jinja",
                 add_bos=False, eos="<|im_end|>", specials=[]),
    "phi3": dict(arch="phi3", pre="smollm", qtype=Q.Q5_1, n_head=4, n_head_kv=4, ctx=131072,
                 fused=True, template="phi3.5.jinja", add_bos=False, eos="<|end|>",
                 specials=["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>",
                           "<|end|>"],
                 longrope=dict(orig_ctx=4096, attn_factor=1.19)),
}


def smollm2_vocab():
    path = REPO_ROOT / "models" / "smollm2-135m.gguf"
    if not path.exists():
        sys.exit(f"make_random_models: {path} missing (scripts/fetch_models.sh)")
    r = gguf.GGUFReader(str(path))

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    return tokens, types, merges


def llama3_rope_factors(n_rot, base, factor, low, high, orig_ctx):
    """Llama 3's per-frequency divisors, as convert_hf_to_gguf.py writes rope_freqs.weight."""
    freqs = 1.0 / (base ** (np.arange(0, n_rot, 2, dtype=np.float32) / n_rot))
    low_wavelen = orig_ctx / low
    high_wavelen = orig_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


class Maker:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std):
        return (self.rng.standard_normal(size=shape, dtype=np.float32) * np.float32(std))

    def norm(self, n):
        return (1.0 + self.normal((n,), 0.1)).astype(np.float32)


def add_matrix(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype):
    if qtype == Q.F32:
        w.add_tensor(name, data.astype(np.float32))
        return
    w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def write_family(name: str, out: Path) -> Path:
    spec = {**BASE, **FAMILIES[name]}
    arch = spec["arch"]
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    mk = Maker(seed)
    tokens, types, merges = smollm2_vocab()
    if "vocab_size" in spec:  # a prefix of the vocabulary, with the merges it can still do
        tokens, types = tokens[:spec["vocab_size"]], types[:spec["vocab_size"]]
        kept = set(tokens)
        merges = [m for m in merges
                  if (lambda a, b: a in kept and b in kept and a + b in kept)(*m.split(" ", 1))]
    for s in spec["specials"]:
        if s not in tokens:
            tokens.append(s)
            types.append(int(gguf.TokenType.CONTROL))
    n_vocab = len(tokens)
    E, L, H, HKV, D, F = (spec[k] for k in ("n_embd", "n_layer", "n_head", "n_head_kv",
                                              "head_dim", "n_ff"))
    nq, nkv = H * D, HKV * D
    qt = spec["qtype"]

    path = out / f"{name}.gguf"
    tmp = path.with_suffix(".gguf.tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(f"random-{name}")
    w.add_block_count(L)
    w.add_context_length(spec["ctx"])
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    if D != E // H:
        w.add_key_length(D)
        w.add_value_length(D)
    w.add_layer_norm_rms_eps(spec["eps"])
    w.add_rope_freq_base(spec["rope_base"])
    w.add_rope_dimension_count(D)
    if "n_expert" in spec:
        w.add_expert_count(spec["n_expert"])
        w.add_expert_used_count(spec["n_expert_used"])
        w.add_expert_feed_forward_length(spec["n_ff_exp"])
    if "longrope" in spec:
        w.add_rope_scaling_attn_factors(spec["longrope"]["attn_factor"])
        w.add_rope_scaling_orig_ctx_len(spec["longrope"]["orig_ctx"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(spec["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index(spec["eos"]))
    w.add_bos_token_id(tokens.index(spec.get("bos", "<|endoftext|>")))
    w.add_add_bos_token(spec["add_bos"])
    w.add_chat_template((TEMPLATES / spec["template"]).read_text())

    # Tied models scale the embedding so the logits keep a std of about 4.
    embd_std = 4.0 / math.sqrt(E) if spec.get("tied") else 1.0
    add_matrix(w, "token_embd.weight", mk.normal((n_vocab, E), embd_std), Q.Q8_0)
    w.add_tensor("output_norm.weight", mk.norm(E))
    if not spec.get("tied"):
        add_matrix(w, "output.weight", mk.normal((n_vocab, E), 4.0 / math.sqrt(E)), Q.Q8_0)
    if "llama3_rope" in spec:
        r = spec["llama3_rope"]
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(D, spec["rope_base"], r["factor"],
                                                              r["low"], r["high"], r["orig_ctx"]))
    if "longrope" in spec:
        half = D // 2
        short = (1.0 + np.abs(mk.normal((half,), 0.05))).astype(np.float32)
        long = np.cumprod(np.full(half, 1.08, dtype=np.float32)).astype(np.float32)
        w.add_tensor("rope_factors_long.weight", long)
        w.add_tensor("rope_factors_short.weight", short)

    for il in range(L):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", mk.norm(E))
        if spec.get("fused"):
            add_matrix(w, p + "attn_qkv.weight", mk.normal((nq + 2 * nkv, E), 1 / math.sqrt(E)), qt)
        else:
            add_matrix(w, p + "attn_q.weight", mk.normal((nq, E), 1 / math.sqrt(E)), qt)
            add_matrix(w, p + "attn_k.weight", mk.normal((nkv, E), 1 / math.sqrt(E)), qt)
            add_matrix(w, p + "attn_v.weight", mk.normal((nkv, E), 1 / math.sqrt(E)), qt)
        if spec.get("biases"):
            w.add_tensor(p + "attn_q.bias", mk.normal((nq,), 0.5))
            w.add_tensor(p + "attn_k.bias", mk.normal((nkv,), 0.5))
            w.add_tensor(p + "attn_v.bias", mk.normal((nkv,), 0.5))
        if spec.get("qk_norm"):
            w.add_tensor(p + "attn_q_norm.weight", mk.norm(D))
            w.add_tensor(p + "attn_k_norm.weight", mk.norm(D))
        add_matrix(w, p + "attn_output.weight", mk.normal((E, nq), 1 / math.sqrt(nq)), qt)
        w.add_tensor(p + "ffn_norm.weight", mk.norm(E))
        if "n_expert" in spec:
            X, FE, eq = spec["n_expert"], spec["n_ff_exp"], spec["expert_qtype"]
            # A wide router: softmax probabilities far from ties, so the top-k
            # choice does not hinge on rounding.
            w.add_tensor(p + "ffn_gate_inp.weight", mk.normal((X, E), 3 / math.sqrt(E)))
            add_matrix(w, p + "ffn_gate_exps.weight", mk.normal((X, FE, E), 1 / math.sqrt(E)), eq)
            add_matrix(w, p + "ffn_up_exps.weight", mk.normal((X, FE, E), 1 / math.sqrt(E)), eq)
            add_matrix(w, p + "ffn_down_exps.weight", mk.normal((X, E, FE), 1 / math.sqrt(FE)), eq)
        elif spec.get("fused"):
            add_matrix(w, p + "ffn_up.weight", mk.normal((2 * F, E), 1 / math.sqrt(E)), qt)
            add_matrix(w, p + "ffn_down.weight", mk.normal((E, F), 1 / math.sqrt(F)), qt)
        else:
            add_matrix(w, p + "ffn_gate.weight", mk.normal((F, E), 1 / math.sqrt(E)), qt)
            add_matrix(w, p + "ffn_up.weight", mk.normal((F, E), 1 / math.sqrt(E)), qt)
            add_matrix(w, p + "ffn_down.weight", mk.normal((E, F), 1 / math.sqrt(F)), qt)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "models" / "random")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES),
                    help="only these families (default: all but qwen3moe-bench)")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.family or [f for f in FAMILIES if not f.endswith("-bench")]:
        path = args.out / f"{name}.gguf"
        if args.force or not path.exists():
            write_family(name, args.out)
            print(f"{path}  {path.stat().st_size / 2**20:.1f} MiB  sha256 {sha256_of(path)}")
        else:
            print(f"models: {path} present")


if __name__ == "__main__":
    main()
