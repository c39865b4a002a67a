#!/usr/bin/env python3
"""Sliding-window KV (issue 18's acceptance): Gemma 3, N concurrent
sequences of P-token prompts on one fixed KV pool, omnibus serve with
sliding-window KV (the default) and with --no-sliding-window-kv, one after
the other in one run:
  KV bytes per sequence <= 30% of the full-KV layout,
  sequences that fit the pool >= 3x,
  greedy outputs bitwise equal between the two.

Each mode: OMNIBUS_BIN serve -m MODEL -t THREADS --kv-cache-memory M
--max-num-seqs N --max-model-len P+T [--no-sliding-window-kv]. M defaults to
what the full layout needs for --fit-full sequences of P+T tokens (18 layers
x K,V x 1 kv head x 256 x f16 = 18 KiB a token in gemma3-270m), so the full
layout is pool-bound. N streaming /v1/completions requests go out at once:
each a distinct P-token prompt (BOS + token ids of tests/data/perplexity.txt
from its own offset: no two share a first block, so the prefix cache shares
nothing across requests; prefix_cache_hits_total is printed: it is nonzero
only after preemptions, a preempted sequence finding its own freed blocks),
temperature 0, ignore_eos, max_tokens T, logprobs 0.

Why T defaults to 256, not a handful: the scheduler prefills at most two long
prompts at a time (--max-num-partial-prefills 2) within a 512-token step, so
with T = 16 a sequence finishes a few steps after its prompt and only a
handful are ever resident in either mode (6 in both, 16 x 2048 tokens): the
pool limits nothing and the ratio reads 1x. With T = 256 a sequence is still
decoding while the next ~30 prompts are prefilled, more than the default pool
holds in either mode, so the number running is bounded by the pool, which is
what is measured. (The full layout then runs ~6 at a time through 256 decode
steps each, which is most of its wall time.)

Measured from /metrics, polled every --poll seconds:
  peak running         max omnibus:num_requests_running;
  KV bytes / sequence  kv_cache_blocks_used * (kv_cache_pool_bytes /
                       kv_cache_blocks_total) / num_requests_running, at
                       the samples where every running sequence is decoding:
                       the client's count of requests that have streamed a
                       token and not finished equals num_requests_running
                       (read before and after the scrape). Reported at the
                       such sample with the most sequences running (the pool
                       full of decoders) and the median over all of them.
                       A preempted sequence being recomputed counts as
                       decoding and holds fewer blocks, which can only make
                       the full layout look cheaper;
  preemptions          omnibus:num_preemptions_total at the end;
  wall                 first request sent to last response done.
Outputs: each request's generated tokens (as the API returns them:
logprobs.tokens) and text must be equal between the modes; the
token_logprobs are compared bitwise too (reported, not required).

  .venv/bin/python tools/bench/sliding_window_kv.py [--n-seqs 64]
      [--prompt-tokens 4096] [--max-tokens 256] [--fit-full 6]
      [--kv-cache-memory MiB] [--threads 2] [--json FILE]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import threading
import time

import httpx

from serve_util import cpu_model, free_port, stop, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FULL_BYTES_PER_TOKEN = 18 * 2 * 1 * 256 * 2  # gemma3-270m: layers x (K,V) x kv heads x head dim x f16
METRICS = ("num_requests_running", "num_requests_waiting", "kv_cache_blocks_used", "kv_cache_blocks_total",
           "kv_cache_pool_bytes", "num_preemptions_total", "prefix_cache_hits_total", "engine_steps_total")


def log(msg):
    print(f"sliding_window_kv: {msg}", file=sys.stderr, flush=True)


def scrape(base):
    text = httpx.get(base + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        m = re.match(r"omnibus:(\w+)\{[^}]*\} (\S+)$", line)
        if m and m.group(1) in METRICS:
            out[m.group(1)] = float(m.group(2))
    return out


def tail(path, n=30):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


class Requests:
    """N streaming completions in threads; counts how many are decoding
    (streamed a token, not finished) under a lock."""

    def __init__(self, base, prompts, max_tokens):
        self.base, self.prompts, self.max_tokens = base, prompts, max_tokens
        self.lock = threading.Lock()
        self.decoding = 0
        self.finished = 0
        self.outputs = [None] * len(prompts)
        self.errors = []

    def one(self, i):
        body = {"prompt": self.prompts[i], "max_tokens": self.max_tokens, "temperature": 0.0, "ignore_eos": True,
                "logprobs": 0, "stream": True}
        out = {"text": "", "tokens": [], "logprobs": [], "finish_reason": None}
        started = False
        try:
            with httpx.stream("POST", self.base + "/v1/completions", json=body, timeout=3600.0) as r:
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    ev = json.loads(line[6:])
                    if "error" in ev:
                        raise RuntimeError(f"stream error: {ev['error']}")
                    ch = ev["choices"][0]
                    out["text"] += ch.get("text", "")
                    lp = ch.get("logprobs") or {}
                    out["tokens"] += lp.get("tokens", [])
                    out["logprobs"] += lp.get("token_logprobs", [])
                    out["finish_reason"] = ch.get("finish_reason") or out["finish_reason"]
                    if not started and lp.get("tokens"):
                        started = True
                        with self.lock:
                            self.decoding += 1
        except Exception as e:  # noqa: BLE001 (reported, not hidden)
            self.errors.append(f"request {i}: {e}")
        finally:
            with self.lock:
                self.decoding -= started
                self.finished += 1
        self.outputs[i] = out

    def counts(self):
        with self.lock:
            return self.decoding, self.finished


def run_mode(name, cmd, prompts, args):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = os.path.join(args.log_dir, f"sliding_window_kv.{name}.log")
    log(f"{name}: {' '.join(cmd + ['--port', str(port)])} (log: {log_path})")
    with open(log_path, "w") as lf:
        proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_healthy(base, proc, log_path=log_path)
        startup = [ln.strip() for ln in open(log_path) if ln.startswith(("sliding-window KV", "kv cache:"))]
        for ln in startup:
            log(f"{name}: {ln}")
        req = Requests(base, prompts, args.max_tokens)
        threads = [threading.Thread(target=req.one, args=(i,), daemon=True) for i in range(len(prompts))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        samples, last_print = [], 0.0
        while True:
            d0, fin = req.counts()
            m = scrape(base)
            d1, _ = req.counts()
            now = time.perf_counter() - t0
            m.update(t=now, decoding=d0, all_decoding=(d0 == d1 == m["num_requests_running"] > 0))
            samples.append(m)
            if proc.poll() is not None:
                raise RuntimeError(f"{name}: server exited with {proc.returncode} mid-run; log tail:\n"
                                   + tail(log_path))
            if now - last_print >= args.progress:
                last_print = now
                log(f"{name}: {now:6.1f} s  done {fin}/{len(prompts)}  running {m['num_requests_running']:.0f} "
                    f"(decoding {d0})  waiting {m['num_requests_waiting']:.0f}  blocks "
                    f"{m['kv_cache_blocks_used']:.0f}/{m['kv_cache_blocks_total']:.0f}  "
                    f"preemptions {m['num_preemptions_total']:.0f}")
            if fin == len(prompts):
                break
            time.sleep(args.poll)
        wall = time.perf_counter() - t0
        for t in threads:
            t.join()
        end = scrape(base)
        if req.errors:
            raise RuntimeError(f"{name}: {len(req.errors)} requests failed, first: {req.errors[0]}\nlog tail:\n"
                               + tail(log_path))
    finally:
        stop(proc)

    bytes_per_block = end["kv_cache_pool_bytes"] / end["kv_cache_blocks_total"]
    dec = [s for s in samples if s["all_decoding"]]
    per_seq = [s["kv_cache_blocks_used"] * bytes_per_block / s["num_requests_running"] for s in dec]
    fullest = max(dec, key=lambda s: (s["num_requests_running"], -s["t"])) if dec else None
    row = {
        "mode": name,
        "pool_mib": end["kv_cache_pool_bytes"] / 2**20,
        "bytes_per_block": bytes_per_block,
        "peak_running": max(s["num_requests_running"] for s in samples),
        "decode_samples": len(dec),
        "fullest_decode_running": fullest["num_requests_running"] if fullest else None,
        "bytes_per_seq_fullest": (fullest["kv_cache_blocks_used"] * bytes_per_block / fullest["num_requests_running"]
                                  if fullest else None),
        "bytes_per_seq_median": statistics.median(per_seq) if per_seq else None,
        "preemptions": end["num_preemptions_total"],
        "prefix_cache_hits": end["prefix_cache_hits_total"],
        "engine_steps": end["engine_steps_total"],
        "wall_s": wall,
        "startup": startup,
    }
    return row, req.outputs, samples


def plot(samples, out_svg):
    """Sequences running and KV MiB in use over time, both modes, as one SVG
    (tools/bench/plot_svg.py)."""
    series = []
    for mode, ss in samples.items():
        short = mode.split(" ")[0]
        ss = ss[::max(1, len(ss) // 300)]  # about 300 points a line
        series.append({"name": f"running, {short}",
                       "points": [[round(s["t"], 1), s["num_requests_running"]] for s in ss]})
        series.append({"name": f"KV GiB x 10, {short}",
                       "points": [[round(s["t"], 1), round(10 * s["kv_cache_blocks_used"] * s["kv_cache_pool_bytes"]
                                                    / s["kv_cache_blocks_total"] / 2**30, 2)] for s in ss]})
    spec = {"title": "Gemma 3: sequences running on one KV pool", "x_label": "seconds",
            "y_label": "sequences; KV GiB x 10", "numeric_x": True, "series": series}
    spec_path = pathlib.Path(out_svg).with_suffix(".json")
    spec_path.write_text(json.dumps(spec))
    subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("plot_svg.py")), str(spec_path),
                    str(out_svg)], check=True)
    print(f"wrote {out_svg}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma3-270m.gguf"))
    ap.add_argument("--n-seqs", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--fit-full", type=int, default=6,
                    help="size the pool for this many full-layout sequences of prompt + max tokens")
    ap.add_argument("--kv-cache-memory", type=int, help="pool in MiB (overrides --fit-full)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between /metrics scrapes")
    ap.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--log-dir", default="/tmp", help="server logs go here")
    ap.add_argument("--json", help="write rows, outputs and samples here")
    ap.add_argument("--plot", help="write an SVG of sequences running and KV in use over time here")
    ap.add_argument("--replot", metavar="JSON", help="only redraw --plot from an earlier --json file")
    args = ap.parse_args()
    if args.replot:
        plot(json.load(open(args.replot))["samples"], args.plot or "sliding-window-kv.svg")
        return

    omnibus = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    if not os.access(omnibus, os.X_OK):
        sys.exit(f"{omnibus} not found: build it (README.md)")
    seq_len = args.prompt_tokens + args.max_tokens
    pool_mib = args.kv_cache_memory or -(-args.fit_full * seq_len * FULL_BYTES_PER_TOKEN // 2**20)
    base_cmd = [omnibus, "serve", "-m", args.model, "-t", str(args.threads), "--kv-cache-memory", f"{pool_mib}MiB",
                "--max-num-seqs", str(args.n_seqs), "--max-model-len", str(seq_len)]

    # Prompts: BOS + the text's token ids from a distinct offset per request.
    # The tokenizer is the model's, so any mode's server can tokenize.
    text = open(os.path.join(ROOT, "tests", "data", "perplexity.txt")).read()
    port = free_port()
    tok_log = os.path.join(args.log_dir, "sliding_window_kv.tokenize.log")
    with open(tok_log, "w") as lf:
        proc = subprocess.Popen(base_cmd + ["--port", str(port)], stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log_path=tok_log)
        ids = httpx.post(f"http://127.0.0.1:{port}/tokenize", json={"prompt": text, "add_special_tokens": False},
                         timeout=60).json()["tokens"]
    finally:
        stop(proc)
    stride = max(1, len(ids) // args.n_seqs)
    prompts = [[2] + [ids[(k * stride + 1 + i) % len(ids)] for i in range(args.prompt_tokens - 1)]
               for k in range(args.n_seqs)]
    assert len({tuple(p[1:17]) for p in prompts}) == len(prompts), "two prompts share a first block"

    rows, outputs, samples = [], {}, {}
    for name, extra in (("sliding-window", []), ("full (--no-sliding-window-kv)", ["--no-sliding-window-kv"])):
        row, outs, smp = run_mode(name, base_cmd + extra, prompts, args)
        rows.append(row)
        outputs[name], samples[name] = outs, smp
        log(f"{name}: done in {row['wall_s']:.1f} s, peak running {row['peak_running']:.0f}, "
            f"preemptions {row['preemptions']:.0f}")

    a, b = (outputs[r["mode"]] for r in rows)
    same_tokens = sum(x["tokens"] == y["tokens"] and x["text"] == y["text"] for x, y in zip(a, b))
    same_logprobs = sum(x["logprobs"] == y["logprobs"] for x, y in zip(a, b))
    first_diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x["tokens"] != y["tokens"]), None)
    full_theory = seq_len * FULL_BYTES_PER_TOKEN

    def mib(x):
        return "n/a" if x is None else f"{x / 2**20:.1f}"

    cpu = cpu_model()
    print(f"gemma3-270m, {args.n_seqs} sequences of {args.prompt_tokens}-token prompts + {args.max_tokens} generated "
          f"(greedy, ignore_eos), pool {pool_mib} MiB, {args.threads} threads, {cpu}\n")
    print("| mode | peak running | running at fullest decode-only sample | KV MiB / seq there | "
          "KV MiB / seq median (decode-only samples) | preemptions | prefix-hit tokens | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['peak_running']:.0f} | {r['fullest_decode_running'] or 0:.0f} | "
              f"{mib(r['bytes_per_seq_fullest'])} | {mib(r['bytes_per_seq_median'])} ({r['decode_samples']} samples) | "
              f"{r['preemptions']:.0f} | {r['prefix_cache_hits']:.0f} | {r['wall_s']:.1f} |")
    s, f = rows
    ratio_bytes = (s["bytes_per_seq_fullest"] / f["bytes_per_seq_fullest"]
                   if s["bytes_per_seq_fullest"] and f["bytes_per_seq_fullest"] else None)
    print(f"\nfull layout in theory: {mib(full_theory)} MiB per sequence of {seq_len} tokens")
    print(f"KV bytes per sequence, sliding / full (fullest decode-only samples): "
          f"{'n/a' if ratio_bytes is None else f'{100 * ratio_bytes:.1f}%'} (target <= 30%)")
    print(f"sequences running at once, sliding / full (peak): {s['peak_running'] / f['peak_running']:.2f}x "
          f"(target >= 3x)")
    for r in rows:
        for ln in r["startup"]:
            print(f"  {r['mode']} start-up: {ln}")
    print(f"outputs: {same_tokens}/{len(a)} requests with equal tokens and text; "
          f"{same_logprobs}/{len(a)} with bitwise-equal token logprobs"
          + ("" if first_diff is None else f"; first differing request: {first_diff}"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "pool_mib": pool_mib, "cpu": cpu, "rows": rows,
                       "same_tokens": same_tokens, "same_logprobs": same_logprobs, "outputs": outputs,
                       "samples": samples}, fh, indent=1)
    if args.plot:
        plot(samples, args.plot)


if __name__ == "__main__":
    main()
