#!/usr/bin/env python3
"""Vocab-only GGUFs with SmolLM2's vocabulary under another pre-tokenizer, so
that llama.cpp's own ids can be had for omnibus's Llama 3 and Qwen 2
pre-tokenizers without downloading a Llama 3 or Qwen model.

Reads models/smollm2-135m.gguf (checked by sha256: the bundled SmolLM2 from
scripts/fetch_models.sh) and writes, for each --pre value P,
models/random/smollm2-vocab-P.gguf: no tensors; general.architecture "llama"
and SmolLM2's llama.* hyperparameters (llama.cpp's vocab-only load still reads
them); tokenizer.ggml.model, tokens (their raw bytes), token_type, merges and
the bos / eos / unknown / padding ids as SmolLM2 has them; and
tokenizer.ggml.pre = P. SmolLM2's add_bos_token, add_space_prefix and chat
template are left out, so each pre-tokenizer's own add_bos default applies
(llama-bpe: true, qwen2: false).

The output is byte-identical on every machine for the pinned `gguf` package
(tests/requirements.txt): the golden files made from these GGUFs
(tests/golden/tokenizer/smollm2-vocab-P.json, by gen_tokenizer_golden.py)
record their sha256 and tokenizer_test.cc checks it.

How to run (from the repository root; scripts/fetch_models.sh runs it when the
files are missing):

    .venv/bin/python tools/golden/make_vocab_gguf.py            # llama-bpe and qwen2
    .venv/bin/python tools/golden/make_vocab_gguf.py --pre qwen2
"""
import argparse
import hashlib
import os
import sys

import gguf

SOURCE = "models/smollm2-135m.gguf"
SOURCE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Copied as they are (tokenizer.ggml.pre is set per output).
COPIED_TOKENIZER_IDS = ["bos", "eos", "unknown", "padding"]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def raw_strings(field):
    """The array's strings as bytes (no UTF-8 decoding on the way)."""
    return [bytes(field.parts[i]) for i in field.data]


def scalar(field):
    return field.parts[field.data[0]].tolist()[0]


def write_vocab_gguf(reader, pre, out):
    fields = reader.fields
    w = gguf.GGUFWriter(out + ".tmp", arch="llama")
    w.add_name(f"SmolLM2-135M vocabulary, tokenizer.ggml.pre={pre}")
    for key, field in fields.items():  # hyperparameters, in the source's order
        if not key.startswith("llama."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.UINT32:
            w.add_uint32(key, scalar(field))
        elif vtype == gguf.GGUFValueType.FLOAT32:
            w.add_float32(key, scalar(field))
        else:
            sys.exit(f"{key}: unexpected type {vtype}")
    w.add_tokenizer_model(fields["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(pre)
    w.add_token_list(raw_strings(fields["tokenizer.ggml.tokens"]))
    w.add_token_types([int(t) for t in fields["tokenizer.ggml.token_type"].contents()])
    w.add_token_merges(raw_strings(fields["tokenizer.ggml.merges"]))
    for name in COPIED_TOKENIZER_IDS:
        w.add_uint32(f"tokenizer.ggml.{name}_token_id", scalar(fields[f"tokenizer.ggml.{name}_token_id"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".tmp", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pre", nargs="+", default=["llama-bpe", "qwen2"])
    ap.add_argument("--out-dir", default="models/random")
    ap.add_argument("--source", default=SOURCE)
    args = ap.parse_args()

    got = sha256_of(args.source)
    if got != SOURCE_SHA256:
        sys.exit(f"{args.source}: sha256 {got}, expected {SOURCE_SHA256} (scripts/fetch_models.sh)")
    reader = gguf.GGUFReader(args.source)
    os.makedirs(args.out_dir, exist_ok=True)
    for pre in args.pre:
        out = os.path.join(args.out_dir, f"smollm2-vocab-{pre}.gguf")
        write_vocab_gguf(reader, pre, out)
        print(f"wrote {out} (sha256 {sha256_of(out)})", file=sys.stderr)


if __name__ == "__main__":
    main()
