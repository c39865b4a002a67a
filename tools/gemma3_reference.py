#!/usr/bin/env python3
"""Gemma 3 in float64, from its GGUF, as a third opinion on where omnibus and
llama.cpp differ (docs/gemma3.md, "Where the distributions differ").

Reads the tokens and chunks of a llama-perplexity logits file (BASE, made by
`llama-perplexity --kl-divergence-base`), evaluates each chunk with a float64
forward pass written from the architecture's definition (weights dequantized
by `gguf.quants`; embeddings scaled by sqrt(n_embd); per-head Q/K RMSNorm;
NeoX RoPE, base 1e6 on global and 1e4 on sliding layers; GeGLU; the post
norms; the tied output head) and writes the logits as a new file in the same
format, so that `omnibus perplexity --kl-divergence-base OUT` and
`llama-perplexity --kl-divergence --kl-divergence-base OUT` measure each
engine's distance from exact arithmetic.

Switches put one engine-side rounding back at a time, to see which moves the
reference towards which engine:
  --kv-f16      K (after RoPE) and V rounded to f16, as both engines' f16 caches store them
  --act-q8      every matmul input quantized as both engines do (Q8_0 blocks of 32 for
                Q4_0..Q8_0 weights, Q8_K blocks of 256 for K-quants)
  --q-f16       Q rounded to f16 before Q.K (llama.cpp's f16-K attention, both paths)
  --probs-f16   softmax probabilities rounded to f16 before P.V (llama.cpp without flash
                attention; its flash path accumulates P.V in f16 instead: --pv-f16)
  --pv-f16      the P.V accumulator rounded to f16 after every key (llama.cpp's CPU flash
                attention with an f16 V cache, for few queries; prompts take its tiled f32 path)
  --gelu-f16    GeGLU's GELU through llama.cpp's f16 table: gelu(f16(x)) rounded to f16 for
                |x| < 10 (ggml_vec_geglu_f32 with GGML_GELU_FP16, ggml-cpu/vec.h)

Usage:
  .venv/bin/python tools/gemma3_reference.py --model models/gemma3-270m.gguf \\
      --base BASE.kld --out OUT.kld [--chunks N] [switches]
"""
import argparse
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q


def read_base(path):
    with open(path, "rb") as f:
        if f.read(8) != b"_logits_":
            sys.exit(f"{path}: not a llama-perplexity logits file")
        n_ctx, n_vocab, n_chunk = struct.unpack("<iii", f.read(12))
        tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4")
    return n_ctx, n_vocab, n_chunk, tokens


