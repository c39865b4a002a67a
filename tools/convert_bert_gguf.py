#!/usr/bin/env python3
"""Hugging Face BERT (safetensors + tokenizer.json) -> a `bert` GGUF, as llama.cpp names it.

Why not llama.cpp's own `convert_hf_to_gguf.py`: it imports torch and
transformers (for the tensors and for the vocabulary), which do not install
offline here and weigh gigabytes. This script writes the same file from the
same inputs with numpy and PyPI's `gguf` (llama.cpp's writer), following the
reference converter of llama-cpp-python 0.3.36 (`conversion/bert.py`,
`conversion/base.py`, `gguf-py/gguf/vocab.py`) rule by rule:

  metadata   bert.{context_length, embedding_length, feed_forward_length,
             block_count, attention.head_count, attention.layer_norm_epsilon,
             attention.causal = false, pooling_type} (+ general.file_type = F16),
             pooling from the sentence-transformers module list (1_Pooling)
  vocabulary tokenizer.ggml.model "bert", pre "bert-bge" (the hash of
             bert-base-uncased's ids, as bge-small), tokens in "phantom space"
             form: "##ing" -> "ing", a word-initial "the" -> "\u2581the",
             control tokens ([CLS], [SEP], ...) unchanged; token types CONTROL
             for the tokenizer's special added tokens, NORMAL otherwise;
             token_type_count = type_vocab_size; special ids and add_*_token
             flags from tokenizer.json's TemplateProcessing and
             tokenizer_config.json; tokenizer.ggml.normalizer.lowercase from
             the BertNormalizer
  tensors    names from gguf's BERT tensor map (token_embd, token_types,
             position_embd, token_embd_norm, blk.N.attn_{q,k,v,output},
             blk.N.attn_output_norm, blk.N.ffn_{up,down}, blk.N.layer_output_norm;
             a classifier's cls / cls.output when present); 2-D .weight tensors
             F16 except position_embd and token_types (F32), everything else F32

Usage: convert_bert_gguf.py MODEL_DIR OUT.gguf [--outtype f16|f32]
"""

import argparse
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}


