"""The prefix cache's disk tier (--kv-offload-dir) across a server restart: a
long prompt served by one server is answered by the next one on the same
directory from blocks loaded from disk, with the same text, its prefix reported
as cached, and the disk tier's hits on /metrics."""
import re
import signal
import threading
import time

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


def complete(base_url, prompt=PROMPT):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0}
    r = httpx.post(base_url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def serve(tmp_path, name, kv_dir):
    s = Server(ARGS + (("--kv-offload-dir", str(kv_dir)) if kv_dir else ()), tmp_path / f"{name}.log")
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


# Distinct long prompts (no shared blocks), so a workload of them keeps the disk tier writing.
KILL_PROMPTS = [f"Ledger {i}: " + " ".join(f"item{i}x{j}" for j in range(80)) for i in range(12)]


def test_sigkill_while_writing_leaves_no_corrupt_block(tmp_path):
    """A server killed (SIGKILL, no clean-up) while its disk tier writes leaves no file a later
    server loads wrongly: the restart skips nothing as corrupt, clears the partial writes, loads what
    was written whole, and answers every prompt with the text of a server that never had a disk tier."""
    clean = serve(tmp_path, "clean", None)
    try:
        want = [complete(clean.base_url, p)["choices"][0]["text"] for p in KILL_PROMPTS]
    finally:
        assert clean.stop() == 0

    kv_dir = tmp_path / "kv"
    victim = serve(tmp_path, "victim", kv_dir)
    errors = []

    def send(p):
        try:
            complete(victim.base_url, p)
        except httpx.HTTPError as e:  # the kill cuts these off
            errors.append(e)

    # One prompt's blocks whole on disk first (every queued write done), so the restart has a chain
    # to load; then the others, and the kill lands while their blocks are being written.
    complete(victim.base_url, KILL_PROMPTS[0])
    deadline = time.time() + 120
    while True:
        base = victim.base_url
        stored = sum(metric(base, "omnibus:kv_disk_stored_blocks_total", f'source="{s}"') for s in ("finished", "evicted"))
        written = metric(base, "omnibus:kv_disk_written_blocks_total")
        if stored > 0 and written == stored:
            break
        assert time.time() < deadline, victim.output()
        time.sleep(0.01)
    senders = [threading.Thread(target=send, args=(p,)) for p in KILL_PROMPTS[1:]]
    for t in senders:
        t.start()
    while True:
        m = victim.metrics()
        if m["omnibus:kv_disk_written_blocks_total"] > written and m["omnibus:num_requests_running"] > 0:
            break
        assert time.time() < deadline and victim.proc.poll() is None, victim.output()
        time.sleep(0.01)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    for t in senders:
        t.join()
    victim.log.close()
    assert errors, "the kill should have cut requests off"
    assert list(kv_dir.rglob("*.kvb")), "no block file was written before the kill"

    restarted = serve(tmp_path, "restarted", kv_dir)
    try:
        got = [complete(restarted.base_url, p)["choices"][0]["text"] for p in KILL_PROMPTS]
        base = restarted.base_url
        assert metric(base, "omnibus:kv_disk_skipped_files_total", 'reason="corrupt"') == 0
        assert metric(base, "omnibus:kv_disk_hit_blocks_total") > 0, "nothing written before the kill was loaded"
    finally:
        assert restarted.stop() == 0
    assert got == want
    assert not list(kv_dir.rglob("*.tmp")), "a partial write outlived the restart"
