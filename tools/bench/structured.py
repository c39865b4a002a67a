#!/usr/bin/env python3
"""Structured output throughput: the same workload unconstrained vs constrained
by a JSON Schema (or a regex), on omnibus serve, and the constrained workload on
llama-server (its `json_schema` field) on the same GGUF, the servers started
one after the other in one run (issue "Structured output and tool calling").

Workload: NUM requests (default 2 x C) to /v1/chat/completions (or
/v1/completions with --endpoint completions), each asking for a JSON document
about a different subject, C in flight at a time (a closed loop: C workers,
each sending its next request when the previous one returns), sampled at
temperature 1 with a per-request seed.

  constrained     the schema as vLLM's `structured_outputs.json` (or
                  `structured_outputs.regex` with --regex), ignore_eos false:
                  a request ends when its document is complete
  unconstrained   the same prompts with no constraint, ignore_eos true and each
                  request's max_tokens = the output tokens of the same request
                  in the constrained run: the same number of tokens per request,
                  so the ratio is the cost of the grammar masks alone
  llama-server    the constrained workload with llama-server's `json_schema`
                  field (regex: no llama-server run), then its own unconstrained
                  counterpart the same way

Throughput = output tokens (usage.completion_tokens) / wall seconds from the
first request to the last response. Reported: output tok/s of each run, the
constrained/unconstrained ratio at C and at C=1 (--single-num requests, one at
a time; target: constrained >= 90% of unconstrained), omnibus/llama-server
for the constrained workload, how many constrained outputs validate, and, when
omnibus exposes the histogram omnibus:structured_mask_seconds on /metrics, the
mask time per observation and its share of the wall time (absent: "n/a").
Every run starts with 2 warm-up requests of its own kind (the grammar is
compiled then and cached, as for any repeated schema).

Servers (prompt caching off in both: the unconstrained run sends the same
prompts as the constrained one before it and would otherwise find them cached):
  omnibus:      OMNIBUS_BIN serve -m MODEL -t THREADS --port P --max-num-seqs C --no-prefix-caching
  llama-server: LLAMA_SERVER -m MODEL -t THREADS -tb THREADS --port P -np C
                -c C*(CTX_PER_SEQ), requests with "cache_prompt": false

Prints the CPU model and a markdown table (stdout); --json FILE writes the
summaries and per-request numbers.

Usage: tools/bench/structured.py [--concurrency 64] [--num N] [--endpoint chat|completions]
       [--json-schema tools/bench/schemas/person.json | --regex PATTERN] [--max-tokens 384]
       [--threads 2] [--servers omnibus,llama-server] [--single-num 8] [--json FILE]
Environment: OMNIBUS_BIN (build/omnibus), LLAMA_SERVER (.ref/build/bin/llama-server, or
$OMNIBUS_LLAMA_CPP_DIR/bin/llama-server); llama-server is skipped when absent.
"""
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import httpx

from serve_util import cpu_model, stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MASK_METRIC = "omnibus:structured_mask_seconds"

SUBJECTS = ["a retired sailor", "a young violinist", "a baker in Lyon", "a software engineer", "a beekeeper",
            "a marathon runner", "a school teacher", "a chess champion", "a night-shift nurse", "a farmer",
            "a museum guard", "a street artist", "a pilot", "a librarian", "a taxi driver", "a botanist"]


def log(msg):
    print(f"structured: {msg}", file=sys.stderr, flush=True)


# --- workload -------------------------------------------------------------------------------------------------------

def prompt_text(i, args):
    subject = SUBJECTS[i % len(SUBJECTS)]
    if args.regex:
        return f"Write a short answer about {subject} (#{i})."
    return f"Describe {subject} (person #{i}) as a JSON object with the fields of this schema: {args.schema_text}"


