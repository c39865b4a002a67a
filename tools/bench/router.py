#!/usr/bin/env python3
"""Multi-tenant scale-out benchmark: omnibus replicas behind vllm-router.

T tenants, each with its own long system prompt (~--prefix-tokens tokens of
varied text, so that tenants share no KV blocks), send short unique questions
as streaming completion requests (temperature 0, fixed max_tokens) with seeded Poisson
arrivals. The same workload runs against three configurations, one after the
other:

  round_robin  2 replicas `-t 1 --kv-cache-memory M` behind vllm-router round_robin
  cache_aware  the same behind vllm-router cache_aware
  single       1 replica `-t 2 --kv-cache-memory 2M`, no router

M defaults to a pool that holds about half the tenants' prefixes, so a
replica that sees every tenant (round_robin) keeps evicting them, while
cache_aware pins each tenant to one replica. Reported per configuration: TTFT
p50/p99, output tok/s, requests/s, and the prefix-cache hit rate: hits over
lookups from each replica's /metrics before and after, and cached over prompt
tokens summed from the responses' usage. Writes
results.md, results.json, ttft.svg and throughput.svg to --out.

    .venv/bin/python tools/bench/router.py --out /tmp/router-bench          # minutes
    .venv/bin/python tools/bench/router.py --quick --out /tmp/router-quick  # ~10 s of load

OMNIBUS_BIN, OMNIBUS_MODELS_DIR, VLLM_ROUTER_BIN as for tests/python/router_harness.py.
"""
import argparse
import asyncio
import json
import math
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "python"))
from router_harness import MODEL, Cluster, Replica  # noqa: E402

# KV bytes per token of smollm2-135m at the default --kv-cache-dtype f16:
# 2 (K and V) x 30 layers x 3 KV heads x 64 dims x 2 bytes = 23040 B (22.5 KiB);
# docs/engine.md: 22.5MiB = 64 blocks of 16 tokens.
KV_BYTES_PER_TOKEN = {"smollm2-135m": 2 * 30 * 3 * 64 * 2}

# cache_aware flags. vllm-router (a fork of the SGLang router) keeps one radix tree
# of request texts per worker; a request goes to the worker with the longest
# match if matched/len(text) >= --cache-threshold, else to the worker with the
# smallest tree (new tenants spread out). It only balances by load when
# max-min in-flight > --balance-abs-threshold AND max > min * --balance-rel-threshold.
# A tenant's text is ~97% its system prompt, so the default 0.3 threshold
# already pins tenants; the defaults (64, 1.5) never rebalance at this load.
CACHE_AWARE_ARGS = []

WORDS = ("account address agenda airline alarm album answer apple archive arrival article audit author avenue "
         "balance bank battery beach bicycle billing board bonus border bottle branch bridge budget builder "
         "cabin cable camera campus canal candle capital carbon cargo carpet castle catalog cellar channel "
         "chapter charge cheese chemistry circuit citizen climate clinic clock coffee collar column comfort "
         "contract copper corner cotton council country courier credit culture customer dairy danger deadline "
         "delivery dentist desert design diamond diesel dinner discount doctor dollar domain drawer driver "
         "economy editor effort election elevator energy engine estate evening export fabric factory farmer "
         "feather festival fiber finance flight flower forest fortune fossil freight fruit furniture galaxy "
         "garden garlic gateway glacier granite gravity grocery guitar habit harbor harvest helmet highway "
         "holiday horizon hospital hotel household insurance invoice island jacket journey judge kernel kettle "
         "kitchen ladder lagoon laptop lawyer leather lecture legend library license lumber machine magnet "
         "manager marble market meadow medicine membrane mentor message metal mirror monitor mortgage museum "
         "napkin network nickel notebook novel nursery ocean office orchard oxygen package painter palace "
         "parcel pasture patient payment pencil pepper pharmacy physics pilot planet plastic pocket policy "
         "portfolio pottery powder printer profit project protein pump puzzle quarter quartz rabbit radar "
         "railway receipt recipe refund region rental repair reptile resort ribbon river rocket saddle salary "
         "sandal satellite schedule science scooter season sensor shelter shipping signal silver skeleton "
         "socket soldier spinach stadium station storage studio subway sugar summit supplier surgeon "
         "sweater syrup tablet tariff teacher temple tennis theater ticket timber tomato tractor traffic "
         "transit treasury tunnel turbine umbrella uniform utility vaccine valley vendor village violin "
         "voltage voyage wallet warehouse weather website wheat window winter workshop yogurt zipper").split()