def read_safetensors(path: Path):
    """name -> numpy array (F32 / F16 / BF16 widened to F32)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=ST_DTYPES[info["dtype"]])
        out[name] = a.reshape(info["shape"])
    return out


def pooling_type(model_dir: Path):
    modules = model_dir / "modules.json"
    if not modules.is_file():
        return None
    for mod in json.loads(modules.read_text()):
        if mod["type"].endswith("Pooling"):
            cfg = json.loads((model_dir / mod["path"] / "config.json").read_text())
            if cfg.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if cfg.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            if cfg.get("pooling_mode_lasttoken"):
                return gguf.PoolingType.LAST
            raise SystemExit("only mean, cls and last-token pooling are supported")
    return None


def vocab(model_dir: Path, hparams: dict):
    """tokens (phantom-space form), token types, special ids, add flags, lowercase."""
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    if tok["model"]["type"] != "WordPiece":
        raise SystemExit(f"tokenizer model {tok['model']['type']} is not WordPiece")
    table = tok["model"]["vocab"]
    n_vocab = hparams.get("vocab_size", len(table))
    rev = {i: t for t, i in table.items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = rev[i]
        if i in added and added[i].get("special"):
            types.append(gguf.TokenType.CONTROL)
            tokens.append(t)  # control tokens keep their text
            continue
        types.append(gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL)
        tokens.append(t[2:] if t.startswith("##") else "\u2581" + t)

    def tid(text):
        return table.get(text) if isinstance(text, str) else None

    bos = cfg.get("bos_token") or cfg.get("cls_token")
    eos = cfg.get("eos_token") or cfg.get("sep_token")
    special = {"bos": tid(bos), "eos": tid(eos), "unk": tid(cfg.get("unk_token")),
               "sep": tid(cfg.get("sep_token")), "pad": tid(cfg.get("pad_token")),
               "cls": tid(cfg.get("cls_token")), "mask": tid(cfg.get("mask_token"))}
    add = {}
    pp = tok.get("post_processor") or {}
    for proc in pp.get("processors", [pp]):
        if proc.get("type") != "TemplateProcessing":
            continue
        single = proc.get("single", [])
        first = single[0].get("SpecialToken", {}).get("id") if single else None
        last = single[-1].get("SpecialToken", {}).get("id") if len(single) > 1 else None
        if first:
            add["bos"] = first in (bos, cfg.get("cls_token"))
        if last:
            add["eos"] = last == eos
        pair = proc.get("pair", [])
        if pair:
            start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
            stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
            mid = pair[start:stop]
            if len(mid) > 2:  # A [sep] ... B
                add_sep = False
                entry = mid[1].get("SpecialToken", {}).get("id")
                if entry in (cfg.get("sep_token"), eos) and not last:
                    add_sep = True
                if len(mid) == 4 and mid[2].get("SpecialToken", {}).get("id") in (
                        cfg.get("sep_token"), eos):
                    add_sep = True
                add["sep"] = add_sep
    lowercase = None
    norm = tok.get("normalizer") or {}
    for n in norm.get("normalizers", [norm]):
        if n.get("type") == "Lowercase":
            lowercase = True
        elif n.get("type") == "BertNormalizer" and "lowercase" in n:
            lowercase = n["lowercase"]
    return tokens, types, special, add, lowercase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    args = ap.parse_args()
    d = args.model_dir
    hp = json.loads((d / "config.json").read_text())
    if hp.get("model_type") != "bert":
        raise SystemExit(f"{d}: model_type {hp.get('model_type')} is not bert")
    n_layer = hp["num_hidden_layers"]
    ftype = gguf.LlamaFileType.MOSTLY_F16 if args.outtype == "f16" else gguf.LlamaFileType.ALL_F32

    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "bert")
    w.add_name(hp.get("_name_or_path", d.name).split("/")[-1])
    w.add_block_count(n_layer)
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_file_type(ftype)
    w.add_causal_attention(False)
    if (pt := pooling_type(d)) is not None:
        w.add_pooling_type(pt)

    tokens, types, special, add, lowercase = vocab(d, hp)
    w.add_token_type_count(hp.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # Key names as llama.cpp spells them (gguf-py 0.19 lacks the cls / mask adders).
    id_keys = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding",
               "cls": "cls", "mask": "mask"}
    for typ, tid in special.items():
        if tid is not None and tid < len(tokens):
            w.add_uint32(f"tokenizer.ggml.{id_keys[typ]}_token_id", tid)
    for typ, value in add.items():
        w.add_bool(f"tokenizer.ggml.add_{typ}_token", value)
    if lowercase is not None:
        w.add_bool("tokenizer.ggml.normalizer.lowercase", bool(lowercase))

    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    f32_2d = {"position_embd.weight", "token_types.weight"}
    for name, t in read_safetensors(d / "model.safetensors").items():
        if name.startswith("bert."):
            name = name[5:]
        if name.endswith(".gamma"):
            name = name[:-6] + ".weight"
        if name.endswith(".beta"):
            name = name[:-5] + ".bias"
        if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue
        if name.startswith(("cls.predictions", "cls.seq_relationship")):
            continue
        if name == "classifier.weight":
            name = "classifier.out_proj.weight"
        if name == "classifier.bias":
            name = "classifier.out_proj.bias"
        new = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"cannot map tensor {name}")
        t = np.ascontiguousarray(t.astype(np.float32))
        if (args.outtype == "f16" and t.ndim >= 2 and new.endswith(".weight")
                and new not in f32_2d and not new.endswith("_norm.weight")):
            w.add_tensor(new, t.astype(np.float16), raw_dtype=gguf.GGMLQuantizationType.F16)
        else:
            w.add_tensor(new, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, args.out)
    print(f"convert_bert_gguf: wrote {args.out} ({len(tokens)} tokens, {n_layer} layers)")


if __name__ == "__main__":
    sys.exit(main())