def encode_rows(logits):
    """llama-perplexity's row encoding (see src/eval/logits_file.h), rows of float32 logits."""
    n_rows, n_vocab = logits.shape
    nv = 2 * ((n_vocab + 1) // 2) + 4
    out = np.zeros((n_rows, nv), dtype="<u2")
    for r in range(n_rows):
        l = logits[r].astype(np.float32)
        mx, mn = np.float32(l.max()), np.float32(l.min())
        mn = np.float32(max(mn, mx - np.float32(16)))
        sum_exp = float(np.sum(np.exp(l - mx).astype(np.float64)))
        lse = np.float32(np.log(sum_exp))
        min_log_prob = np.float32(mn - mx - lse)
        scale = np.float32((mx - mn) / np.float32(65535))
        out[r, 0:2] = np.frombuffer(struct.pack("<f", scale), dtype="<u2")
        out[r, 2:4] = np.frombuffer(struct.pack("<f", min_log_prob), dtype="<u2")
        if scale != 0:
            inv = np.float32(1) / scale
            q = np.rint(inv * (l - mn)).astype(np.int64)
            out[r, 4:4 + n_vocab] = np.where(l > mn, q, 0).astype("<u2")
    return out


class Gemma3:
    def __init__(self, path, opts):
        self.o = opts
        r = gguf.GGUFReader(path)
        f = {k: v for k, v in r.fields.items()}

        def scalar(key):
            v = f[key]
            return v.parts[v.data[0]][0]

        a = "gemma3"
        self.n_layer = int(scalar(f"{a}.block_count"))
        self.n_embd = int(scalar(f"{a}.embedding_length"))
        self.n_head = int(scalar(f"{a}.attention.head_count"))
        self.n_head_kv = int(scalar(f"{a}.attention.head_count_kv"))
        self.head_dim = int(scalar(f"{a}.attention.key_length"))
        self.eps = float(scalar(f"{a}.attention.layer_norm_rms_epsilon"))
        self.base_global = float(scalar(f"{a}.rope.freq_base"))
        self.base_local = 10000.0
        self.window = int(scalar(f"{a}.attention.sliding_window"))
        self.bos = int(scalar("tokenizer.ggml.bos_token_id"))
        self.add_bos = bool(scalar("tokenizer.ggml.add_bos_token")) if "tokenizer.ggml.add_bos_token" in f else True
        self.t = {t.name: t for t in r.tensors}
        self.cache = {}

    def w(self, name):
        if name not in self.cache:
            t = self.t[name]
            x = gguf.quants.dequantize(t.data, t.tensor_type)
            self.cache[name] = (np.asarray(x, dtype=np.float64), t.tensor_type)
        return self.cache[name]

    def matmul(self, x, name):
        w, qt = self.w(name)  # [n_out, n_in]
        if self.o.act_q8:
            x = quantize_act(x, qt)
        return x @ w.T

    def rms(self, x, wname, eps=None):
        w = np.asarray(self.w(wname)[0], dtype=np.float64)
        v = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(v + (self.eps if eps is None else eps)) * w

    def rope(self, x, pos, base):
        d = x.shape[-1]
        half = d // 2
        inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
        ang = pos[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def forward(self, tokens):
        n = len(tokens)
        E, H, HKV, D = self.n_embd, self.n_head, self.n_head_kv, self.head_dim
        emb = self.t["token_embd.weight"]
        rows = [gguf.quants.dequantize(emb.data[t:t + 1], emb.tensor_type)[0] for t in tokens]
        x = np.asarray(rows, dtype=np.float64) * np.sqrt(np.float64(E))
        pos = np.arange(n, dtype=np.float64)
        causal = np.tril(np.ones((n, n), dtype=bool))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            sliding = il % 6 < 5
            h = self.rms(x, p + "attn_norm.weight")
            q = self.matmul(h, p + "attn_q.weight").reshape(n, H, D)
            k = self.matmul(h, p + "attn_k.weight").reshape(n, HKV, D)
            v = self.matmul(h, p + "attn_v.weight").reshape(n, HKV, D)
            q = self.rms(q, p + "attn_q_norm.weight")
            k = self.rms(k, p + "attn_k_norm.weight")
            base = self.base_local if sliding else self.base_global
            q, k = self.rope(q, pos, base), self.rope(k, pos, base)
            if self.o.kv_f16:
                k = k.astype(np.float16).astype(np.float64)
                v = v.astype(np.float16).astype(np.float64)
            if self.o.q_f16:
                q = q.astype(np.float16).astype(np.float64)
            mask = causal.copy()
            if sliding:
                mask &= (pos[:, None] - pos[None, :]) < self.window
            out = np.empty((n, H, D))
            for hh in range(H):
                kv = hh // (H // HKV)
                s = (q[:, hh, :] @ k[:, kv, :].T) / np.sqrt(D)
                s = np.where(mask, s, -np.inf)
                s = s - s.max(axis=1, keepdims=True)
                pr = np.exp(s)
                pr /= pr.sum(axis=1, keepdims=True)
                if self.o.probs_f16:
                    pr = pr.astype(np.float16).astype(np.float64)
                if self.o.pv_f16:
                    acc = np.zeros((n, D))
                    for j in range(n):  # online accumulation in key order, rounded to f16
                        acc = (acc + pr[:, j:j + 1] * v[j, kv, :][None, :]).astype(np.float16).astype(np.float64)
                    out[:, hh, :] = acc
                else:
                    out[:, hh, :] = pr @ v[:, kv, :]
            a = self.matmul(out.reshape(n, H * D), p + "attn_output.weight")
            x = x + self.rms(a, p + "post_attention_norm.weight")
            h = self.rms(x, p + "ffn_norm.weight")
            g = self.matmul(h, p + "ffn_gate.weight")
            u = self.matmul(h, p + "ffn_up.weight")
            if self.o.gelu_f16:
                x16 = g.astype(np.float16).astype(np.float64)
                t = (0.5 * x16 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x16 + 0.044715 * x16 ** 3))))
                t = t.astype(np.float32).astype(np.float16).astype(np.float64)
                g = np.where(g <= -10, 0.0, np.where(g >= 10, g, t))
            else:
                g = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
            y = self.matmul(g * u, p + "ffn_down.weight")
            x = x + self.rms(y, p + "post_ffw_norm.weight")
        return self.rms(x, "output_norm.weight")

    def logits(self, hidden):
        w, qt = self.w("token_embd.weight")
        if self.o.act_q8:
            hidden = quantize_act(hidden, qt)
        return hidden @ w.T


def quantize_act(x, weight_type):
    """The 8-bit activations both engines multiply with: Q8_K for K-quant weights, else Q8_0."""
    k_quant = weight_type in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
    bs = 256 if k_quant else 32
    shape = x.shape
    b = x.astype(np.float32).reshape(-1, bs)
    if k_quant:  # Q8_K: iscale = -127 / (the element of largest magnitude), float scale
        idx = np.argmax(np.abs(b), axis=1)
        mx = b[np.arange(len(b)), idx]
        with np.errstate(divide="ignore"):
            iscale = np.where(mx != 0, np.float32(-127) / mx, 0).astype(np.float32)
        qv = np.clip(np.rint(iscale[:, None] * b), -128, 127)
        d = np.where(iscale != 0, np.float32(1) / np.where(iscale != 0, iscale, 1), 0).astype(np.float32)
    else:  # Q8_0: d = amax / 127 stored as f16, q = round(x / d)
        amax = np.abs(b).max(axis=1)
        d = (amax / np.float32(127)).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            qv = np.where(d[:, None] != 0, np.rint(b / d[:, None]), 0)
        d = d.astype(np.float16).astype(np.float32)
    return (qv * d[:, None]).astype(np.float64).reshape(shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--base", required=True, help="a llama-perplexity logits file (its tokens)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--chunks", type=int, default=0, help="at most this many chunks (0: all)")
    for s in ("kv-f16", "act-q8", "q-f16", "probs-f16", "pv-f16", "gelu-f16"):
        ap.add_argument("--" + s, action="store_true")
    o = ap.parse_args()
    n_ctx, n_vocab, n_chunk, tokens = read_base(o.base)
    if o.chunks:
        n_chunk = min(n_chunk, o.chunks)
    m = Gemma3(o.model, o)
    first = n_ctx // 2
    with open(o.out, "wb") as f:
        f.write(b"_logits_" + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
        f.write(tokens[:n_ctx * n_chunk].astype("<i4").tobytes())
        for c in range(n_chunk):
            chunk = tokens[c * n_ctx:(c + 1) * n_ctx].copy()
            if m.add_bos:
                chunk[0] = m.bos
            hidden = m.forward(chunk)
            logits = m.logits(hidden[first:n_ctx - 1]).astype(np.float32)
            f.write(encode_rows(logits).tobytes())
            print(f"chunk {c + 1}/{n_chunk}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
