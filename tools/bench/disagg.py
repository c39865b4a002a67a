#!/usr/bin/env python3
"""Colocated vs prefill/decode-disaggregated serving on the same cores.

A mixed workload with seeded Poisson arrivals (--rate per second, --requests
in all): a fraction --long-frac of long prompts (~--long-tokens tokens, a
document to summarize) among short chat turns (--short-tokens, ~64-128
tokens). Every request is a streaming /v1/completions with temperature 0,
`ignore_eos: true` and --max-tokens (128), so each emits exactly max_tokens
tokens. Every prompt is its own seeded word sequence from its first token on,
so no request hits another's cached prefix. The same requests, at the same
times, go to each configuration, one after the other:

  colocated  one `omnibus serve -t 2`, queried directly (no router)
  disagg     a prefill worker `-t 1` + a decode worker `-t 1` behind
             `vllm-router --vllm-pd-disaggregation` (tests/python/pd_harness.py)

With a binary that has `--kv-role` the workers get --kv-role prefill/decode
and a KV transfer port each, and the decode worker fetches the prompt's KV
blocks from the prefill worker. Without it (older binaries) PD mode still
runs, by recomputation: the router's max_tokens=1 request to the prefill
worker is thrown away and the decode worker prefills again; the header says
which.

Measured at the client, per request: TTFT (scheduled arrival to the first
non-empty text chunk), the gaps between consecutive token chunks (ITL; one
chunk is normally one token, checked against usage.completion_tokens), and end-to-end
latency. (A chunk can carry two tokens when the detokenizer holds text back
until a character or word piece is complete; the table counts such requests;
gaps are what the client sees, and the mean ITL per request divides by
usage.completion_tokens.) Reported per configuration, side by side with the colocated/disagg
ratio: TTFT p50/p99, ITL p50/p99 over all gaps, each request's own ITL p99
(its p50 and p99 over requests), goodput (requests with TTFT <= --slo-ttft
and own ITL p99 <= --slo-itl), requests/s, output tok/s, and every
`omnibus:kv_transfer_*` line of the workers' /metrics (after - before).
Writes table.md, results.json (every request's timings) and cdf.png (TTFT and
ITL CDFs per configuration) to --out; progress goes to stderr.

    .venv/bin/python tools/bench/disagg.py --out /tmp/disagg-bench          # ~40 requests at 0.5/s, minutes
    .venv/bin/python tools/bench/disagg.py --quick --out /tmp/disagg-quick  # ~1 minute smoke test

OMNIBUS_BIN, OMNIBUS_MODELS_DIR, VLLM_ROUTER_BIN as for tests/python/router_harness.py.
"""
import argparse
import asyncio
import datetime
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
from pd_harness import PdCluster, kv_transfer_supported  # noqa: E402
from router_harness import Replica, omnibus_bin  # noqa: E402

sys.path.insert(0, str(HERE))
from router import WORDS, pct  # noqa: E402

KV_PREFIX = "omnibus:kv_transfer_"
# Per-worker counters shown besides the kv_transfer ones (after - before): where
# prompts were computed and where tokens were generated.
WORKER_COUNTERS = ["omnibus:request_success_total", "omnibus:prompt_tokens_total",
                   "omnibus:generation_tokens_total"]

