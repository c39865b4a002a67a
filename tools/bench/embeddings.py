#!/usr/bin/env python3
"""omnibus serve vs llama-server --embeddings: same GGUF (all-MiniLM-L6-v2),
same threads, same client, same inputs, A B A B in one run (issue 37).

Workload: NUM requests to POST /v1/embeddings, one input each, token-id inputs
of 32-512 tokens ([CLS] + random vocabulary ids + [SEP], seeded, so both
servers see exactly the same tokens), at CONCURRENCY in flight, for each
concurrency in --concurrency (default 1, 16, 64).

Measured by this client per request: latency (sent -> response); per run:
embeddings/s (requests / wall time from the first send to the last reply).

Servers:
  omnibus:      OMNIBUS_BIN serve -m MODEL -t THREADS --port P --max-num-seqs 64
  llama-server: LLAMA_SERVER -m MODEL --embeddings --pooling mean -t THREADS -tb THREADS
                -np 64 -c 64*512 -b 512 -ub 512 --port P   (an encoder needs a whole
                prompt in one micro-batch: -ub >= the longest input)

Prints a markdown table (stdout), writes raw numbers as JSON (--json).
Usage: tools/bench/embeddings.py [--num 128] [--concurrency 1,16,64] [--threads 2]
       [--rounds 2] [--json FILE]
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time

import httpx

from serve_util import cpu_model, stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(f"embeddings bench: {msg}", file=sys.stderr, flush=True)


def inputs(n, seed=1):
    rng = random.Random(seed)
    return [[101] + [rng.randrange(1000, 30522) for _ in range(rng.randint(30, 510))] + [102]
            for _ in range(n)]


async def run(base, prompts, concurrency):
    sem = asyncio.Semaphore(concurrency)
    lat = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)) as c:
        async def one(p):
            async with sem:
                t = time.perf_counter()
                r = await c.post(base + "/v1/embeddings", json={"input": p, "model": "m"})
                r.raise_for_status()
                assert len(r.json()["data"][0]["embedding"]) == 384
                lat.append(time.perf_counter() - t)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "embeddings_per_s": len(prompts) / wall,
            "p50_ms": statistics.median(lat) * 1e3,
            "p99_ms": sorted(lat)[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-minilm-l6-v2.gguf"))
    ap.add_argument("--num", type=int, default=128)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds per server")
    ap.add_argument("--port", type=int, default=18531)
    ap.add_argument("--json")
    args = ap.parse_args()
    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    llama_dir = os.environ.get("OMNIBUS_LLAMA_CPP_DIR", os.path.join(ROOT, ".ref", "build"))
    llama_server = os.environ.get("LLAMA_SERVER", os.path.join(llama_dir, "bin", "llama-server"))
    base = f"http://127.0.0.1:{args.port}"
    commands = {
        "omnibus": [omnibus, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(args.port),
                    "--max-num-seqs", "64"],
        "llama-server": [llama_server, "-m", args.model, "--embeddings", "--pooling", "mean",
                         "-t", str(args.threads), "-tb", str(args.threads), "-np", "64", "-c", str(64 * 512),
                         "-b", "512", "-ub", "512", "--port", str(args.port)],
    }
    prompts = inputs(args.num)
    levels = [int(x) for x in args.concurrency.split(",")]
    results = {}
    for rnd in range(args.rounds):
        for name in ("omnibus", "llama-server"):
            log(f"round {rnd + 1}: {' '.join(commands[name])}")
            env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(llama_server)}
            with open(os.devnull, "w") as devnull:
                proc = subprocess.Popen(commands[name], stdout=devnull, stderr=devnull, env=env)
            try:
                wait_healthy(base, proc)
                asyncio.run(run(base, prompts[:8], 4))  # warm-up
                for c in levels:
                    r = asyncio.run(run(base, prompts, c))
                    results.setdefault(name, {}).setdefault(c, []).append(r)
                    log(f"{name} c={c}: {r['embeddings_per_s']:.1f}/s p50 {r['p50_ms']:.0f} ms p99 {r['p99_ms']:.0f} ms")
            finally:
                stop(proc)
    print(f"CPU: {cpu_model()}, {args.threads} threads; {args.num} requests of 32-512 tokens each level; "
          f"median of {args.rounds} rounds\n")
    print("| concurrency | omnibus emb/s | llama-server emb/s | ratio | omnibus p50 / p99 ms | llama-server p50 / p99 ms |")
    print("|---|---|---|---|---|---|")
    for c in levels:
        o = results["omnibus"][c]
        ls = results["llama-server"][c]
        med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"| {c} | {med(o, 'embeddings_per_s'):.1f} | {med(ls, 'embeddings_per_s'):.1f} | "
              f"**{med(o, 'embeddings_per_s') / med(ls, 'embeddings_per_s'):.2f}x** | "
              f"{med(o, 'p50_ms'):.0f} / {med(o, 'p99_ms'):.0f} | {med(ls, 'p50_ms'):.0f} / {med(ls, 'p99_ms'):.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