QUESTIONS = ["What are your opening hours", "How do I get a refund", "Can I change my order", "Where is my parcel",
             "Do you ship abroad", "What does the warranty cover", "How do I reset my password",
             "Is there a student discount", "Can I pay by invoice", "Who do I call for repairs"]


def tenant_prompt(t, rng, n_words):
    """Varied text: tenant t's own random word sequence, in sentences."""
    words = [rng.choice(WORDS) for _ in range(n_words)]
    sentences = [" ".join(words[i:i + 12]).capitalize() + "." for i in range(0, len(words), 12)]
    return f"You are the assistant of tenant {t}. Policies follow.\n" + " ".join(sentences)


def build_tenants(base_url, n, prefix_tokens, seed):
    """Tenant system prompts of about prefix_tokens tokens each (measured with /tokenize)."""
    def ntok(text):
        return len(httpx.post(base_url + "/tokenize", json={"prompt": text}, timeout=30).json()["tokens"])

    out = []
    for t in range(n):
        n_words = prefix_tokens // 2
        text = tenant_prompt(t, random.Random(seed * 1000 + t), n_words)
        for _ in range(8):  # scale the word count to the measured token count
            got = ntok(text)
            if abs(got - prefix_tokens) <= prefix_tokens * 0.03:
                break
            n_words = max(8, int(n_words * prefix_tokens / got))
            text = tenant_prompt(t, random.Random(seed * 1000 + t), n_words)
        out.append(text)
    return out


