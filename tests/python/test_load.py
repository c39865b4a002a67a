"""Many streams at once: 256 concurrent streaming clients, 32 clients that drop
mid-stream, and SIGTERM with requests in flight: new requests get 503 while the
running ones finish (past the grace period: test_shutdown.py)."""
import asyncio
import contextlib
import json
import signal
import time

import httpx

from conftest import MODEL

N_CLIENTS = 256
MAX_TOKENS = 8


async def stream_one(client, i):
    body = {"model": MODEL, "prompt": f"Request {i}: tell me a story", "max_tokens": MAX_TOKENS, "stream": True,
            "ignore_eos": True, "temperature": 0.8, "seed": i, "stream_options": {"include_usage": True}}
    n_text_chunks, usage, finish, done = 0, None, None, False
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk["choices"]:
                n_text_chunks += 1
                finish = c["finish_reason"] or finish
    return n_text_chunks, usage, finish, done


def test_256_concurrent_streams(server):
    async def main():
        limits = httpx.Limits(max_connections=N_CLIENTS + 8, max_keepalive_connections=N_CLIENTS + 8)
        async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=300) as client:
            return await asyncio.gather(*(stream_one(client, i) for i in range(N_CLIENTS)))

    before = server.metrics()["omnibus:generation_tokens_total"]
    results = asyncio.run(main())
    assert len(results) == N_CLIENTS
    for n_chunks, usage, finish, done in results:
        assert done and finish == "length"
        assert usage["completion_tokens"] == MAX_TOKENS
        assert 1 <= n_chunks <= MAX_TOKENS  # a chunk per token, less when a character spans tokens
    m = server.wait_idle(timeout=30)
    assert m["omnibus:generation_tokens_total"] - before == N_CLIENTS * MAX_TOKENS
    assert m["omnibus:num_requests_running"] == 0
    assert m["omnibus:kv_cache_usage_perc"] == 0


def test_32_clients_disconnect_mid_stream(server):
    async def drop_after_first_token(client, i):
        body = {"prompt": f"Disconnect {i}", "max_tokens": 1000, "ignore_eos": True, "stream": True}
        async with client.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    return True  # leaving the block closes the connection mid-stream
        return False

    async def main():
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=120) as client:
            return await asyncio.gather(*(drop_after_first_token(client, i) for i in range(32)))

    assert all(asyncio.run(main()))
    m = server.wait_idle(timeout=30)  # aborted: blocks back in the pool
    assert m["omnibus:kv_cache_usage_perc"] == 0
    assert m['omnibus:request_success_total{finished_reason="abort"}'] >= 32
    r = httpx.post(server.base_url + "/v1/completions", json={"prompt": "Still alive?", "max_tokens": 3}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1


def wait_until_draining(s, timeout=30):
    """The drain handshake: /health answers 503 from the moment the server drains
    (200 before). Probes until it does, bounded like a readiness probe."""
    deadline = time.time() + timeout
    while True:
        r = httpx.get(s.base_url + "/health", timeout=10)
        if r.status_code == 503:
            assert "shutting down" in r.json()["error"]["message"]
            return
        assert r.status_code == 200, r.text
        assert time.time() < deadline, f"/health still 200 {timeout} s after SIGTERM:\n{s.output()}"
        time.sleep(0.01)


def read_stream(lines):
    """The rest of an SSE stream: (chunks, saw [DONE])."""
    rest = list(lines)
    return [json.loads(x[6:]) for x in rest if x.startswith("data: {")], "data: [DONE]" in rest


def open_streams(stack, s, n, max_tokens):
    """n streaming completions, each read up to its first token: all are running."""
    out = []
    for i in range(n):
        body = {"prompt": f"Slow one {i}", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        r = stack.enter_context(httpx.stream("POST", s.base_url + "/v1/completions", json=body, timeout=300))
        assert r.status_code == 200
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: {"))
        out.append(lines)
    return out


def test_sigterm_refuses_new_requests_while_running_ones_finish(start_server):
    s = start_server("--grace-period", "300", "--kv-cache-memory", "64MiB", "--max-model-len", "512")
    max_tokens = 400
    with contextlib.ExitStack() as stack:
        streams = open_streams(stack, s, 3, max_tokens)
        s.proc.send_signal(signal.SIGTERM)
        wait_until_draining(s)
        # Sent during the drain: refused with 503, over a connection the server still accepts.
        refused = httpx.post(s.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
        assert refused.status_code == 503, refused.text
        assert "shutting down" in refused.json()["error"]["message"]
        # The in-flight streams run to their end.
        for lines in streams:
            chunks, done = read_stream(lines)
            assert done
            assert chunks[-1]["usage"]["completion_tokens"] == max_tokens
            finishes = [c["finish_reason"] for x in chunks for c in x["choices"] if c["finish_reason"]]
            assert finishes == ["length"]
    assert s.proc.wait(timeout=60) == 0
    out = s.output()
    assert "no new requests" in out and "stopped" in out and "grace period over" not in out
