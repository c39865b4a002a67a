#!/usr/bin/env python3
"""Mixed long and short prompts (issue "Serving under pressure", fair prefill):
how long a short request waits behind a long prompt being prefilled, on
omnibus serve and on llama-server, same GGUF, same threads, one after the
other in one run.

Scenario, repeated --repeats times per server, each time with prompts no
earlier run has sent (no prefix-cache hits):
  alone: the LONG-token prompt alone (max_tokens 1, streaming): its TTFT;
  mixed: the same-length prompt, and SHORT-token prompts sent DELAY seconds
         later (--num-short of them, DELAY apart): the short ones' TTFT and
         the long one's.
The prompts are token ids (from tests/data/perplexity.txt via omnibus's
/tokenize), so both servers see the same tokens.

Reported: median TTFTs; the short TTFT in omnibus engine steps of the long
prompt's chunking (step = long TTFT alone / ceil(LONG / budget)); and how much
the long prompt's TTFT grew with the short ones beside it.

Servers:
  omnibus:      OMNIBUS_BIN serve -m MODEL -t THREADS --port P [OMNIBUS_ARGS]
  llama-server: LLAMA_SERVER -m MODEL -t THREADS -tb THREADS --port P -np 2
                -c 2*(LONG+64)  (two slots: one for the long prompt, one for a
                short one; -b/-ub at their defaults, 2048/512)

Usage: tools/bench/mixed_long_short.py [--long 4096] [--short 16]
       [--num-short 3] [--delay 0.3] [--repeats 3] [--threads 2]
       [--servers omnibus,llama-server] [--omnibus-args "..."] [--json FILE]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_vs_llama_server import ROOT, stop, text_token_ids, wait_healthy  # noqa: E402


def log(msg):
    print(f"mixed_long_short: {msg}", file=sys.stderr, flush=True)


def ttft(base, prompt, out):
    """Streams one completion; stores seconds to the first token in out['ttft']."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "stream": True}
    sent = time.perf_counter()
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=600.0) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]" and "ttft" not in out:
                out["ttft"] = time.perf_counter() - sent
    out.setdefault("ttft", time.perf_counter() - sent)


def run_mixed(base, long_prompt, shorts, delay):
    long_out, short_outs = {}, [{} for _ in shorts]
    threads = [threading.Thread(target=ttft, args=(base, long_prompt, long_out))]
    threads[0].start()
    for prompt, out in zip(shorts, short_outs):
        time.sleep(delay)
        t = threading.Thread(target=ttft, args=(base, prompt, out))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return long_out["ttft"], [o["ttft"] for o in short_outs]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--num-short", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=int, default=512, help="omnibus --max-num-batched-tokens")
    ap.add_argument("--port", type=int, default=18437)
    ap.add_argument("--omnibus-args", default="", help="extra omnibus serve flags (A/B)")
    ap.add_argument("--servers", default="omnibus,llama-server")
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()

    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    llama_dir = os.environ.get("OMNIBUS_LLAMA_CPP_DIR", os.path.join(ROOT, ".ref", "build"))
    llama_server = os.environ.get("LLAMA_SERVER", os.path.join(llama_dir, "bin", "llama-server"))
    servers = args.servers.split(",")
    base = f"http://127.0.0.1:{args.port}"
    commands = {
        "omnibus": [omnibus, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(args.port),
                    "--max-num-batched-tokens", str(args.budget), "--max-model-len", str(args.long + 64)]
        + shlex.split(args.omnibus_args),
        "llama-server": [llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
                         "--port", str(args.port), "-np", "2", "-c", str(2 * (args.long + 64))],
    }
    for name in servers:
        if not os.access(commands[name][0], os.X_OK):
            sys.exit(f"{commands[name][0]} not found (see docs/reference.md)")

    ids = None
    rows, raw = [], {}
    for name in servers:
        log(f"starting {name}: {' '.join(commands[name])}")
        with open(os.devnull, "w") as devnull:
            proc = subprocess.Popen(commands[name], stdout=devnull, stderr=devnull)
        try:
            wait_healthy(base, proc)
            if ids is None:
                ids = text_token_ids(base)

            def tokens(start, n):  # n ids from the text, cycling, from `start`
                return [ids[(start + i) % len(ids)] for i in range(n)]

            offset = 1 + servers.index(name) * 7919  # different prompts on each server
            ttft(base, tokens(offset, 64), {})  # warm-up
            alone, mixed_long, mixed_short = [], [], []
            for rep in range(args.repeats):
                o = offset + 101 * (rep + 1)
                out = {}
                ttft(base, tokens(o, args.long), out)
                alone.append(out["ttft"])
                shorts = [tokens(o + 5003 + 37 * k, args.short) for k in range(args.num_short)]
                lt, st = run_mixed(base, tokens(o + 1, args.long), shorts, args.delay)
                mixed_long.append(lt)
                mixed_short.extend(st)
                log(f"{name} #{rep}: long alone {alone[-1]:.2f} s; mixed: long {lt:.2f} s, "
                    f"short {', '.join(f'{t:.2f}' for t in st)} s")
            step = statistics.median(alone) / -(-args.long // args.budget)
            row = {"server": name, "long_alone_s": statistics.median(alone),
                   "long_mixed_s": statistics.median(mixed_long),
                   "short_ttft_p50_s": statistics.median(mixed_short),
                   "short_ttft_max_s": max(mixed_short), "step_s": step}
            row["long_growth"] = row["long_mixed_s"] / row["long_alone_s"] - 1
            rows.append(row)
            raw[name] = {"alone": alone, "mixed_long": mixed_long, "mixed_short": mixed_short}
        finally:
            stop(proc)

    print(f"long prompt {args.long} tokens; {args.num_short} short prompts of {args.short} tokens sent "
          f"{args.delay} s apart after it; {args.repeats} repeats; {args.threads} threads; "
          f"omnibus --max-num-batched-tokens {args.budget} {args.omnibus_args}\n")
    print("| server | long TTFT alone s | long TTFT mixed s (growth) | short TTFT p50 s | short TTFT max s "
          "| short TTFT max in omnibus steps |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['long_alone_s']:.2f} | {r['long_mixed_s']:.2f} ({100 * r['long_growth']:+.0f}%) "
              f"| {r['short_ttft_p50_s']:.2f} | {r['short_ttft_max_s']:.2f} | "
              f"{r['short_ttft_max_s'] / rows[0]['step_s']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