def build_workload(n_requests, rate, n_tenants, seed):
    rng = random.Random(seed)
    t, reqs = 0.0, []
    for i in range(n_requests):
        t += rng.expovariate(rate)
        q = f"{rng.choice(QUESTIONS)} (ticket {i}, {rng.choice(WORDS)} {rng.choice(WORDS)})?"
        reqs.append({"at": t, "tenant": rng.randrange(n_tenants), "question": q})
    return reqs


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one_request(client, url, body, t0, at, rec):
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    sched = t0 + at
    rec["start"] = time.perf_counter() - t0
    try:
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        async with client.stream("POST", url + path, json=body) as r:
            if r.status_code != 200:
                rec["error"] = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                c0 = chunk["choices"][0] if chunk.get("choices") else {}
                if (c0.get("text") or c0.get("delta", {}).get("content")) and "ttft" not in rec:
                    rec["ttft"] = time.perf_counter() - sched
                if chunk.get("usage"):
                    rec["completion_tokens"] = chunk["usage"]["completion_tokens"]
                    rec["prompt_tokens"] = chunk["usage"]["prompt_tokens"]
                    rec["cached_tokens"] = (chunk["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        rec["end"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        rec["error"] = repr(e)


async def run_load(url, tenants, workload, max_tokens, label, api):
    recs = [dict() for _ in workload]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:
        t0 = time.perf_counter()
        tasks = []
        for w, rec in zip(workload, recs):
            body = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True}
            if api == "chat":
                body["messages"] = [{"role": "system", "content": tenants[w["tenant"]]},
                                    {"role": "user", "content": w["question"]}]
            else:
                body["prompt"] = f"{tenants[w['tenant']]}\n\nQuestion: {w['question']}\nAnswer:"
            tasks.append(asyncio.create_task(one_request(client, url, body, t0, w["at"], rec)))
        pending = set(tasks)
        last = 0
        while pending:
            done, pending = await asyncio.wait(pending, timeout=2.0)
            n = len(tasks) - len(pending)
            if n != last or not done:
                ttfts = [r["ttft"] for r in recs if "ttft" in r]
                print(f"  [{label}] {time.perf_counter() - t0:6.1f} s: {n}/{len(tasks)} done, "
                      f"TTFT p50 so far {pct(ttfts, 50):.2f} s", flush=True)
                last = n
    return recs


def summarize(recs, before, after):
    ok = [r for r in recs if "end" in r and "error" not in r]
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    span = max(r["end"] for r in ok) - min(r["start"] for r in recs) if ok else float("nan")
    out_tokens = sum(r.get("completion_tokens", 0) for r in ok)
    def delta(name):
        return sum(a[name] - b[name] for a, b in zip(after, before))

    # /metrics: hits over lookups. A request preempted and admitted again is looked
    # up again (both counters grow), so this is per admission, not per request.
    queries, hits = delta("omnibus:prefix_cache_queries_total"), delta("omnibus:prefix_cache_hits_total")
    prompt = delta("omnibus:prompt_tokens_total")
    usage_prompt = sum(r.get("prompt_tokens", 0) for r in ok)
    usage_cached = sum(r.get("cached_tokens", 0) for r in ok)
    served = [int(a["omnibus:request_success_total"] - b["omnibus:request_success_total"])
              for a, b in zip(after, before)]
    return {
        "requests": len(recs), "ok": len(ok), "errors": [r["error"] for r in recs if "error" in r][:5],
        "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99), "ttft_mean_s": statistics.fmean(ttft) if ttft else None,
        "makespan_s": span, "output_tok_s": out_tokens / span, "requests_s": len(ok) / span,
        "prompt_tokens": int(prompt), "prefix_cache_queries": int(queries), "prefix_cache_hits": int(hits),
        "hit_rate": hits / queries if queries else 0.0,
        "usage_prompt_tokens": usage_prompt, "usage_cached_tokens": usage_cached,
        "usage_hit_rate": usage_cached / usage_prompt if usage_prompt else 0.0, "served_per_replica": served,
    }


def run_config(name, args, tenants_seed, workload, log_dir):
    mem = args.kv_cache_memory_bytes
    common = ["--max-model-len", str(int(args.prefix_tokens * 1.1) + 128 + args.max_tokens), "--max-num-seqs", "64"]
    if name == "single":
        log_dir.mkdir(parents=True, exist_ok=True)
        rep = Replica("single", log_dir, ["--kv-cache-memory", str(2 * mem), *common], threads=2)
        replicas = [rep]
        rep.start()
        try:
            rep.wait_ready()
        except BaseException:
            rep.stop()
            raise
        url = rep.url
        stop = rep.stop
    else:
        extra = CACHE_AWARE_ARGS if name == "cache_aware" else []
        c = Cluster(2, policy=name, replica_args=["--kv-cache-memory", str(mem), *common], router_args=extra,
                    threads=1, log_dir=log_dir).start()
        url, replicas, stop = c.url, c.replicas, c.stop
    try:
        tenants = build_tenants(replicas[0].url, args.tenants, args.prefix_tokens, tenants_seed)
        before = [r.metrics() for r in replicas]
        print(f"[{name}] {len(workload)} requests at {args.rate}/s, {args.tenants} tenants x "
              f"~{args.prefix_tokens} prompt tokens; pool {mem / 2**20:.0f} MiB per -t 1 replica", flush=True)
        recs = asyncio.run(run_load(url, tenants, workload, args.max_tokens, name, args.api))
        after = [r.metrics() for r in replicas]
        res = summarize(recs, before, after)
        res["config"] = name
        print(f"[{name}] TTFT p50 {res['ttft_p50_s']:.2f} s p99 {res['ttft_p99_s']:.2f} s, "
              f"{res['requests_s']:.2f} req/s, {res['output_tok_s']:.1f} tok/s, hit rate {res['hit_rate']:.0%} "
              f"(usage: {res['usage_hit_rate']:.0%}), "
              f"served {res['served_per_replica']}, errors {len(res['errors'])}", flush=True)
        return res
    finally:
        stop()


def parse_mem(s):
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    low = s.strip().lower()
    for u, m in units.items():
        if low.endswith(u):
            return int(float(low[:-len(u)]) * m)
    return int(low)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--rate", type=float, default=4.0, help="mean arrivals per second (Poisson)")
    ap.add_argument("--tenants", type=int, default=8)
    ap.add_argument("--prefix-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--kv-cache-memory", default=None,
                    help="pool of each -t 1 replica (single gets twice it); default: half the tenants' prefixes "
                         "plus room for the running requests")
    ap.add_argument("--configs", default="round_robin,cache_aware,single")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--api", choices=["completions", "chat"], default="completions",
                    help="chat: vllm-router 0.1.17's cache_aware does not route chat requests by their text "
                         "(docs/scale-out.md), so it balances them by load only")
    ap.add_argument("--quick", action="store_true", help="a ~10 s run: 4 tenants x 256 tokens, 16 requests")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.tenants, args.prefix_tokens, args.requests, args.rate, args.max_tokens = 4, 256, 16, 4.0, 8
    per_tok = KV_BYTES_PER_TOKEN.get(MODEL, KV_BYTES_PER_TOKEN["smollm2-135m"])
    if args.kv_cache_memory:
        args.kv_cache_memory_bytes = parse_mem(args.kv_cache_memory)
    else:
        # Half the tenants' prefixes, plus a 16-token block of question and answer per
        # running request (~8 in flight), rounded up to whole MiB.
        toks = math.ceil(args.tenants / 2) * (args.prefix_tokens + 64) + 8 * (64 + args.max_tokens)
        args.kv_cache_memory_bytes = math.ceil(toks * per_tok / 2**20) * 2**20
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="omnibus-router-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    workload = build_workload(args.requests, args.rate, args.tenants, args.seed)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"load average before: {' '.join(load)}; logs in {out}", flush=True)
    results = []
    for name in args.configs.split(","):
        results.append(run_config(name, args, args.seed, workload, out / name))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    meta = {"command": " ".join(sys.argv), "cpu": model_name, "load_before": load,
            "load_after": open("/proc/loadavg").read().split()[:3], "kv_cache_memory_bytes": args.kv_cache_memory_bytes,
            "cache_aware_args": CACHE_AWARE_ARGS, "api": args.api, **{k: getattr(args, k) for k in
                                                     ("requests", "rate", "tenants", "prefix_tokens", "max_tokens")}}
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    labels = {"round_robin": "2 x -t 1, router round_robin", "cache_aware": "2 x -t 1, router cache_aware",
              "single": "1 x -t 2, no router"}
    lines = ["| configuration | pool | TTFT p50 (s) | TTFT p99 (s) | output tok/s | requests/s | prefix-cache hits (/metrics) |"
             " cached / prompt tokens (usage) | served per replica | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in results:
        mem = args.kv_cache_memory_bytes * (2 if r["config"] == "single" else 1)
        lines.append(f"| {labels.get(r['config'], r['config'])} | {mem / 2**20:.0f} MiB | {r['ttft_p50_s']:.2f} | "
                     f"{r['ttft_p99_s']:.2f} | {r['output_tok_s']:.1f} | {r['requests_s']:.2f} | "
                     f"{r['hit_rate']:.1%} | {r['usage_hit_rate']:.1%} | {r['served_per_replica']} | {len(r['errors'])} |")
    table = "\n".join(lines)
    (out / "results.md").write_text(f"`{meta['command']}` on {model_name}, load before {' '.join(load)}\n\n"
                                    + table + "\n")
    print("\n" + table + "\n")
    plot = HERE / "plot_svg.py"
    specs = {
        "ttft": {"title": "TTFT by configuration", "x_label": "configuration", "y_label": "TTFT (ms)",
                 "series": [{"name": f"TTFT {p}", "points": [[r["config"], 1000 * r[f"ttft_{p}_s"]] for r in results]}
                            for p in ("p50", "p99")]},
        "throughput": {"title": "Throughput by configuration", "x_label": "configuration",
                       "y_label": "output tok/s; hit rate %",
                       "series": [{"name": "output tok/s", "points": [[r["config"], r["output_tok_s"]] for r in results]},
                                  {"name": "cached / prompt tokens (%)",
                                   "points": [[r["config"], 100 * r["usage_hit_rate"]] for r in results]}]},
    }
    for name, spec in specs.items():
        (out / f"{name}.json").write_text(json.dumps(spec))
        subprocess.run([sys.executable, str(plot), str(out / f"{name}.json"), str(out / f"{name}.svg")], check=True)
    print(f"wrote {out}/results.md, results.json, ttft.svg, throughput.svg")


if __name__ == "__main__":
    main()
