#!/usr/bin/env python3
"""Speculative decoding by prompt lookup, single stream, side by side with
llama.cpp's own (issue 36): omnibus serve --speculative none / ngram and
llama-server --spec-type none / ngram-simple, same GGUF, same threads, same
client, greedy, A B A B.

Workload (committed here, repetitive as the tasks prompt lookup is for):
  edit   rewrite a function with one name changed (the output copies the code)
  quote  quote a passage given in the prompt
  list   continue a numbered list given in the prompt
Each prompt is sent alone (one stream), max_tokens TOKENS, temperature 0,
streamed; decode tok/s = (tokens - 1) / (last token time - first token time)
on the client. Speed-up = a server's tok/s with speculation / without, per
prompt and over all (the ratio of the summed decode times).

Servers:
  omnibus:      OMNIBUS_BIN serve -m MODEL -t THREADS --port P [--speculative ngram]
  llama-server: LLAMA_SERVER -m MODEL -t THREADS -tb THREADS -c 4096 --port P -np 1
                [--spec-type ngram-simple --spec-ngram-simple-size-n N --spec-ngram-simple-size-m M]

Prints a markdown table (stdout), raw numbers as JSON (--json).
Usage: tools/bench/spec_vs_llama.py [--model models/smollm2-135m.gguf] [--tokens 160]
       [--rounds 2] [--threads 2] [--llama-n 3] [--llama-m 16] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import httpx

from serve_util import cpu_model, free_port, stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CODE = '''def summarize(items):
    count = 0
    largest = None
    for item in items:
        count += 1
        if largest is None or item > largest:
            largest = item
    average = sum(items) / count if count else 0.0
    return {"count": count, "largest": largest, "average": average}
'''
PASSAGE = ("The river rose slowly through the night, and by morning the low fields along the valley "
           "were under water. The farmers moved their animals to the hills, and the school on the "
           "old road closed for a week. When the water went down, the fields were covered with a "
           "thin layer of mud that made the next harvest the best in many years.")
LIST = "".join(f"{i}. {w}\n" for i, w in enumerate(
    "apple banana cherry date elderberry fig grape honeydew kiwi lemon".split(), 1))
PROMPTS = {
    "edit": f"Rewrite this Python function with the variable count renamed to total. Change nothing "
            f"else.\n\n{CODE}\nRewritten function:\n",
    "quote": f"Passage: {PASSAGE}\n\nQuote the passage above exactly, word for word.\n\nQuote: ",
    "list": f"Here is a list of fruits:\n{LIST}\nWrite the same list again, then write it a third "
            f"time.\n\n1.",
}


def log(msg):
    print(f"spec_vs_llama: {msg}", file=sys.stderr, flush=True)


def start(cmd, env=None):
    port = free_port()
    cmd = [c.replace("{port}", str(port)) for c in cmd]
    log(" ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    return proc, base


def decode_rate(base, prompt, tokens):
    """(tokens streamed, seconds from the first to the last) for one greedy completion."""
    times = []
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True}
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    times.append(time.perf_counter())
    return len(times), (times[-1] - times[0]) if len(times) > 1 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-n", type=int, default=3, help="--spec-ngram-simple-size-n")
    ap.add_argument("--llama-m", type=int, default=16, help="--spec-ngram-simple-size-m")
    ap.add_argument("--json")
    args = ap.parse_args()
    t = str(args.threads)
    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    llama_bin = os.environ.get("LLAMA_SERVER", os.path.join(ROOT, ".ref", "build", "bin", "llama-server"))
    llama_env = {**os.environ, "LD_LIBRARY_PATH": os.path.dirname(llama_bin)}
    configs = {
        "omnibus none": ([omnibus, "serve", "-m", args.model, "-t", t, "--port", "{port}"], None),
        "omnibus ngram": ([omnibus, "serve", "-m", args.model, "-t", t, "--port", "{port}",
                           "--speculative", "ngram"], None),
        "llama.cpp none": ([llama_bin, "-m", args.model, "-t", t, "-tb", t, "-c", "4096", "-np", "1",
                            "--port", "{port}"], llama_env),
        "llama.cpp ngram-simple": ([llama_bin, "-m", args.model, "-t", t, "-tb", t, "-c", "4096", "-np",
                                    "1", "--port", "{port}", "--spec-type", "ngram-simple",
                                    "--spec-ngram-simple-size-n", str(args.llama_n),
                                    "--spec-ngram-simple-size-m", str(args.llama_m)], llama_env),
    }
    res = {c: {p: [] for p in PROMPTS} for c in configs}
    for rnd in range(args.rounds):
        for name, (cmd, env) in configs.items():
            proc, base = start(cmd, env)
            try:
                decode_rate(base, "Warm up.", 8)
                for p, prompt in PROMPTS.items():
                    n, s = decode_rate(base, prompt, args.tokens)
                    res[name][p].append((n, s))
                    log(f"round {rnd + 1} {name} {p}: {n} tokens, {(n - 1) / s:.1f} tok/s")
            finally:
                stop(proc)

    def rate(name, p):  # median over the rounds
        return statistics.median((n - 1) / s for n, s in res[name][p])

    def total(name):
        n = sum(n - 1 for p in PROMPTS for n, _ in res[name][p])
        s = sum(s for p in PROMPTS for _, s in res[name][p])
        return n / s

    print(f"CPU: {cpu_model()}, {args.threads} threads; {os.path.basename(args.model)}; greedy, one stream, "
          f"max_tokens {args.tokens}; median of {args.rounds} rounds\n")
    print("| prompt | omnibus none | omnibus ngram | speed-up | llama.cpp none | llama.cpp ngram-simple "
          "| speed-up |")
    print("|---|---|---|---|---|---|---|")
    for p in list(PROMPTS) + ["all"]:
        f = (lambda c: total(c)) if p == "all" else (lambda c, p=p: rate(c, p))
        on, og, ln, lg = (f(c) for c in configs)
        print(f"| {p} | {on:.1f} | {og:.1f} | **{og / on:.2f}x** | {ln:.1f} | {lg:.1f} | **{lg / ln:.2f}x** |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": res}, fh, indent=1)


if __name__ == "__main__":
    main()
