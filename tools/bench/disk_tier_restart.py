#!/usr/bin/env python3
"""A shared system prompt across server restarts: omnibus's disk tier
(--kv-offload-dir) vs llama-server's slot save/restore (--slot-save-path),
same GGUF, same threads, same prompts (token ids).

Workload: a --prefix-len token system prompt (random ids) + a --turn-len token
user turn, one token generated; TTFT = the wall time of that request.
  cold:  a fresh server without any cache serves prompt i (N runs);
  warm:  a server served prompt 0 and stopped (omnibus: its blocks are on
         disk; llama-server: slot 0 saved to a file); then N times: a fresh
         server (llama-server: POST /slots/0?action=restore first, timed and
         counted in its TTFT, as a client must call it) serves prompt i.
llama-server's --cache-ram is host memory only: it does not survive a
restart, so it has no warm column here (it is the equivalent of omnibus's
pool prefix cache).

  .venv/bin/python tools/bench/disk_tier_restart.py -m models/smollm2-135m.gguf -t 2
"""
import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from serve_util import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Server:
    def __init__(self, cmd, log_path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "a")
        self.proc = subprocess.Popen(cmd + ["--port", str(self.port)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {self.proc.returncode} (log: {log_path})")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server not healthy in time")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request(kind, base, ids):
    t0 = time.perf_counter()
    if kind == "omnibus":
        r = httpx.post(base + "/v1/completions", json={"model": "m", "prompt": ids, "max_tokens": 1,
                                                      "temperature": 0}, timeout=600)
        r.raise_for_status()
        text = r.json()["choices"][0]["text"]
    else:
        r = httpx.post(base + "/completion", json={"prompt": ids, "n_predict": 1, "temperature": 0,
                                                  "cache_prompt": True}, timeout=600)
        text = r.json()["content"]
    r.raise_for_status()
    return time.perf_counter() - t0, text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prefix-len", type=int, default=2048)
    ap.add_argument("--turn-len", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--omnibus", default=os.environ.get("OMNIBUS_BIN", os.path.join(ROOT, "build", "omnibus")))
    ap.add_argument("--llama-server", default=os.environ.get(
        "LLAMA_SERVER", os.path.join(ROOT, ".ref", "build", "bin", "llama-server")))
    args = ap.parse_args()
    rng = random.Random(42)
    prefix = [rng.randrange(1000, 20000) for _ in range(args.prefix_len)]
    prompts = [prefix + [rng.randrange(1000, 20000) for _ in range(args.turn_len)] for _ in range(args.runs + 1)]
    work = tempfile.mkdtemp(prefix="disk_tier_restart_")
    log = os.path.join(work, "servers.log")
    ctx = str(args.prefix_len + args.turn_len + 64)
    results = {}
    try:
        for kind in ("omnibus", "llama-server"):
            cache_dir = os.path.join(work, kind)
            os.makedirs(cache_dir)
            if kind == "omnibus":
                base_cmd = [args.omnibus, "serve", "-m", args.model, "-t", str(args.threads),
                            "--max-model-len", ctx, "--kv-cache-memory", "512MiB", "--served-model-name", "m"]
                warm_cmd = base_cmd + ["--kv-offload-dir", cache_dir]
            else:
                base_cmd = [args.llama_server, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
                            "-c", ctx, "-np", "1", "--cache-ram", "0"]
                warm_cmd = base_cmd + ["--slot-save-path", cache_dir]
            cold, cold_text = [], []
            for i in range(1, args.runs + 1):
                s = Server(base_cmd, log)
                t, text = request(kind, s.base, prompts[i])
                s.stop()
                cold.append(t)
                cold_text.append(text)
            s = Server(warm_cmd, log)
            request(kind, s.base, prompts[0])
            if kind == "llama-server":
                httpx.post(s.base + "/slots/0?action=save", json={"filename": "sys.bin"}, timeout=600).raise_for_status()
            s.stop()
            warm, same = [], 0
            for i in range(1, args.runs + 1):
                s = Server(warm_cmd, log)
                t0 = time.perf_counter()
                if kind == "llama-server":
                    httpx.post(s.base + "/slots/0?action=restore", json={"filename": "sys.bin"},
                               timeout=600).raise_for_status()
                restore = time.perf_counter() - t0
                t, text = request(kind, s.base, prompts[i])
                s.stop()
                warm.append(restore + t)
                same += text == cold_text[i - 1]
            results[kind] = (statistics.median(cold), statistics.median(warm), same)
            print(f"{kind}: cold {cold}, warm {warm}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"prompt {args.prefix_len} shared + {args.turn_len} own tokens, 1 generated, {args.threads} threads, "
          f"{args.runs} runs each")
    print("| server | cold TTFT p50 (ms) | after restart TTFT p50 (ms) | ratio | same first token |")
    print("|---|---|---|---|---|")
    for kind, (c, w, same) in results.items():
        how = "--kv-offload-dir" if kind == "omnibus" else "--slot-save-path + restore"
        print(f"| {kind} ({how}) | {1e3 * c:.0f} | {1e3 * w:.0f} | {c / w:.1f}x | {same}/{args.runs} |")


if __name__ == "__main__":
    main()
