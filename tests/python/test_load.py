"""Many streams at once: 256 concurrent streaming clients, 32 clients that drop
mid-stream, and a graceful SIGTERM with a request in flight."""
import asyncio
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


def test_sigterm_finishes_running_requests_then_exits(start_server):
    s = start_server("--grace-period", "60", "--kv-cache-memory", "64MiB", "--max-model-len", "512")
    body = {"prompt": "Slow one", "max_tokens": 40, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", s.base_url + "/v1/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: {"))
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # New generation requests are refused while draining (or the listener is already closed).
        try:
            refused = httpx.post(s.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
            assert refused.status_code == 503
        except httpx.TransportError:
            pass
        rest = list(lines)
    assert rest[-1] == "data: [DONE]" or "data: [DONE]" in rest
    chunks = [json.loads(x[6:]) for x in rest if x.startswith("data: {")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert s.proc.wait(timeout=30) == 0
    assert "stopped" in s.output()
