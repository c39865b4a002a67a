#!/usr/bin/env python3
"""Writes the GGUF fuzz seed corpus (fuzz/corpus/gguf/) from an encoder that is
independent of omnibus' C++ writer, so the reader is also checked against a
second implementation: src/gguf/gguf_corpus_test.cc requires every valid_*
file to parse and every trunc_*/bad_* file to be rejected.

Usage: fuzz/make_gguf_corpus.py [OUT_DIR]   (default: fuzz/corpus/gguf next to this script)
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
              F32: "<f", BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block size, bytes per block)
GEOMETRY = {0: (1, 4), 1: (1, 2), 3: (32, 20), 8: (32, 34), 12: (256, 144), 30: (1, 2)}


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v, elem=None):
    out = gstr(key) + struct.pack("<I", t)
    if t == ARR:
        out += struct.pack("<IQ", elem, len(v)) + b"".join(value(elem, x) for x in v)
    else:
        out += value(t, v)
    return out


def gguf(kvs, tensors, version=3, alignment=32):
    """tensors: list of (name, shape, ggml_type); data is a deterministic byte pattern."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    blobs, offset = [], 0
    for i, (name, shape, t) in enumerate(tensors):
        block, size = GEOMETRY[t]
        n = shape[0] // block * size
        for d in shape[1:]:
            n *= d
        out += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<q", d) for d in shape)
        out += struct.pack("<IQ", t, offset)
        blob = bytes((i * 37 + j * 11) & 0xFF for j in range(n))
        blobs.append(blob)
        offset += (n + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for blob in blobs:
        out += blob + b"\0" * (-len(blob) % alignment)
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "gguf")
    os.makedirs(out_dir, exist_ok=True)
    every_type = [
        kv("general.architecture", STR, "llama"), kv("t.u8", U8, 7), kv("t.i8", I8, -7),
        kv("t.u16", U16, 700), kv("t.i16", I16, -700), kv("t.u32", U32, 70000), kv("t.i32", I32, -70000),
        kv("t.f32", F32, 0.5), kv("t.bool", BOOL, 1), kv("t.u64", U64, 2**40), kv("t.i64", I64, -(2**40)),
        kv("t.f64", F64, 0.125), kv("t.strs", ARR, ["<s>", "", "é"], STR), kv("t.f32s", ARR, [1.0, 2.0], F32),
        kv("t.i32s", ARR, [1, -2, 3], I32), kv("t.u64s", ARR, [2**63], U64), kv("t.empty", ARR, [], U8),
    ]
    model_kvs = [
        kv("general.architecture", STR, "llama"), kv("llama.block_count", U32, 1),
        kv("llama.embedding_length", U32, 32), kv("tokenizer.ggml.tokens", ARR, ["a", "b", "ab"], STR),
        kv("tokenizer.ggml.scores", ARR, [0.0, -1.0, -2.0], F32),
    ]
    model_tensors = [("token_embd.weight", [32, 3], 8), ("blk.0.attn_norm.weight", [32], 0),
                     ("blk.0.ffn_up.weight", [32, 2], 3), ("output.weight", [256], 12)]
    tiny = gguf(model_kvs, model_tensors)
    files = {
        "valid_empty_v3.gguf": gguf([], []),
        "valid_every_type_v2.gguf": gguf(every_type, [], version=2),
        "valid_every_type_v3.gguf": gguf(every_type, []),
        "valid_tiny_model.gguf": tiny,
        "valid_align64.gguf": gguf([kv("general.alignment", U32, 64)], [("w", [4, 2, 2], 1), ("v", [8], 30)],
                                   alignment=64),
        "trunc_header.gguf": tiny[:20],
        "trunc_in_kv.gguf": tiny[:60],
        "trunc_in_tensor_info.gguf": tiny[:tiny.index(b"blk.0.ffn_up") + 5],
        "trunc_in_data.gguf": tiny[:-200],
        "bad_version1.gguf": b"GGUF" + struct.pack("<III", 1, 0, 0),
        "bad_dup_key.gguf": gguf([kv("a", U32, 1), kv("a", U32, 2)], []),
        "bad_nested_array.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("a") + struct.pack("<IIQ", ARR, ARR, 0),
        "bad_alignment.gguf": gguf([kv("general.alignment", U32, 48)], [("w", [8], 0)]),
    }
    for name, data in sorted(files.items()):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files, {sum(len(d) for d in files.values())} bytes, to {out_dir}")


if __name__ == "__main__":
    main()
