#!/usr/bin/env python3
"""What one KV transfer costs: bytes per block for each KV format, and the time to
pull a prompt's blocks against the time to prefill it (docs/disaggregation.md).

For each --kv-cache-dtype: a prefill worker and a decode worker (`omnibus serve
--kv-role prefill|decode`, -t 1 each, no router), then for each of --repeats
distinct prompts of --prompt-tokens tokens: the prefill request
(kv_transfer_params.do_remote_decode, max_tokens 1; its wall time is the
prefill time) and the decode request with the returned kv_transfer_params
(max_tokens 1); the pull time is the decode worker's
omnibus:kv_transfer_seconds (sum over count), bytes and blocks from
omnibus:kv_transfer_{bytes,blocks}_total.

    OMNIBUS_MODELS_DIR=$PWD/models .venv/bin/python tools/bench/kv_transfer.py \\
        --model smollm2-135m --dtypes f16,q8,kivi2 --prompt-tokens 1024

UCX_TLS in the environment picks the transport (default: UCX's choice, shared
memory on one host; UCX_TLS=tcp for loopback TCP).
"""
import argparse
import json
import pathlib
import random
import sys
import tempfile
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from pd_harness import kv_security_args  # noqa: E402
from router_harness import Replica, free_port  # noqa: E402

WORDS = ("river stone lantern quiet orbit maple signal harbor velvet ember canyon meadow copper "
         "falcon glacier pepper thunder willow amber cobalt").split()


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def isa_tier():
    flags = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = line
            break
    return "avx512-vnni" if "avx512_vnni" in flags else "avx2" if "avx2" in flags else "scalar"


def metrics(url):
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("omnibus:kv_transfer_") and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0] + ("." + name.split('direction="')[1].split('"')[0] if "direction=" in name
                                      else "")] = float(value)
    return out


def prompt_of(tokenize_url, n_tokens, seed):
    rng = random.Random(seed)
    words = []
    while True:
        words += [rng.choice(WORDS) for _ in range(64)]
        n = len(httpx.post(tokenize_url + "/tokenize", json={"prompt": " ".join(words)}, timeout=30).json()["tokens"])
        if n >= n_tokens:
            break
    while n > n_tokens:  # trim to the exact length
        words.pop()
        n = len(httpx.post(tokenize_url + "/tokenize", json={"prompt": " ".join(words)}, timeout=30).json()["tokens"])
    return " ".join(words)


def run_dtype(model, dtype, n_tokens, repeats, log_dir):
    args = ["--kv-cache-memory", "256MiB", "--max-model-len", str(max(2048, n_tokens + 64)), "--kv-cache-dtype", dtype]
    args += kv_security_args(log_dir)
    p = Replica("prefill", log_dir, args + ["--kv-role", "prefill", "--kv-transfer-port", str(free_port())],
                model=model).start()
    d = Replica("decode", log_dir, args + ["--kv-role", "decode", "--kv-transfer-port", str(free_port())],
                model=model).start()
    try:
        p.wait_ready()
        d.wait_ready()
        prefill_s, n_blocks = [], 0
        before = metrics(d.url)
        for i in range(repeats):
            prompt = prompt_of(p.url, n_tokens, 1000 * i + len(dtype))
            t0 = time.perf_counter()
            r = httpx.post(p.url + "/v1/completions", timeout=300, json={
                "prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
            prefill_s.append(time.perf_counter() - t0)
            r.raise_for_status()
            params = r.json()["kv_transfer_params"]
            n_blocks += len(params["remote_block_ids"])
            r = httpx.post(d.url + "/v1/completions", timeout=300, json={
                "prompt": prompt, "max_tokens": 1, "kv_transfer_params": params})
            r.raise_for_status()
        after = metrics(d.url)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        pulled = delta["omnibus:kv_transfer_blocks_total.pulled"]
        assert pulled == n_blocks, (pulled, n_blocks, d.output())
        pull_s = delta["omnibus:kv_transfer_seconds_sum"] / delta["omnibus:kv_transfer_seconds_count"]
        return {"dtype": dtype, "blocks_per_prompt": n_blocks / repeats,
                "bytes_per_block": delta["omnibus:kv_transfer_bytes_total.pulled"] / pulled,
                "pull_ms": pull_s * 1e3, "prefill_ms": sum(prefill_s) / len(prefill_s) * 1e3}
    finally:
        p.stop()
        d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", default="f16,q8,kivi2")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="omnibus-kv-transfer-") as log_dir:
        rows = []
        for dt in a.dtypes.split(","):
            print(f"[{dt}] ...", file=sys.stderr, flush=True)
            rows.append(run_dtype(a.model, dt, a.prompt_tokens, a.repeats, log_dir))
    f16 = next((r for r in rows if r["dtype"] == "f16"), None)
    print(f"\nKV transfer of a {a.prompt_tokens}-token prompt, {a.model}, prefill -t 1 / decode -t 1; "
          f"{cpu_name()} ({isa_tier()} tier); UCX_TLS={__import__('os').environ.get('UCX_TLS', '(UCX default)')}\n")
    print("| KV dtype | blocks | bytes/block | fewer bytes than f16 | pull | prefill | pull / prefill |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{f16['bytes_per_block'] / r['bytes_per_block']:.2f}x" if f16 else "-"
        print(f"| {r['dtype']} | {r['blocks_per_prompt']:.0f} | {r['bytes_per_block']:,.0f} | {ratio} | "
              f"{r['pull_ms']:.1f} ms | {r['prefill_ms']:.0f} ms | {100 * r['pull_ms'] / r['prefill_ms']:.2f}% |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
