#!/usr/bin/env python3
"""omnibus serve vs llama-server: same GGUF, same threads, same client, same
shared-prefix workload, one after the other in one run (issue "Prefix caching").

Workload (the issue's): NUM requests, each = one shared PREFIX-token prompt
beginning + UNIQUE tokens of its own, OUT generated tokens (greedy,
ignore_eos), all submitted at once (concurrency NUM). The prompts are sent as
token ids to POST /v1/completions with "stream": true, so both servers see
exactly the same tokens (no chat template, no BOS added by either). The token
ids come from tests/data/perplexity.txt, tokenized by omnibus's /tokenize.

Measured per request by this client: TTFT (request sent -> first streamed
token) and end-to-end latency; per run: wall time from the first request to
the last response, request throughput and output tokens/s.

Servers:
  omnibus:      OMNIBUS_BIN serve -m MODEL -t THREADS --port P --max-num-seqs NUM
  llama-server: LLAMA_SERVER -m MODEL -t THREADS -tb THREADS --port P -np NUM
                -c NUM*(PREFIX+UNIQUE+OUT+16)   (continuous batching is its default;
                its prompt cache and slot reuse are left at their defaults; one KV
                stream per slot, its default with an explicit -np: with a unified
                cache (-kvu) every prompt batch attends over all slots' cells
                and this workload takes over 20 minutes)

Prints a markdown table (stdout) and writes raw per-request numbers as JSON
(--json).

Usage: tools/bench/serve_vs_llama_server.py [--num 64] [--prefix 1024]
       [--unique 32] [--out 64] [--threads 2] [--json FILE]
Environment: OMNIBUS_BIN (build/omnibus), LLAMA_SERVER
(.ref/build/bin/llama-server, or $OMNIBUS_LLAMA_CPP_DIR/bin/llama-server).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import httpx

from serve_util import stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(f"serve_vs_llama_server: {msg}", file=sys.stderr, flush=True)


def text_token_ids(base):
    """Token ids of the committed text, from the server's /tokenize (omnibus's
    and llama-server's shapes); both load the same GGUF, so the ids mean the
    same to both."""
    text = open(os.path.join(ROOT, "tests", "data", "perplexity.txt")).read()
    r = httpx.post(base + "/tokenize", json={"content": text, "prompt": text,
                                             "add_special_tokens": False}, timeout=60)
    return r.json()["tokens"]


async def one_request(client, base, prompt, out_len, results, t0):
    body = {
        "prompt": prompt,
        "max_tokens": out_len,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = None
    chunks = 0
    async with client.stream("POST", base + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            choices = event.get("choices") or []
            if choices and choices[0].get("text"):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
    done = time.perf_counter()
    results.append({"ttft": (first or done) - sent, "e2e": done - sent,
                    "chunks": chunks, "end": done - t0})


async def run_workload(base, prompts, out_len):
    results = []
    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600.0), limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(one_request(client, base, p, out_len, results, t0) for p in prompts))
        wall = time.perf_counter() - t0
    return results, wall


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def summarize(name, results, wall, out_len):
    ttft = [r["ttft"] for r in results]
    return {
        "server": name,
        "requests": len(results),
        "wall_s": wall,
        "ttft_p50_s": statistics.median(ttft),
        "ttft_p90_s": pct(ttft, 0.9),
        "e2e_p50_s": statistics.median(r["e2e"] for r in results),
        "req_per_s": len(results) / wall,
        "output_tok_per_s": len(results) * out_len / wall,
        "min_streamed_chunks": min(r["chunks"] for r in results),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--num", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=1024)
    ap.add_argument("--unique", type=int, default=32)
    ap.add_argument("--out", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--servers", default="omnibus,llama-server",
                    help="comma-separated subset of omnibus,llama-server (in this order)")
    args = ap.parse_args()

    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    llama_dir = os.environ.get("OMNIBUS_LLAMA_CPP_DIR", os.path.join(ROOT, ".ref", "build"))
    llama_server = os.environ.get("LLAMA_SERVER", os.path.join(llama_dir, "bin", "llama-server"))
    servers = args.servers.split(",")
    for exe, name in ((omnibus, "omnibus"), (llama_server, "llama-server")):
        if name in servers and not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found (see docs/reference.md)")
    base = f"http://127.0.0.1:{args.port}"
    ctx = args.num * (args.prefix + args.unique + args.out + 16)
    commands = {
        "omnibus": [omnibus, "serve", "-m", args.model, "-t", str(args.threads),
                    "--port", str(args.port), "--max-num-seqs", str(args.num)],
        "llama-server": [llama_server, "-m", args.model, "-t", str(args.threads),
                         "-tb", str(args.threads), "--port", str(args.port),
                         "-np", str(args.num), "-c", str(ctx)],
    }

    prompts = None
    summaries, raw = [], {}
    for name in servers:
        log(f"starting {name}: {' '.join(commands[name])}")
        with open(os.devnull, "w") as devnull:
            proc = subprocess.Popen(commands[name], stdout=devnull, stderr=devnull)
        try:
            wait_healthy(base, proc)
            if prompts is None:
                ids = text_token_ids(base)
                need = args.prefix + args.num * args.unique
                if len(ids) < need:
                    sys.exit(f"text too short: {len(ids)} tokens < {need}")
                prefix = ids[:args.prefix]
                tail = ids[args.prefix:]
                prompts = [prefix + tail[i * args.unique:(i + 1) * args.unique] for i in range(args.num)]
            log(f"{name}: {args.num} requests x ({args.prefix} shared + {args.unique} unique) tokens, {args.out} out")
            results, wall = asyncio.run(run_workload(base, prompts, args.out))
            s = summarize(name, results, wall, args.out)
            log(json.dumps(s))
            summaries.append(s)
            raw[name] = results
        finally:
            stop(proc)

    print(f"{args.num} requests x ({args.prefix} shared + {args.unique} unique prompt tokens, "
          f"{args.out} output tokens), all at once, {args.threads} threads, streaming /v1/completions\n")
    print("| server | TTFT p50 s | TTFT p90 s | E2E p50 s | wall s | requests/s | output tok/s |")
    print("|---|---|---|---|---|---|---|")
    for s in summaries:
        print(f"| {s['server']} | {s['ttft_p50_s']:.2f} | {s['ttft_p90_s']:.2f} | {s['e2e_p50_s']:.2f} | "
              f"{s['wall_s']:.1f} | {s['req_per_s']:.3f} | {s['output_tok_per_s']:.1f} |")
    by = {s["server"]: s for s in summaries}
    if "omnibus" in by and "llama-server" in by:
        o, l = by["omnibus"], by["llama-server"]
        print(f"\nomnibus vs llama-server: TTFT p50 **{l['ttft_p50_s'] / o['ttft_p50_s']:.1f}x lower**, "
              f"request throughput **{o['req_per_s'] / l['req_per_s']:.1f}x**")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summaries": summaries, "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
