"""Shutdown that tells clients. Past --grace-period, or on a second
SIGTERM/SIGINT, the running requests are aborted: a stream's unfinished choice
gets a last chunk with finish_reason "abort", then [DONE]; a non-streamed
request gets a 503 in OpenAI's error shape; and the process exits 1 because
something was cut (test_load.py checks the exit 0 when everything finished).

These servers are started here, not by the session's start_server fixture,
which requires exit 0."""
import concurrent.futures
import contextlib
import json
import signal
import time

import httpx
import pytest

from conftest import Server

LONG = 1500  # tokens: far longer than the test lets any request run


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(*args):
        s = Server(list(args) + ["--kv-cache-memory", "64MiB", "--max-model-len", "2048", "--enable-debug-endpoints"],
                   tmp_path / f"serve{len(servers)}.log")
        servers.append(s)
        s.wait_ready()
        return s

    yield start
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        s.log.close()


def open_stream(stack, s, path, body):
    """A streaming request, read up to its first token chunk: it is running."""
    r = stack.enter_context(httpx.stream("POST", s.base_url + path, json={**body, "stream": True}, timeout=120))
    assert r.status_code == 200
    lines = r.iter_lines()
    next(line for line in lines if line.startswith("data: {") and '"role"' not in line)
    return lines


def wait_generations(s, n, timeout=60):
    """Until n generation calls are running (the engine-state handshake)."""
    deadline = time.time() + timeout
    while httpx.get(s.base_url + "/v1/engine/state", timeout=10).json()["http_generations_active"] < n:
        assert time.time() < deadline, s.output()
        time.sleep(0.02)


def wait_draining(s, timeout=30):
    deadline = time.time() + timeout
    while httpx.get(s.base_url + "/health", timeout=10).status_code != 503:
        assert time.time() < deadline, s.output()
        time.sleep(0.02)


def check_stream_aborted(lines):
    rest = [x for x in lines if x]
    assert rest and rest[-1] == "data: [DONE]", rest[-3:]
    chunks = [json.loads(x[6:]) for x in rest if x.startswith("data: {")]
    finishes = [c["finish_reason"] for x in chunks for c in x["choices"] if c["finish_reason"]]
    assert finishes == ["abort"], finishes
    assert chunks[-1]["usage"]["completion_tokens"] < LONG


def check_503(r):
    assert r.status_code == 503, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "service_unavailable"
    assert "shut down before this request finished" in body["error"]["message"]


def post_completion(s):
    return httpx.post(s.base_url + "/v1/completions", timeout=120,
                      json={"prompt": "Not streamed", "max_tokens": LONG, "ignore_eos": True})


def test_grace_period_expiry_tells_every_client_and_exits_1(serve):
    s = serve("--grace-period", "1")
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = open_stream(stack, s, "/v1/completions",
                             {"prompt": "Streamed", "max_tokens": LONG, "ignore_eos": True,
                              "stream_options": {"include_usage": True}})
        plain = pool.submit(post_completion, s)
        wait_generations(s, 2)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        check_stream_aborted(stream)
        check_503(plain.result(timeout=60))
    assert s.proc.wait(timeout=30) == 1
    assert time.time() - t0 < 15
    out = s.output()
    assert "grace period over" in out and "2 requests were cut short" in out, out


def test_second_signal_aborts_at_once_and_exits_1(serve):
    s = serve("--grace-period", "300")
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = open_stream(stack, s, "/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "Talk"}], "max_tokens": LONG,
                              "ignore_eos": True, "stream_options": {"include_usage": True}})
        plain = pool.submit(post_completion, s)
        wait_generations(s, 2)
        s.proc.send_signal(signal.SIGTERM)
        wait_draining(s)
        assert s.proc.poll() is None  # draining: the grace period is 300 s
        t0 = time.time()
        s.proc.send_signal(signal.SIGINT)
        check_stream_aborted(stream)
        check_503(plain.result(timeout=60))
    assert s.proc.wait(timeout=30) == 1
    assert time.time() - t0 < 15
    out = s.output()
    assert "second SIGINT" in out and "2 requests were cut short" in out, out