def body_for(i, args, server, mode, max_tokens):
    """One request's JSON body. mode: constrained | unconstrained."""
    body = {"model": args.model_name, "temperature": 1.0, "seed": 1000 + i, "max_tokens": max_tokens}
    text = prompt_text(i, args)
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text + "\nJSON: " if not args.regex else text + "\nAnswer: "
    if server == "llama-server":
        body["cache_prompt"] = False  # every run computes every prompt (see "Servers" above)
    if mode == "unconstrained":
        body["ignore_eos"] = True
    elif server == "llama-server":
        body["json_schema"] = args.schema
        body["ignore_eos"] = False
    else:
        body["structured_outputs"] = {"regex": args.regex} if args.regex else {"json": args.schema}
        body["ignore_eos"] = False
    return body


async def run_closed_loop(base, path, bodies, concurrency):
    """Sends every body with `concurrency` in flight; (per-request results in order, wall seconds)."""
    results = [None] * len(bodies)
    queue = list(range(len(bodies)))[::-1]
    limits = httpx.Limits(max_connections=concurrency + 4)

    async with httpx.AsyncClient(timeout=httpx.Timeout(3600.0), limits=limits) as client:
        async def worker():
            while queue:
                i = queue.pop()
                sent = time.perf_counter()
                r = await client.post(base + path, json=bodies[i])
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
                data = r.json()
                choice = data["choices"][0]
                text = choice["message"]["content"] if "message" in choice else choice["text"]
                results[i] = {"tokens": data["usage"]["completion_tokens"], "finish": choice["finish_reason"],
                              "e2e": time.perf_counter() - sent, "text": text or ""}

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
        wall = time.perf_counter() - t0
    return results, wall


def validator(args):
    """text -> True/False (None: cannot check here)."""
    if args.regex:
        pattern = re.compile(args.regex)
        return lambda t: pattern.fullmatch(t) is not None
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    v = jsonschema.Draft202012Validator(args.schema) if jsonschema else None

    def check(text):
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return v.is_valid(value) if v else isinstance(value, dict)
    return check


# --- metrics --------------------------------------------------------------------------------------------------------

