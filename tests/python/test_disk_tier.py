"""The prefix cache's disk tier (--kv-offload-dir) across a server restart: a
long prompt served by one server is answered by the next one on the same
directory from blocks loaded from disk, with the same text, its prefix reported
as cached, and the disk tier's hits on /metrics."""
import re

import httpx

from conftest import MODEL, Server

# Several hundred tokens: many full 16-token KV blocks.
PROMPT = ("You are a meticulous assistant. Answer briefly and precisely. " * 40) + "Question: what is two plus two?"
ARGS = ("--kv-cache-memory", "64MiB", "--max-model-len", "2048", "--max-num-seqs", "8")


def metric(base_url, name, labels=""):
    """The sample of `name` whose labels contain `labels` (e.g. 'tier="disk"')."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    for m in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} ([0-9.e+-]+)$", text, re.M):
        if labels in m.group(1):
            return float(m.group(2))
    raise AssertionError(f"{name}{{{labels}}} missing from /metrics")


def complete(base_url):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    r = httpx.post(base_url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def serve(tmp_path, name, kv_dir):
    s = Server(ARGS + ("--kv-offload-dir", str(kv_dir)), tmp_path / f"{name}.log")
    s.wait_ready()
    return s


def test_a_prefix_survives_a_restart(tmp_path):
    kv_dir = tmp_path / "kv"
    first_server = serve(tmp_path, "first", kv_dir)
    try:
        assert metric(first_server.base_url, "omnibus:kv_disk_enabled") == 1
        first = complete(first_server.base_url)
        assert metric(first_server.base_url, "omnibus:prefix_cache_tier_hits_total", 'tier="disk"') == 0
        assert metric(first_server.base_url, "omnibus:kv_disk_stored_blocks_total", 'source="finished"') > 0
        assert "kv disk tier:" in first_server.output()
    finally:
        assert first_server.stop() == 0
    assert list(kv_dir.rglob("*.kvb")), "no block file written"

    second_server = serve(tmp_path, "second", kv_dir)
    try:
        assert re.search(r"kv disk tier: .* [1-9][0-9]* blocks found", second_server.output())
        second = complete(second_server.base_url)
        assert second["choices"][0]["text"] == first["choices"][0]["text"]
        usage = second["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 16, usage
        base = second_server.base_url
        assert metric(base, "omnibus:prefix_cache_tier_hits_total", 'tier="disk"') >= usage["prompt_tokens"] - 16
        assert metric(base, "omnibus:kv_disk_hit_blocks_total") > 0
        assert metric(base, "omnibus:kv_disk_read_bytes_total") > 0
        assert metric(base, "omnibus:kv_disk_load_seconds_count") > 0
        assert metric(base, "omnibus:kv_disk_skipped_files_total", 'reason="corrupt"') == 0
    finally:
        assert second_server.stop() == 0
