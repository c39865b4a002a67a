#!/usr/bin/env python3
"""Steady pace: do running streams keep their inter-token latency when other
work arrives? (issue 35 "Steady pace while a long prompt prefills", issue 37
"an embedding burst next to 8 streaming generations").

One omnibus server (OMNIBUS_BIN serve -m MODEL -t THREADS --task embed
--pooling last [SERVER_ARGS]: a decoder serves generations and embeddings).
Scenarios, each run --rounds times, A B A B across the configurations given
by --configs (e.g. "" and "--max-itl-ms 40"):

  alone     STREAMS streaming completions (token-id prompts of 32 tokens,
            max_tokens TOKENS, ignore_eos): their ITL (client side, the gaps
            between streamed tokens after the first);
  long      the same streams, and once they all stream, one LONG-token prompt
            (max_tokens 1): the streams' ITL while it prefills, and its TTFT;
            its TTFT alone is measured too (nothing else running);
  embed     the same streams, and once they all stream, BURST /v1/embeddings
            requests of 128-512 tokens sent at once: the streams' ITL while
            the burst runs, and the burst's wall time.

ITL percentiles are over the gaps that fall while the disturbance runs (from
its send to its last answer); "alone" over every gap. Prompts are token ids
made from tests/data/perplexity.txt through /tokenize, each run offset so no
prefix-cache hit helps.

Prints a markdown table (stdout), raw numbers as JSON (--json).
Usage: tools/bench/steady_pace.py [--model models/smollm2-135m.gguf] [--streams 8]
       [--tokens 160] [--long 4000] [--burst 64] [--rounds 2] [--threads 2]
       [--configs ",--max-itl-ms 40"] [--json FILE]
"""
import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time

import httpx

from serve_util import cpu_model, free_port, stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(f"steady_pace: {msg}", file=sys.stderr, flush=True)


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


class Server:
    def __init__(self, args, extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus")), "serve",
               "-m", args.model, "-t", str(args.threads), "--port", str(self.port),
               "--task", "embed", "--pooling", "last", "--max-model-len", str(args.long + 256)]
        cmd += shlex.split(extra)
        log(" ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_healthy(self.base, self.proc)

    def close(self):
        stop(self.proc)


def corpus_ids(base, n):
    text = open(os.path.join(ROOT, "tests", "data", "perplexity.txt"), encoding="utf-8").read()
    ids = httpx.post(base + "/tokenize", json={"prompt": text}, timeout=120).json()["tokens"]
    while len(ids) < n:
        ids = ids + ids
    return ids


async def stream(client, base, prompt, tokens, gaps, started):
    t_last = None
    body = {"prompt": prompt, "max_tokens": tokens, "stream": True, "ignore_eos": True,
            "temperature": 0}
    async with client.stream("POST", base + "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            if t_last is None:
                started.set()
            else:
                gaps.append((now, now - t_last))
            t_last = now


async def one_prompt(client, base, prompt):
    t0 = time.perf_counter()
    body = {"prompt": prompt, "max_tokens": 1, "stream": True}
    async with client.stream("POST", base + "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                return time.perf_counter() - t0
    return float("nan")


async def embed_burst(client, base, inputs):
    async def one(ids):
        r = await client.post(base + "/v1/embeddings", json={"input": [ids]})
        r.raise_for_status()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(ids) for ids in inputs))
    return time.perf_counter() - t0


async def scenario(srv, args, ids, offset, kind):
    """Runs STREAMS streams with the disturbance `kind`; returns a result dict."""
    rng = random.Random(offset)
    take = lambda n: [ids[(offset + i) % len(ids)] for i in range(n)]  # noqa: E731
    gaps, out = [], {}
    limits = httpx.Limits(max_connections=args.streams + args.burst + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        if kind == "long-alone":
            out["ttft"] = await one_prompt(client, srv.base, take(args.long))
            return out
        starts = [asyncio.Event() for _ in range(args.streams)]
        tasks = [asyncio.create_task(stream(client, srv.base, take(32 + i), args.tokens, gaps, starts[i]))
                 for i in range(args.streams)]
        await asyncio.gather(*(e.wait() for e in starts))
        await asyncio.sleep(0.5)  # a few steady steps first
        t0 = time.perf_counter()
        if kind == "long":
            out["ttft"] = await one_prompt(client, srv.base, take(args.long))
        elif kind == "embed":
            inputs = [take(rng.randint(128, 512))[1:] + [i] for i in range(args.burst)]
            out["burst_s"] = await embed_burst(client, srv.base, inputs)
        t1 = time.perf_counter()
        await asyncio.gather(*tasks)
    window = [g for t, g in gaps if t0 <= t <= t1] if kind != "alone" else [g for _, g in gaps]
    out["itl_p50_ms"] = pct(window, 50) * 1e3
    out["itl_p99_ms"] = pct(window, 99) * 1e3
    out["n_gaps"] = len(window)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=800,
                    help="tokens per stream: enough that the streams outlast each disturbance")
    ap.add_argument("--long", type=int, default=4000)
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default=",--max-itl-ms 40",
                    help="comma-separated extra serve arguments, one configuration each")
    ap.add_argument("--scenarios", default="alone,long-alone,long,embed")
    ap.add_argument("--json")
    args = ap.parse_args()
    configs = args.configs.split(",")
    kinds = args.scenarios.split(",")
    results = {c: {k: [] for k in kinds} for c in configs}
    offset = 0
    for rnd in range(args.rounds):
        for c in configs:
            srv = Server(args, c)
            try:
                ids = corpus_ids(srv.base, args.long * 4)
                for k in kinds:
                    offset += args.long + args.streams * 40 + 7919
                    r = asyncio.run(scenario(srv, args, ids, offset, k))
                    log(f"round {rnd + 1} [{c or 'default'}] {k}: {r}")
                    results[c][k].append(r)
            finally:
                srv.close()

    def med(c, k, key):
        xs = [r[key] for r in results[c].get(k, []) if key in r]
        return statistics.median(xs) if xs else float("nan")

    print(f"CPU: {cpu_model()}, {args.threads} threads; {os.path.basename(args.model)}; "
          f"{args.streams} streams of {args.tokens} tokens; long prompt {args.long} tokens; "
          f"embedding burst {args.burst} x 128-512 tokens; median of {args.rounds} rounds\n")
    print("| serve args | ITL p99 alone ms | long: ITL p99 ms (x alone) | long TTFT s (x alone) "
          "| embed burst: ITL p99 ms (x alone) | burst s |")
    print("|---|---|---|---|---|---|")
    for c in configs:
        alone = med(c, "alone", "itl_p99_ms")
        lp = med(c, "long", "itl_p99_ms")
        lt, la = med(c, "long", "ttft"), med(c, "long-alone", "ttft")
        ep = med(c, "embed", "itl_p99_ms")
        print(f"| `{c or '(default)'}` | {alone:.1f} | {lp:.1f} ({lp / alone:.2f}x) | "
              f"{lt:.2f} ({lt / la:.2f}x) | {ep:.1f} ({ep / alone:.2f}x) | "
              f"{med(c, 'embed', 'burst_s'):.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
