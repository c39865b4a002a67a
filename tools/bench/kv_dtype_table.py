#!/usr/bin/env python3
"""KV-cache dtype table for docs/kv-quantization.md, in one run, back to back.

For each model and each --kv-cache-dtype (f32 f16 q8 q4 kivi2):
  - bytes per token of the pool's blocks (formula of kv/kv_quant.h, from
    the GGUF's layer/head geometry) and, for kivi2 and q4 (KIVI keys), the
    fixed fp16 residual area (as src/kv/kv_cache_size.cc sizes it: 1 + window
    slots per layer for each of --max-num-seqs (256) running sequences, at most
    half of the memory, and past 64 sequences at most an eighth; the window is
    1 block for kivi2, 0 for q4);
  - perplexity: omnibus perplexity -f tests/data/perplexity.txt --ctx-size 512
    and its change against f16;
  - max concurrent sequences of CTX (512) tokens in a POOL (64 MiB) pool,
    residual area included (computed from the same formula; q4/kivi2 also
    run no more sequences than their residual slots serve);
  - omnibus bench, 64 requests x (IN prompt + OUT generated) at concurrency 64,
    twice: in a SMALL pool (memory limits concurrency; the residual area of
    kivi2 and q4 comes out of the same budget) and in a BIG pool (it does not).
Prints a markdown table on stdout; raw JSON goes to OUTDIR if given.

Usage: tools/bench/kv_dtype_table.py [--models smollm2-135m gemma3-270m]
Environment: OMNIBUS_BIN (build/omnibus), THREADS (2), CHUNKS (-1 = all),
SMALL_MIB (48), BIG_MIB (1024), POOL_MIB (64), IN (64), OUT (64), DTYPES, OUTDIR.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
THREADS = os.environ.get("THREADS", "2")
CHUNKS = os.environ.get("CHUNKS", "-1")
MIB = 1 << 20
SMALL = int(os.environ.get("SMALL_MIB", "48")) * MIB
BIG = int(os.environ.get("BIG_MIB", "1024")) * MIB
POOL = int(os.environ.get("POOL_MIB", "64")) * MIB
CTX = 512
IN = int(os.environ.get("IN", "64"))
OUT = int(os.environ.get("OUT", "64"))
DTYPES = os.environ.get("DTYPES", "f32 f16 q8 q4 kivi2").split()
BS = 16
WINDOW = {"kivi2": 1, "q4": 0}  # kv_default_window_blocks
MAX_NUM_SEQS = 256  # --max-num-seqs default
RESIDUAL_SEQS_ALWAYS = 64  # kResidualSeqsAlways (src/engine/engine.h)


def run(args, stdout_only=False):
    p = subprocess.run([BIN] + args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{p.stderr[-2000:]}")
    return p.stdout if stdout_only else p.stdout + p.stderr


def geometry(model):
    path = os.path.join(ROOT, "models", model + ".gguf")
    meta = {}
    for line in run(["inspect", path]).splitlines():
        m = re.match(r"\s*(\S+)\s+\S+\s+(\d+)\s*$", line)
        if m:
            meta[m.group(1)] = int(m.group(2))
    arch = "gemma3" if any(k.startswith("gemma3.") for k in meta) else "llama"
    n_head = meta[f"{arch}.attention.head_count"]
    hd = meta.get(f"{arch}.attention.key_length", meta[f"{arch}.embedding_length"] // n_head)
    return meta[f"{arch}.block_count"], meta[f"{arch}.attention.head_count_kv"], hd


def r4(n):
    return (n + 3) // 4 * 4


def unit_bytes(dtype, bs, hd):  # (K unit, V unit) bytes, as kv/kv_quant.cc
    n = bs * hd
    if dtype == "f32":
        return 4 * n, 4 * n
    if dtype == "f16":
        return 2 * n, 2 * n
    if dtype == "q8":
        b = r4(r4(n) + 2 * bs)
        return b, b
    codes = 8 + r4(max(3 * hd, 4 * bs))  # KIVI keys: header + per-channel stats
    if dtype == "q4":
        g = 32 if hd % 32 == 0 else hd
        return r4(codes + bs * (hd // 2)), r4(n // 2) + bs * (hd // g) * 4
    return r4(codes + bs * (hd // 4)), r4(n // 4) + 4 * bs


def block_bytes(geo, dtype):
    n_layers, n_kv, hd = geo
    k, v = unit_bytes(dtype, BS, hd)
    return n_layers * n_kv * (k + v)


def resident_seqs(geo, dtype, total):
    """q4/kivi2: sequences the residual slots serve for --kv-cache-memory `total`."""
    n_layers, n_kv, hd = geo
    per_seq = 1 + WINDOW[dtype]
    slot = n_layers * 2 * n_kv * BS * hd * 2
    seqs = min(MAX_NUM_SEQS, total // 2 // (per_seq * slot))
    if seqs > RESIDUAL_SEQS_ALWAYS:  # past 64 only within an eighth of the memory
        seqs = max(RESIDUAL_SEQS_ALWAYS, min(seqs, total // 8 // (per_seq * slot)))
    return max(1, seqs)


def fixed_bytes(geo, dtype, total):
    """The fp16 residual area the engine allocates for --kv-cache-memory `total`."""
    if dtype not in WINDOW:  # only the formats with KIVI keys keep an fp16 residual
        return 0
    n_layers, n_kv, hd = geo
    return resident_seqs(geo, dtype, total) * (1 + WINDOW[dtype]) * n_layers * 2 * n_kv * BS * hd * 2


def blocks_in(geo, dtype, total):
    """The engine's block count for --kv-cache-memory `total` (blocks + residual fit)."""
    return (total - fixed_bytes(geo, dtype, total)) // block_bytes(geo, dtype)


