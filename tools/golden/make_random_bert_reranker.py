#!/usr/bin/env python3
"""A random-weight BERT cross-encoder (reranker) GGUF, for the /v1/rerank and
/v1/score tests: the architecture of ms-marco-MiniLM / bge-reranker as
llama.cpp's converter writes them (`bert`, pooling_type 4 = rank, the
classification head `cls.weight` / `cls.bias` [n_embd -> n_embd] + tanh and
`cls.output.weight` / `cls.output.bias` [n_embd -> 1]), with all-MiniLM-L6-v2's
real WordPiece vocabulary and tokenizer metadata (copied from
models/all-minilm-l6-v2.gguf) and narrow seeded random weights, so the file is
byte-identical everywhere.

Usage (scripts/fetch_models.sh runs it; idempotent unless --force):
  .venv/bin/python tools/golden/make_random_bert_reranker.py [--vocab models/all-minilm-l6-v2.gguf]
      [--out models/random/bert-reranker.gguf]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parents[2]
N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 128, 2, 4, 256, 512


def field_value(r, key):
    f = r.fields[key]
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [int(f.parts[i][0]) for i in f.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=str(ROOT / "models" / "all-minilm-l6-v2.gguf"))
    ap.add_argument("--out", default=str(ROOT / "models" / "random" / "bert-reranker.gguf"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"make_random_bert_reranker: {out} present")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    src = gguf.GGUFReader(args.vocab)
    tokens = field_value(src, "tokenizer.ggml.tokens")
    types = field_value(src, "tokenizer.ggml.token_type")
    rng = np.random.default_rng(37)

    tmp = out.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "bert")
    w.add_name("random-bert-reranker")
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_layer_norm_eps(1e-12)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_token_type_count(2)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    for key in ("bos", "eos", "unknown", "seperator", "padding", "cls", "mask"):
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", int(field_value(src, f"tokenizer.ggml.{key}_token_id")))
    for key in ("add_bos_token", "add_eos_token", "add_sep_token", "normalizer.lowercase"):
        w.add_bool(f"tokenizer.ggml.{key}", bool(field_value(src, f"tokenizer.ggml.{key}")))

    def mat(n_out, n_in, scale=None):  # numpy [n_out, n_in] = ggml [n_in, n_out]
        s = scale if scale is not None else 1.0 / np.sqrt(n_in)
        return (rng.standard_normal((n_out, n_in)) * s).astype(np.float32)

    def vec(n, mean=0.0, s=0.02):
        return (mean + rng.standard_normal(n) * s).astype(np.float32)

    f16 = gguf.GGMLQuantizationType.F16
    w.add_tensor("token_embd.weight", mat(len(tokens), N_EMBD, 0.5).astype(np.float16), raw_dtype=f16)
    w.add_tensor("token_types.weight", mat(2, N_EMBD, 0.1))
    w.add_tensor("position_embd.weight", mat(N_CTX, N_EMBD, 0.1))
    w.add_tensor("token_embd_norm.weight", vec(N_EMBD, 1.0, 0.1))
    w.add_tensor("token_embd_norm.bias", vec(N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + name + ".weight", mat(N_EMBD, N_EMBD).astype(np.float16), raw_dtype=f16)
            w.add_tensor(p + name + ".bias", vec(N_EMBD))
        w.add_tensor(p + "attn_output_norm.weight", vec(N_EMBD, 1.0, 0.1))
        w.add_tensor(p + "attn_output_norm.bias", vec(N_EMBD))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD).astype(np.float16), raw_dtype=f16)
        w.add_tensor(p + "ffn_up.bias", vec(N_FF))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF).astype(np.float16), raw_dtype=f16)
        w.add_tensor(p + "ffn_down.bias", vec(N_EMBD))
        w.add_tensor(p + "layer_output_norm.weight", vec(N_EMBD, 1.0, 0.1))
        w.add_tensor(p + "layer_output_norm.bias", vec(N_EMBD))
    w.add_tensor("cls.weight", mat(N_EMBD, N_EMBD).astype(np.float16), raw_dtype=f16)
    w.add_tensor("cls.bias", vec(N_EMBD))
    w.add_tensor("cls.output.weight", mat(1, N_EMBD).astype(np.float16), raw_dtype=f16)
    w.add_tensor("cls.output.bias", vec(1, 0.0, 0.1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    print(f"make_random_bert_reranker: wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
