"""Resident memory of a served model (model/model.h, model/weights.h): matmul
weights packed at load live on the heap and their file pages are released, so
the weights are resident once, not twice.

After loading gemma3-270m and serving one request, the server's VmRSS (read
from /proc/<pid>/status) stays within 1.3x the GGUF size plus the KV pool. The
pool is kept small (--kv-cache-memory) so that the bound is tight: the pool
holds at most that many bytes, an upper bound of what the request touched.
Before the release, RSS was about twice the file.
"""
import os
import pathlib

import httpx
import pytest

from conftest import ROOT

MODEL = "gemma3-270m"
KV_CACHE_MIB = 16


def model_path():
    models = pathlib.Path(os.environ.get("OMNIBUS_MODELS_DIR", ROOT / "models"))
    return models / f"{MODEL}.gguf"


def status_kib(pid, field):
    """A `field:  N kB` line of /proc/<pid>/status, in KiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.mark.skipif(not model_path().exists(), reason=f"{MODEL} is not installed")
def test_resident_memory_is_about_one_model_size(start_server):
    gguf_bytes = model_path().stat().st_size
    server = start_server("--kv-cache-memory", f"{KV_CACHE_MIB}MiB", "--max-model-len", "512",
                          "--max-num-seqs", "4", model=MODEL)
    body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}
    r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    server.wait_idle()

    rss = status_kib(server.proc.pid, "VmRSS") * 1024
    kv_bytes = KV_CACHE_MIB << 20
    bound = 1.3 * gguf_bytes + kv_bytes
    detail = (f"VmRSS {rss / 2**20:.1f} MiB (file pages {status_kib(server.proc.pid, 'RssFile') / 1024:.1f}"
              f" MiB, anonymous {status_kib(server.proc.pid, 'RssAnon') / 1024:.1f} MiB), GGUF"
              f" {gguf_bytes / 2**20:.1f} MiB, KV pool {KV_CACHE_MIB} MiB, bound {bound / 2**20:.1f} MiB")
    print(detail)
    assert rss <= bound, detail