LABELS = {"colocated": "1 x `-t 2`, direct", "disagg": "prefill `-t 1` + decode `-t 1`, vllm-router PD"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_info():
    model, family, cpu_model, flags = "?", "?", "?", set()
    for line in open("/proc/cpuinfo"):
        k, _, v = line.partition(":")
        k, v = k.strip(), v.strip()
        if k == "model name" and model == "?":
            model = v
        elif k == "cpu family" and family == "?":
            family = v
        elif k == "model" and cpu_model == "?":
            cpu_model = v
        elif k == "flags" and not flags:
            flags = set(v.split())
    isa = "avx512_vnni" if "avx512_vnni" in flags else "avx2" if "avx2" in flags else "generic"
    return {"model_name": model, "family": family, "model": cpu_model, "isa": isa,
            "cores": subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()}


def raw_metrics(url):
    """Prometheus text -> {name{labels}: value}, labels kept, histogram buckets skipped."""
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("#") or not line.strip() or "le=" in line:
            continue
        name, value = line.rsplit(" ", 1)
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def metric_deltas(before, after):
    """{worker: {metric: after - before}} for kv_transfer_* and WORKER_COUNTERS."""
    out = {}
    for name in after:
        b, a = before[name], after[name]
        keys = [k for k in a if k.startswith(KV_PREFIX) or k.split("{", 1)[0] in WORKER_COUNTERS]
        out[name] = {k: a[k] - b.get(k, 0.0) for k in sorted(keys)}
    return out


# ---- workload ---------------------------------------------------------------------------------------------------

def prompt_text(kind, i, rng, n_words):
    words = [rng.choice(WORDS) for _ in range(n_words)]
    sentences = [" ".join(words[j:j + 12]).capitalize() + "." for j in range(0, len(words), 12)]
    body = " ".join(sentences)
    if kind == "long":
        return f"{body}\n\nSummarize the document above (request {i}):"
    return f"{body}\nQuestion {i}: what comes next?\nAnswer:"


def build_workload(args, tokenize_url):
    """Seeded arrivals and prompts; each prompt's word count scaled until /tokenize gives ~its target."""
    rng = random.Random(args.seed)
    t, reqs = 0.0, []
    for i in range(args.requests):
        t += rng.expovariate(args.rate)
        kind = "long" if rng.random() < args.long_frac else "short"
        target = args.long_tokens if kind == "long" else rng.randint(*args.short_tokens)
        reqs.append({"i": i, "at": t, "kind": kind, "target_tokens": target, "seed": rng.randrange(2**31)})

    def ntok(text):
        r = httpx.post(tokenize_url + "/tokenize", json={"prompt": text}, timeout=60)
        r.raise_for_status()
        return len(r.json()["tokens"])

    ratio = 0.75  # words per token, refined as prompts are measured
    for r in reqs:
        n_words = max(4, int(r["target_tokens"] * ratio))
        for _ in range(6):
            text = prompt_text(r["kind"], r["i"], random.Random(r["seed"]), n_words)
            got = ntok(text)
            if abs(got - r["target_tokens"]) <= max(4, r["target_tokens"] * 0.03):
                break
            n_words = max(4, int(n_words * r["target_tokens"] / got))
        ratio = n_words / got if got else ratio
        r["prompt"], r["prompt_tokens"] = text, got
    return reqs


# ---- load -------------------------------------------------------------------------------------------------------

async def one_request(client, url, body, t0, at, rec):
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    sched = t0 + at
    rec["start"] = time.perf_counter() - t0
    times = []  # arrival of each chunk carrying a choice with text (one token each)
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            if r.status_code != 200:
                rec["error"] = f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.perf_counter()
                chunk = json.loads(line[6:])
                if chunk.get("error"):
                    rec["error"] = f"stream error: {chunk['error']}"[:300]
                    return
                c0 = chunk["choices"][0] if chunk.get("choices") else None
                if c0 is not None:  # one chunk per token (checked against usage below)
                    times.append(now)
                    if c0.get("text") and "ttft" not in rec:
                        rec["ttft"] = now - sched
                if chunk.get("usage"):
                    rec["completion_tokens"] = chunk["usage"]["completion_tokens"]
                    rec["prompt_tokens"] = chunk["usage"]["prompt_tokens"]
        rec["e2e"] = time.perf_counter() - sched
        rec["end"] = time.perf_counter() - t0
        rec["chunks"] = len(times)
        rec["gaps"] = [b - a for a, b in zip(times, times[1:])]
        # A chunk can carry two tokens (text held back until a UTF-8 character or a word piece is
        # complete): the gaps are what the client sees; the mean per token uses usage's count.
        n_tok = rec.get("completion_tokens") or len(times)
        if len(times) > 1 and n_tok > 1:
            rec["itl_mean"] = (times[-1] - times[0]) / (n_tok - 1)
            rec["itl_p99"] = pct(rec["gaps"], 99)
    except Exception as e:  # noqa: BLE001
        rec["error"] = repr(e)


async def run_load(url, workload, args, label):
    recs = [{"i": w["i"], "kind": w["kind"], "at": w["at"]} for w in workload]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:
        t0 = time.perf_counter()
        tasks = []
        for w, rec in zip(workload, recs):
            body = {"model": args.model, "prompt": w["prompt"], "max_tokens": args.max_tokens, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
            tasks.append(asyncio.create_task(one_request(client, url, body, t0, w["at"], rec)))
        pending, last = set(tasks), -1
        while pending:
            done, pending = await asyncio.wait(pending, timeout=5.0)
            n = len(tasks) - len(pending)
            if n != last or not done:
                ttfts = [r["ttft"] for r in recs if "ttft" in r]
                errs = sum("error" in r for r in recs)
                log(f"  [{label}] {time.perf_counter() - t0:6.1f} s: {n}/{len(tasks)} done, {errs} errors, "
                    f"TTFT p50 so far {pct(ttfts, 50):.2f} s")
                last = n
    return recs


def summarize(recs, args):
    ok = [r for r in recs if "end" in r and "error" not in r]
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    gaps = [g for r in ok for g in r["gaps"]]
    own_p99 = [r["itl_p99"] for r in ok if "itl_p99" in r]
    good = [r for r in ok if r.get("ttft", math.inf) <= args.slo_ttft and r.get("itl_p99", math.inf) <= args.slo_itl]
    span = max(r["end"] for r in ok) - min(r["start"] for r in recs if "start" in r) if ok else float("nan")
    out_tokens = sum(r.get("completion_tokens", 0) for r in ok)
    mismatch = [r["i"] for r in ok if r.get("completion_tokens") != r["chunks"]]
    by_kind = {}
    for kind in ("long", "short"):
        k_ttft = [r["ttft"] for r in ok if r["kind"] == kind and "ttft" in r]
        by_kind[kind] = {"n": len(k_ttft), "ttft_p50_s": pct(k_ttft, 50), "ttft_p99_s": pct(k_ttft, 99)}
    return {
        "requests": len(recs), "ok": len(ok), "errors": [r["error"] for r in recs if "error" in r][:5],
        "n_errors": sum("error" in r for r in recs),
        "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
        "itl_p50_s": pct(gaps, 50), "itl_p99_s": pct(gaps, 99),
        "itl_mean_p50_s": pct([r["itl_mean"] for r in ok if "itl_mean" in r], 50),
        "own_itl_p99_p50_s": pct(own_p99, 50), "own_itl_p99_p99_s": pct(own_p99, 99),
        "e2e_p50_s": pct([r["e2e"] for r in ok], 50), "e2e_p99_s": pct([r["e2e"] for r in ok], 99),
        "good": len(good), "goodput_frac": len(good) / len(recs) if recs else 0.0,
        "goodput_req_s": len(good) / span if ok else 0.0,
        "makespan_s": span, "requests_s": len(ok) / span if ok else 0.0,
        "output_tok_s": out_tokens / span if ok else 0.0,
        "chunk_token_mismatch": mismatch, "by_kind": by_kind,
    }


# ---- configurations ---------------------------------------------------------------------------------------------

def worker_args(args):
    return ["--kv-cache-dtype", args.kv_cache_dtype, "--kv-cache-memory", args.kv_cache_memory,
            *args.worker_arg]


def start_config(name, args, log_dir):
    """-> (url the client uses, {worker name: base url}, stop(), note)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if name == "colocated":
        rep = Replica("colocated", log_dir, worker_args(args), threads=2, model=args.model)
        rep.start()
        try:
            rep.wait_ready()
        except BaseException:
            rep.stop()
            raise
        return rep.url, {"colocated": rep.url}, rep.stop, "1 x -t 2, no router"
    if name == "disagg":
        c = PdCluster(1, 1, prefill_args=worker_args(args), decode_args=worker_args(args), threads=1,
                      kv_transfer=not args.no_kv_transfer, log_dir=log_dir, model=args.model).start()
        note = ("KV transfer (--kv-role)" if c.kv_flags else
                "no KV transfer: decode recomputes the prompt" + ("" if not args.no_kv_transfer and
                                                                   not kv_transfer_supported() else
                                                                   " (--no-kv-transfer)"))
        return c.url, {r.name: r.url for r in c.replicas}, c.stop, note
    raise SystemExit(f"unknown configuration {name!r} (colocated, disagg)")


def run_config(name, args, workload, log_dir):
    url, workers, stop, note = start_config(name, args, log_dir)
    try:
        before = {w: raw_metrics(u) for w, u in workers.items()}
        log(f"[{name}] {len(workload)} requests at {args.rate}/s ({note})")
        recs = asyncio.run(run_load(url, workload, args, name))
        after = {w: raw_metrics(u) for w, u in workers.items()}
    finally:
        stop()
    res = summarize(recs, args)
    res.update(config=name, note=note, metrics=metric_deltas(before, after), records=recs)
    log(f"[{name}] TTFT p50 {res['ttft_p50_s']:.2f} s p99 {res['ttft_p99_s']:.2f} s, ITL p50 "
        f"{1000 * res['itl_p50_s']:.1f} ms p99 {1000 * res['itl_p99_s']:.1f} ms, goodput {res['good']}/"
        f"{res['requests']}, errors {res['n_errors']}")
    return res


# ---- output -----------------------------------------------------------------------------------------------------

def fmt_s(x):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def fmt_ms(x):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{1000 * x:.1f}"


def table(results, args):
    rows = [
        ("requests ok / sent", lambda r: f"{r['ok']} / {r['requests']}", None),
        ("TTFT p50 (s)", lambda r: fmt_s(r["ttft_p50_s"]), "ttft_p50_s"),
        ("TTFT p99 (s)", lambda r: fmt_s(r["ttft_p99_s"]), "ttft_p99_s"),
        ("TTFT p50 long / short (s)", lambda r: f"{fmt_s(r['by_kind']['long']['ttft_p50_s'])} / "
                                                f"{fmt_s(r['by_kind']['short']['ttft_p50_s'])}", None),
        ("ITL p50, all gaps (ms)", lambda r: fmt_ms(r["itl_p50_s"]), "itl_p50_s"),
        ("ITL p99, all gaps (ms)", lambda r: fmt_ms(r["itl_p99_s"]), "itl_p99_s"),
        ("mean ITL per request, p50 (ms)", lambda r: fmt_ms(r["itl_mean_p50_s"]), "itl_mean_p50_s"),
        ("request's own ITL p99: p50 over requests (ms)", lambda r: fmt_ms(r["own_itl_p99_p50_s"]),
         "own_itl_p99_p50_s"),
        ("request's own ITL p99: p99 over requests (ms)", lambda r: fmt_ms(r["own_itl_p99_p99_s"]),
         "own_itl_p99_p99_s"),
        ("end-to-end p50 (s)", lambda r: fmt_s(r["e2e_p50_s"]), "e2e_p50_s"),
        ("end-to-end p99 (s)", lambda r: fmt_s(r["e2e_p99_s"]), "e2e_p99_s"),
        (f"goodput: TTFT <= {args.slo_ttft:g} s and own ITL p99 <= {1000 * args.slo_itl:g} ms",
         lambda r: f"{r['good']}/{r['requests']} ({r['goodput_frac']:.0%})", "good"),
        ("goodput (req/s)", lambda r: f"{r['goodput_req_s']:.3f}", "goodput_req_s"),
        ("requests/s", lambda r: f"{r['requests_s']:.3f}", "requests_s"),
        ("output tok/s", lambda r: f"{r['output_tok_s']:.1f}", "output_tok_s"),
        ("requests with chunks != completion_tokens", lambda r: str(len(r["chunk_token_mismatch"])), None),
    ]
    names = [r["config"] for r in results]
    by = {r["config"]: r for r in results}
    ratio = "colocated" in by and "disagg" in by
    head = "| metric | " + " | ".join(f"{n} ({LABELS.get(n, n)})" for n in names) + \
        (" | colocated / disagg |" if ratio else " |")
    lines = [head, "|---|" + "---:|" * (len(names) + ratio)]
    for label, f, key in rows:
        cells = [f(r) for r in results]
        if ratio:
            if key:
                a, b = by["colocated"][key], by["disagg"][key]
                cells.append(f"{a / b:.2f}x" if b and not (math.isnan(a) or math.isnan(b)) else "n/a")
            else:
                cells.append("")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def short(key):
    """omnibus:x_total{model_name="m",a="b"} -> x_total{a="b"}"""
    name, _, labels = key.partition("{")
    labels = ",".join(x for x in labels.rstrip("}").split(",") if x and not x.startswith("model_name="))
    return name.split(":", 1)[-1] + (f"{{{labels}}}" if labels else "")


def metrics_text(results):
    out = []
    for r in results:
        for worker, m in r["metrics"].items():
            base = {k: v for k, v in m.items() if not k.startswith(KV_PREFIX)}
            kv = {k: v for k, v in m.items() if k.startswith(KV_PREFIX)}
            counters = ", ".join(f"{short(k)} {v:g}" for k, v in base.items() if v)
            out.append(f"- {r['config']} / {worker}: {counters}")
            changed = {k: v for k, v in kv.items() if v}
            out += [f"    {k} {v:g}" for k, v in changed.items()]
            if kv and len(changed) < len(kv):
                out.append(f"    ({len(kv) - len(changed)} {'other ' if changed else ''}{KV_PREFIX}* series unchanged)")
            elif not kv and r["config"] == "disagg":
                out.append(f"    (no {KV_PREFIX}* metrics: a binary without the KV transfer)")
    return "\n".join(out)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in results:
        ok = [x for x in r["records"] if "error" not in x and "end" in x]
        for ax, xs, scale in ((ax1, [x["ttft"] for x in ok if "ttft" in x], 1.0),
                              (ax2, [g for x in ok for g in x["gaps"]], 1000.0)):
            xs = sorted(v * scale for v in xs)
            if xs:
                ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                        label=f"{r['config']} ({r['note']})" if ax is ax1 else r["config"])
    ax1.set(title="TTFT CDF", xlabel="TTFT (s)", ylabel="fraction of requests")
    ax2.set(title="ITL CDF (every gap between tokens)", xlabel="ITL (ms, log)", ylabel="fraction of gaps",
            xscale="log")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="colocated,disagg", help="comma-separated: colocated, disagg")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--rate", type=float, default=0.5,
                    help="mean arrivals per second (Poisson). 0.5: ~536 prompt tokens a request on average "
                         "is ~0.7 s of -t 2 prefill on a quiet machine (pp512 ~865 tok/s, docs/performance.md), "
                         "so prefill alone keeps the colocated server ~35%% busy, decode the rest; "
                         "on a machine shared with builds it is overloaded")
    ap.add_argument("--long-frac", type=float, default=0.25, help="fraction of long prompts")
    ap.add_argument("--long-tokens", type=int, default=2048)
    ap.add_argument("--short-tokens", default="64-128", help="short prompt length range, tokens (uniform)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--slo-ttft", type=float, default=2.0, help="goodput SLO on TTFT, seconds")
    ap.add_argument("--slo-itl", type=float, default=0.1, help="goodput SLO on a request's own ITL p99, seconds")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--kv-cache-dtype", default="f16", help="to every worker: f16, q8, kivi2, ...")
    ap.add_argument("--kv-cache-memory", default="1GiB", help="KV pool of every worker")
    ap.add_argument("--worker-arg", action="append", default=[],
                    help="one more `omnibus serve` argument for every worker (repeatable, e.g. "
                         "--worker-arg=--max-num-batched-tokens --worker-arg=256)")
    ap.add_argument("--no-kv-transfer", action="store_true", help="disagg without --kv-* flags (recomputation)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true",
                    help="~1 minute smoke test: 10 requests at 1/s, 512/32-64-token prompts, 32 output tokens")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rate, args.long_tokens, args.short_tokens, args.max_tokens = 10, 1.0, 512, "32-64", 32
    lo, _, hi = args.short_tokens.partition("-")
    args.short_tokens = (int(lo), int(hi or lo))
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="omnibus-disagg-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_info()
    load = open("/proc/loadavg").read().split()[:3]
    log(f"CPU {cpu['model_name']} (family {cpu['family']} model {cpu['model']}), {cpu['cores']} cores, ISA tier "
        f"{cpu['isa']}; load average before {' '.join(load)}; logs in {out}")

    # Prompts are built once (against a throwaway -t 2 worker's /tokenize) and sent to every configuration.
    tok = Replica("tokenize", out, ["--kv-cache-memory", "64MiB"], threads=2, model=args.model).start()
    try:
        tok.wait_ready()
        workload = build_workload(args, tok.url)
    finally:
        tok.stop()
    n_long = sum(w["kind"] == "long" for w in workload)
    log(f"workload: {len(workload)} requests over {workload[-1]['at']:.1f} s, {n_long} long "
        f"(~{args.long_tokens} tokens), {len(workload) - n_long} short "
        f"({args.short_tokens[0]}-{args.short_tokens[1]}), prompt tokens in all "
        f"{sum(w['prompt_tokens'] for w in workload)}, {args.max_tokens} output tokens each")

    results = [run_config(name, args, workload, out / name) for name in args.configs.split(",")]

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"`{' '.join(['tools/bench/disagg.py', *sys.argv[1:]])}` ({when})\n\n"
              f"CPU: {cpu['model_name']} (family {cpu['family']} model {cpu['model']}), {cpu['cores']} cores, "
              f"ISA tier {cpu['isa']}; load average before {' '.join(load)}, after "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}"
              + (" (**busy machine: other processes shared the cores; not representative**)"
                 if float(load[0]) > 1.0 else "") + "\n\n"
              f"Model {args.model}, --kv-cache-dtype {args.kv_cache_dtype}, --kv-cache-memory "
              f"{args.kv_cache_memory} per worker; {len(workload)} requests, Poisson {args.rate}/s, "
              f"{n_long} long (~{args.long_tokens} tokens) + {len(workload) - n_long} short "
              f"({args.short_tokens[0]}-{args.short_tokens[1]} tokens), {args.max_tokens} output tokens each "
              f"(ignore_eos). disagg: " + "; ".join(r["note"] for r in results if r["config"] == "disagg"))
    md = table(results, args)
    mtext = metrics_text(results)
    errs = "\n".join(f"- {r['config']}: {e}" for r in results for e in r["errors"])
    doc = f"{header}\n\n{md}\n\nWorker /metrics, after - before:\n\n{mtext}\n" + \
        (f"\nFirst errors:\n\n{errs}\n" if errs else "")
    (out / "table.md").write_text(doc)
    meta = {"command": sys.argv, "cpu": cpu, "load_before": load, "when": when, "binary": omnibus_bin(),
            "kv_role_supported": kv_transfer_supported(),
            **{k: getattr(args, k) for k in ("requests", "rate", "long_frac", "long_tokens", "short_tokens",
                                             "max_tokens", "slo_ttft", "slo_itl", "model", "kv_cache_dtype",
                                             "kv_cache_memory", "seed", "quick")}}
    workload_out = [{k: w[k] for k in ("i", "at", "kind", "prompt_tokens")} for w in workload]
    (out / "results.json").write_text(json.dumps({"meta": meta, "workload": workload_out, "results": results},
                                                 indent=1) + "\n")
    plot(results, out / "cdf.png")
    print(doc)
    log(f"wrote {out}/table.md, results.json, cdf.png")


if __name__ == "__main__":
    main()