def perplexity(model, dtype):
    out = run(["perplexity", "-m", model, "-f", "tests/data/perplexity.txt", "--ctx-size", str(CTX),
               "--chunks", CHUNKS, "-t", THREADS, "--kv-cache-dtype", dtype], stdout_only=True)
    return float(re.findall(r"perplexity: ([0-9.]+)", out)[-1])


def bench(model, dtype, pool_bytes, outdir, tag):
    path = os.path.join(outdir, f"{model}-{dtype}-{tag}.json")
    run(["bench", "-m", model, "--num-requests", "64", "--concurrency", "64", "--input-len", str(IN),
         "--output-len", str(OUT), "--threads", THREADS, "--kv-cache-dtype", dtype,
         "--kv-cache-memory", str(pool_bytes), "--json", path])
    return json.load(open(path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    args = ap.parse_args()
    outdir = os.environ.get("OUTDIR") or tempfile.mkdtemp()
    os.makedirs(outdir, exist_ok=True)
    print(f"omnibus {BIN}, {THREADS} threads; perplexity ctx {CTX} chunks {CHUNKS}; "
          f"bench 64 requests x ({IN} in + {OUT} out), concurrency 64; small pool {SMALL // MIB} MiB, "
          f"big pool {BIG // MIB} MiB; max sequences of {CTX} tokens in {POOL // MIB} MiB\n")
    print("| model | dtype | bytes/token | vs f16 | fixed residual MiB (64 MiB pool) | perplexity | vs f16 | "
          f"max seqs ({POOL // MIB} MiB) | small pool: blocks | preemptions | output tok/s | "
          "big pool: output tok/s | vs f16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        try:
            run(["generate", "-m", model, "-p", "Hello", "-n", "2"])
        except RuntimeError as e:
            print(f"| {model} | not run: `omnibus generate` fails ({str(e).splitlines()[-1][:80]}) |")
            continue
        geo = geometry(model)
        rows = {}
        for dtype in DTYPES:
            r = {"bpt": block_bytes(geo, dtype) / BS}
            nb = blocks_in(geo, dtype, POOL)
            r["fixed"] = fixed_bytes(geo, dtype, POOL) / MIB
            r["max_seqs"] = nb // (CTX // BS)
            if dtype in WINDOW:
                r["max_seqs"] = min(r["max_seqs"], resident_seqs(geo, dtype, POOL))
            r["ppl"] = perplexity(model, dtype)
            # --kv-cache-memory covers blocks and the residual area
            r["small"] = bench(model, dtype, SMALL, outdir, "small")
            assert r["small"]["kv_cache_blocks"] == blocks_in(geo, dtype, SMALL), (dtype, r["small"]["kv_cache_blocks"])
            r["big"] = bench(model, dtype, BIG, outdir, "big")
            rows[dtype] = r
            print(f"  done {model} {dtype}: ppl {r['ppl']:.4f}", file=sys.stderr)
        base = rows.get("f16")
        for dtype, r in rows.items():
            rel = lambda a, b: f"{100 * (a / b - 1):+.2f}%" if base else "-"
            s, b = r["small"], r["big"]
            print(f"| {model} | {dtype} | {r['bpt']:.0f} | {r['bpt'] / base['bpt']:.3f} | {r['fixed']:.1f} | "
                  f"{r['ppl']:.4f} | {rel(r['ppl'], base['ppl'])} | {r['max_seqs']} | "
                  f"{s['kv_cache_blocks']} | {s['preemptions']} | {s['output_throughput']:.1f} | "
                  f"{b['output_throughput']:.1f} | {rel(b['output_throughput'], base['big']['output_throughput'])} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
