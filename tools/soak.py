#!/usr/bin/env python3
"""Soak test: a mixed workload against `omnibus serve` for a given time,
sampling the server's resident memory, open file descriptors, KV usage and
error counts; prints a table, writes a plot, and exits non-zero when the
server misbehaved (issue "Serving under pressure").

    tools/soak.py --duration 1800 [--workers 6] [--plot soak.svg] [--json soak.json]

It starts its own server (OMNIBUS_BIN, default build/omnibus) on the bundled
model with a small waiting queue (--max-waiting 8, so bursts are refused) and
the flags in --server-args. The engine verifies the KV cache's invariants
(check_integrity) each time it goes idle and aborts on a violation.

Workload: --workers threads, each looping until the time is up over
  chat          /v1/chat/completions, n 1-4, streaming or not, a shared
                system prompt (prefix sharing) and a random question;
  completion    /v1/completions, a shared 200-token prefix + a random tail,
                logprobs 0-2, streaming or not;
  cancel        a stream closed after its first chunks (client disconnect);
  malformed     bodies a careless client sends (bad JSON, wrong types,
                unknown model, negative max_tokens): each must get a 4xx;
and one burst thread that every ~10 s sends 24 requests at once, past the
waiting queue: each gets 200 or 503 "overloaded" (counted as refused; so do
the workers' requests refused while a burst fills the queue).

Checks (exit 1 when one fails):
  - no unexpected error (a 5xx outside a burst's 503, a transport error, a
    response of the wrong shape, a 2xx to a malformed body);
  - memory and open fds flat over the last --flat-window of the run: that
    window's last quarter against its first quarter, within --flat-tolerance.
    Memory is RSS less the KV pool's resident bytes (the pool is reserved up
    front and fills with cached prefixes up to its size, by design; it is
    reported beside it); its peaks are compared. Open fds count the
    connections in flight, so their floors (minima) are compared, and at
    the end, idle, they must be back to the idle count before the load
    (+-2);
  - when the load stops the engine goes idle with KV usage 0, and the
    integrity checks ran (omnibus:kv_integrity_checks_total > 0) without
    aborting the server;
  - the server is alive and exits 0 on SIGTERM.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
from plot_svg import render  # noqa: E402

WORDS = ("river stone light market garden winter engine paper music cloud harbor forest "
         "letter window mountain silver question number story planet bridge morning").split()


def log(msg):
    print(f"soak: {msg}", file=sys.stderr, flush=True)


class Counters:
    def __init__(self):
        self.mu = threading.Lock()
        self.c = {"ok": 0, "cancelled": 0, "rejected_4xx": 0, "refused_503": 0, "unexpected": 0}
        self.errors = []

    def add(self, key, detail=None):
        with self.mu:
            self.c[key] += 1
            if key == "unexpected" and len(self.errors) < 20:
                self.errors.append(detail)

    def snapshot(self):
        with self.mu:
            return dict(self.c)


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def check_completion(body, n, chat):
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != n:
        return f"expected {n} choices: {str(body)[:200]}"
    for c in choices:
        if c.get("finish_reason") not in ("stop", "length"):
            return f"finish_reason {c.get('finish_reason')!r}"
        if chat and not isinstance(c.get("message", {}).get("content"), str):
            return f"no message content: {str(c)[:200]}"
    return None


def refused_or_unexpected(r, counters):
    """A non-200 answer to a well-formed request: a 503 "overloaded" while a
    burst fills the waiting queue is the server's documented refusal (the
    client should retry); anything else is unexpected."""
    if r.status_code == 503 and "overloaded" in r.text:
        counters.add("refused_503")
    else:
        counters.add("unexpected", f"HTTP {r.status_code}: {r.text[:200]}")


def stream(client, url, body, counters, cancel_after=None):
    """Streams one request; checks that it ends with a finish_reason and [DONE]."""
    with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            r.read()
            refused_or_unexpected(r, counters)
            return
        chunks, finished, done = 0, set(), False
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            event = json.loads(line[6:])
            for c in event.get("choices") or []:
                if c.get("finish_reason"):
                    finished.add(c.get("index", 0))
            chunks += 1
            if cancel_after is not None and chunks >= cancel_after:
                counters.add("cancelled")
                return  # closing the response disconnects mid-stream
        n = body.get("n", 1)
        if not done or len(finished) != n:
            counters.add("unexpected", f"stream ended without [DONE] or finish reasons ({finished}, n {n})")
        else:
            counters.add("ok")


def send(client, url, body, streaming, counters):
    """One well-formed request, streamed or not, checked and counted."""
    if streaming:
        return stream(client, url, {**body, "stream": True}, counters)
    r = client.post(url, json=body)
    if r.status_code != 200:
        return refused_or_unexpected(r, counters)
    err = check_completion(r.json(), body.get("n", 1), "messages" in body)
    counters.add("unexpected", err) if err else counters.add("ok")


def worker(base, seed, deadline, counters, prefix_tokens):
    rng = random.Random(seed)
    system = "You are a careful assistant. " + sentence(random.Random(7), 60)
    with httpx.Client(base_url=base, timeout=120.0) as client:
        while time.time() < deadline:
            kind = rng.choices(["chat", "completion", "cancel", "malformed"], [4, 3, 1, 1])[0]
            try:
                if kind == "chat":
                    n = rng.randint(1, 4)
                    body = {"model": "smollm2-135m", "n": n, "max_tokens": rng.randint(4, 24),
                            "temperature": 0.8, "seed": rng.randint(0, 1 << 30),
                            "messages": [{"role": "system", "content": system},
                                         {"role": "user", "content": sentence(rng, rng.randint(3, 20)) + "?"}]}
                    send(client, "/v1/chat/completions", body, rng.random() < 0.5, counters)
                elif kind == "completion":
                    tail = [rng.randint(100, 40000) for _ in range(rng.randint(1, 40))]
                    body = {"prompt": prefix_tokens + tail, "max_tokens": rng.randint(1, 16),
                            "temperature": 0, "logprobs": rng.choice([None, 0, 2])}
                    send(client, "/v1/completions", body, rng.random() < 0.5, counters)
                elif kind == "cancel":
                    body = {"prompt": sentence(rng, 30), "max_tokens": 200, "ignore_eos": True, "stream": True}
                    stream(client, "/v1/completions", body, counters, cancel_after=rng.randint(1, 4))
                else:
                    raw, typed = rng.choice([
                        ('{"prompt": "hi", "max_tokens": ', None),
                        (None, {"prompt": 5, "max_tokens": 4}),
                        (None, {"prompt": "hi", "max_tokens": -3}),
                        (None, {"model": "no-such-model", "prompt": "hi"}),
                        (None, {"messages": "not a list"}),
                        ('{"prompt": "\\ud800", "max_tokens": "x"}', None),
                    ])
                    url = "/v1/chat/completions" if typed and "messages" in typed else "/v1/completions"
                    if raw is not None:
                        r = client.post(url, content=raw, headers={"content-type": "application/json"})
                    else:
                        r = client.post(url, json=typed)
                    if 400 <= r.status_code < 500 and "error" in r.json():
                        counters.add("rejected_4xx")
                    else:
                        counters.add("unexpected", f"malformed body got HTTP {r.status_code}: {r.text[:200]}")
            except (httpx.HTTPError, ValueError) as e:
                counters.add("unexpected", f"{kind}: {type(e).__name__}: {e}")


def burster(base, deadline, counters, size=24, every=10.0):
    def one(i, results):
        try:
            r = httpx.post(base + "/v1/completions", timeout=120.0,
                           json={"prompt": f"burst {i} " + " ".join(WORDS[:12]), "max_tokens": 8})
            results[i] = r.status_code
        except httpx.HTTPError as e:
            results[i] = str(e)

    while time.time() + every < deadline:
        time.sleep(every)
        results = [None] * size
        threads = [threading.Thread(target=one, args=(i, results)) for i in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for code in results:
            if code == 200:
                counters.add("ok")
            elif code == 503:
                counters.add("refused_503")
            else:
                counters.add("unexpected", f"burst: {code}")


def metrics(base):
    out = {}
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out.setdefault(name.split("{", 1)[0], float(value))
    return out


def proc_sample(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=0, help="server compute threads (0 = all)")
    ap.add_argument("--server-args", default="", help="extra omnibus serve flags")
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--flat-window", type=float, default=2 / 3,
                    help="fraction of the run, at its end, over which RSS and fds must be flat")
    ap.add_argument("--flat-tolerance", type=float, default=0.05)
    ap.add_argument("--plot", help="write an SVG plot here")
    ap.add_argument("--json", help="write the samples and counters here")
    args = ap.parse_args()

    exe = os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus"))
    port = 18000 + os.getpid() % 2000
    base = f"http://127.0.0.1:{port}"
    cmd = [exe, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
           "--max-waiting", "8", "--max-num-seqs", "16", "--kv-cache-memory", "256MiB",
           "--max-model-len", "2048"] + args.server_args.split()
    log(" ".join(cmd))
    server_log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"soak-{port}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=server_log, stderr=subprocess.STDOUT)
    failures = []
    try:
        t_ready = time.time() + 180
        while True:
            if proc.poll() is not None:
                sys.exit(f"server exited with {proc.returncode} before it was ready")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > t_ready:
                sys.exit("server not ready after 180 s")
            time.sleep(0.2)
        text = " ".join(random.Random(1).choice(WORDS) for _ in range(400))
        prefix = httpx.post(base + "/tokenize", json={"prompt": text}, timeout=30).json()["tokens"][:200]

        counters = Counters()
        t0 = time.time()
        deadline = t0 + args.duration
        threads = [threading.Thread(target=worker, args=(base, 1000 + i, deadline, counters, prefix))
                   for i in range(args.workers)]
        threads.append(threading.Thread(target=burster, args=(base, deadline, counters)))
        for t in threads:
            t.start()
        samples = []
        fds_idle_before = proc_sample(proc.pid)[1]
        while time.time() < deadline and proc.poll() is None:
            time.sleep(args.sample_every)
            rss, fds = proc_sample(proc.pid)
            m = metrics(base)
            samples.append({"t": time.time() - t0, "rss": rss, "fds": fds,
                            "kv_resident": m["omnibus:kv_cache_resident_bytes"],
                            "kv_usage": m["omnibus:kv_cache_usage_perc"],
                            "running": m["omnibus:num_requests_running"],
                            "waiting": m["omnibus:num_requests_waiting"], **counters.snapshot()})
        for t in threads:
            t.join()
        if proc.poll() is not None:
            failures.append(f"server died with {proc.returncode}")
        else:
            idle_deadline = time.time() + 60
            while True:
                m = metrics(base)
                if m["omnibus:num_requests_running"] == 0 and m["omnibus:kv_cache_usage_perc"] == 0:
                    break
                if time.time() > idle_deadline:
                    failures.append(f"not idle 60 s after the load stopped: {m}")
                    break
                time.sleep(0.2)
            time.sleep(0.5)
            m = metrics(base)
            if m.get("omnibus:kv_integrity_checks_total", 0) <= 0:
                failures.append("no KV integrity check ran")
            rss, fds = proc_sample(proc.pid)
            if abs(fds - fds_idle_before) > 2:
                failures.append(f"open fds idle after the load {fds}, before it {fds_idle_before}")
            samples.append({"t": time.time() - t0, "rss": rss, "fds": fds, "kv_usage": m["omnibus:kv_cache_usage_perc"],
                            "kv_resident": m["omnibus:kv_cache_resident_bytes"],
                            "running": 0, "waiting": 0, **counters.snapshot()})

        c = counters.snapshot()
        if c["unexpected"]:
            failures.append(f"{c['unexpected']} unexpected errors, first: {counters.errors[:5]}")
        for s in samples:
            s["heap"] = s["rss"] - s["kv_resident"]
        window = [s for s in samples[:-1] if s["t"] >= args.duration * (1 - args.flat_window)]
        q = max(1, len(window) // 4)
        flat = {}
        for key, pick, slack in (("heap", max, 0), ("fds", min, 2)):
            first = pick(s[key] for s in window[:q]) if window else 0
            last = pick(s[key] for s in window[-q:]) if window else 0
            flat[key] = last / max(first, 1) - 1
            if last > first * (1 + args.flat_tolerance) + slack:
                failures.append(f"{key} not flat over the last {100 * args.flat_window:.0f}% of the run: "
                                f"{pick.__name__} {first} in its first quarter, {last} in its last")

        # Table: about ten rows.
        print(f"soak: {args.duration:.0f} s, {args.workers} workers + bursts of 24, "
              f"server {' '.join(cmd[2:])}\n")
        print("| t s | ok | cancelled | rejected 4xx | refused 503 | unexpected | RSS MiB | of it KV pool MiB "
              "| fds | KV usage | running | waiting |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        stride = max(1, len(samples) // 10)
        for s in samples[::stride] + ([samples[-1]] if (len(samples) - 1) % stride else []):
            print(f"| {s['t']:.0f} | {s['ok']} | {s['cancelled']} | {s['rejected_4xx']} | {s['refused_503']} | "
                  f"{s['unexpected']} | {s['rss'] / 2**20:.1f} | {s['kv_resident'] / 2**20:.1f} | {s['fds']} | {100 * s['kv_usage']:.1f}% | "
                  f"{s['running']:.0f} | {s['waiting']:.0f} |")
        print(f"\nover the last {100 * args.flat_window:.0f}% of the run, last quarter vs first: RSS less the "
              f"KV pool (peaks) {100 * flat['heap']:+.1f}%, open fds (floors) {100 * flat['fds']:+.1f}%; "
              f"open fds idle before / after the load {fds_idle_before} / {samples[-1]['fds']}; KV usage after the load "
              f"{100 * samples[-1]['kv_usage']:.1f}%")
        if args.plot:
            spec = {"title": f"omnibus soak ({args.duration / 60:.0f} min)", "x_label": "seconds",
                    "y_label": "RSS MiB / open fds / KV usage %", "numeric_x": True,
                    "series": [{"name": "RSS MiB", "points": [[round(s["t"], 1), s["rss"] / 2**20] for s in samples]},
                               {"name": "RSS less KV pool MiB",
                                "points": [[round(s["t"], 1), s["heap"] / 2**20] for s in samples]},
                               {"name": "open fds", "points": [[round(s["t"], 1), s["fds"]] for s in samples]},
                               {"name": "KV usage %", "points": [[round(s["t"], 1), 100 * s["kv_usage"]] for s in samples]}]}
            with open(args.plot, "w") as f:
                f.write(render(spec))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "samples": samples, "counters": c,
                           "errors": counters.errors, "failures": failures}, f, indent=1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=60)
                if rc != 0:
                    failures.append(f"server exited {rc} on SIGTERM")
            except subprocess.TimeoutExpired:
                proc.kill()
                failures.append("server did not exit within 60 s of SIGTERM")
        server_log.close()
    for f in failures:
        log("FAIL: " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