def scrape(base, prefix):
    """{sample name with labels: value} of the metrics starting with prefix ({} when /metrics has none)."""
    try:
        text = httpx.get(base + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def mask_stats(before, after, wall):
    """Mean seconds per observation and total share of the wall time, from the histogram's _sum and _count."""
    def total(suffix, d):
        return sum(v for k, v in d.items() if k.split("{", 1)[0] == MASK_METRIC + suffix)
    count = total("_count", after) - total("_count", before)
    if not any(k.startswith(MASK_METRIC + "_count") for k in after) or count <= 0:
        return None
    seconds = total("_sum", after) - total("_sum", before)
    return {"observations": count, "seconds": seconds, "mean_ms": 1000 * seconds / count,
            "share_of_wall": seconds / wall}


# --- one server -----------------------------------------------------------------------------------------------------

def measure(name, base, args, path, mode, n, concurrency, max_tokens_per_request=None):
    bodies = [body_for(i, args, name, mode,
                       max_tokens_per_request[i] if max_tokens_per_request else args.max_tokens) for i in range(n)]
    warm = [body_for(10_000 + i, args, name, mode, 16 if mode == "unconstrained" else args.max_tokens)
            for i in range(2)]
    asyncio.run(run_closed_loop(base, path, warm, 2))
    before = scrape(base, "omnibus:structured") if name == "omnibus" else {}
    results, wall = asyncio.run(run_closed_loop(base, path, bodies, concurrency))
    after = scrape(base, "omnibus:structured") if name == "omnibus" else {}
    tokens = sum(r["tokens"] for r in results)
    s = {"server": name, "mode": mode, "concurrency": concurrency, "requests": n, "output_tokens": tokens,
         "wall_s": wall, "output_tok_per_s": tokens / wall, "mean_output_tokens": tokens / n,
         "finish_length": sum(r["finish"] == "length" for r in results),
         "mask": mask_stats(before, after, wall) if name == "omnibus" else None,
         "structured_metrics_after": after or None}
    if mode == "constrained":
        check = validator(args)
        s["valid"] = sum(bool(check(r["text"])) for r in results if r["finish"] != "length")
    log(json.dumps({k: v for k, v in s.items() if k != "structured_metrics_after"}))
    return s, results


def bench_server(name, cmd, args, logdir):
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    base = f"http://127.0.0.1:{args.port}"
    log_path = os.path.join(logdir, f"{name}.log")
    log(f"starting {name}: {' '.join(cmd)} (log: {log_path})")
    summaries, raw = [], {}
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(base, proc)
        # The served model's id (omnibus names it after the file; llama-server accepts any).
        try:
            args.model_name = httpx.get(base + "/v1/models", timeout=10).json()["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            pass
        runs = [(args.concurrency, args.num)]
        if name == "omnibus" and args.single_num > 0:
            runs.append((1, args.single_num))
        for concurrency, n in runs:
            s, res = measure(name, base, args, path, "constrained", n, concurrency)
            summaries.append(s)
            raw[f"{name}/constrained/c{concurrency}"] = res
            # The same number of tokens per request, unconstrained.
            per_request = [max(1, r["tokens"]) for r in res]
            s, res = measure(name, base, args, path, "unconstrained", n, concurrency, per_request)
            if abs(s["output_tokens"] - sum(per_request)) > 0.02 * sum(per_request):
                log(f"WARNING: {name}'s unconstrained run made {s['output_tokens']} tokens, not the constrained "
                    f"run's {sum(per_request)} (ignore_eos not honoured?): the ratio compares different work")
                s["token_mismatch"] = True
            summaries.append(s)
            raw[f"{name}/unconstrained/c{concurrency}"] = res
    except Exception:
        log(f"{name} failed; its log {log_path} ends with:\n" + open(log_path, errors="replace").read()[-3000:])
        raise
    finally:
        stop(proc)
    return summaries, raw


def ratio(summaries, server, concurrency, a="constrained", b="unconstrained", other=None):
    def find(srv, mode):
        for s in summaries:
            if s["server"] == srv and s["mode"] == mode and s["concurrency"] == concurrency:
                return s["output_tok_per_s"]
        return None
    x = find(server, a)
    y = find(other, a) if other else find(server, b)
    return x / y if x and y else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    ap.add_argument("--concurrency", "-c", type=int, default=64)
    ap.add_argument("--num", type=int, default=0, help="requests per run (default 2 x concurrency)")
    ap.add_argument("--single-num", type=int, default=8, help="requests of the C=1 runs (0: none)")
    ap.add_argument("--json-schema", default=os.path.join(ROOT, "tools", "bench", "schemas", "person.json"))
    ap.add_argument("--regex", help="constrain by this regex instead of the schema (no llama-server run)")
    ap.add_argument("--max-tokens", type=int, default=384, help="max_tokens of the constrained requests")
    ap.add_argument("--ctx-per-seq", type=int, default=1024, help="llama-server context per slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=18437)
    ap.add_argument("--servers", default="omnibus,llama-server",
                    help="comma-separated subset of omnibus,llama-server (in this order)")
    ap.add_argument("--omnibus-args", default="", help="extra omnibus serve arguments (one string, split on spaces)")
    ap.add_argument("--llama-args", default="", help="extra llama-server arguments (one string, split on spaces)")
    ap.add_argument("--json", help="write summaries and per-request results here")
    args = ap.parse_args()
    args.num = args.num or 2 * args.concurrency
    args.model_name = os.path.splitext(os.path.basename(args.model))[0]
    args.schema = None
    args.schema_text = ""
    if not args.regex:
        with open(args.json_schema) as f:
            args.schema = json.load(f)
        args.schema_text = json.dumps(args.schema, separators=(",", ":"))

    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    llama_dir = os.environ.get("OMNIBUS_LLAMA_CPP_DIR", os.path.join(ROOT, ".ref", "build"))
    llama_server = os.environ.get("LLAMA_SERVER", os.path.join(llama_dir, "bin", "llama-server"))
    servers = [s for s in args.servers.split(",") if s]
    if "omnibus" in servers and not os.access(omnibus, os.X_OK):
        sys.exit(f"{omnibus} not found (build it: make)")
    if "llama-server" in servers and not os.access(llama_server, os.X_OK):
        log(f"{llama_server} not found: no llama-server comparison (scripts/build_llama_cpp.sh)")
        servers.remove("llama-server")
    if "llama-server" in servers and args.regex:
        log("llama-server has no regex field: no llama-server comparison for --regex")
        servers.remove("llama-server")

    commands = {
        "omnibus": [omnibus, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(args.port),
                    "--max-num-seqs", str(args.concurrency), "--no-prefix-caching"] + args.omnibus_args.split(),
        "llama-server": [llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
                         "--port", str(args.port), "-np", str(args.concurrency),
                         "-c", str(args.concurrency * args.ctx_per_seq)] + args.llama_args.split(),
    }
    summaries, raw = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_structured_") as logdir:
        for name in servers:
            s, r = bench_server(name, commands[name], args, logdir)
            summaries += s
            raw.update(r)

    what = f"regex {args.regex!r}" if args.regex else f"JSON Schema {os.path.relpath(args.json_schema, ROOT)}"
    print(f"CPU: {cpu_model()}, {args.threads} threads; model {os.path.basename(args.model)}; /v1/"
          f"{'chat/completions' if args.endpoint == 'chat' else 'completions'}, {what}; temperature 1\n")
    print("| server | C | run | requests | mean output tokens | cut at max_tokens | valid | wall s | output tok/s "
          "| mask ms/obs | mask share of wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        m = s["mask"]
        valid = f"{s['valid']}/{s['requests'] - s['finish_length']}" if "valid" in s else "-"
        mask_ms = f"{m['mean_ms']:.3f}" if m else "n/a"
        mask_share = f"{100 * m['share_of_wall']:.1f}%" if m else "n/a"
        cut = s["finish_length"] if s["mode"] == "constrained" else "- (by design)"
        print(f"| {s['server']} | {s['concurrency']} | {s['mode']} | {s['requests']} | {s['mean_output_tokens']:.1f} "
              f"| {cut} | {valid} | {s['wall_s']:.1f} | {s['output_tok_per_s']:.1f} | "
              f"{mask_ms} | {mask_share} |")
    print()
    ratios = {}
    r = ratio(summaries, "omnibus", args.concurrency)
    if r is not None:
        ratios["omnibus_constrained_over_unconstrained"] = r
        print(f"omnibus constrained / unconstrained at C={args.concurrency}: **{100 * r:.1f}%** "
              f"({'meets' if r >= 0.9 else 'misses'} the 90% target)")
    r = ratio(summaries, "omnibus", 1)
    if r is not None:
        ratios["omnibus_constrained_over_unconstrained_c1"] = r
        print(f"omnibus constrained / unconstrained at C=1: **{100 * r:.1f}%** "
              f"({'meets' if r >= 0.9 else 'misses'} the 90% target)")
    r = ratio(summaries, "llama-server", args.concurrency)
    if r is not None:
        ratios["llama_server_constrained_over_unconstrained"] = r
        print(f"llama-server constrained / unconstrained at C={args.concurrency}: {100 * r:.1f}%")
    r = ratio(summaries, "omnibus", args.concurrency, other="llama-server")
    if r is not None:
        ratios["omnibus_over_llama_server_constrained"] = r
        print(f"constrained output tok/s, omnibus / llama-server at C={args.concurrency}: **{r:.2f}x**")
    if not any(s["mask"] for s in summaries):
        print(f"({MASK_METRIC} not exposed by this omnibus: no mask times)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "args": {k: v for k, v in vars(args).items() if k != "schema"},
                       "summaries": summaries, "ratios": ratios, "raw": raw}, f, indent=1)


if __name__ == "__main__":
    main()
