"""Raw HTTP checks: SSE framing, the plain endpoints, /metrics, and every error case."""
import json
import socket

import httpx
import pytest

from conftest import MODEL


def error_of(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert isinstance(e["message"], str) and e["message"]
    return e


def test_health_and_unknown_route(base_url):
    assert httpx.get(base_url + "/health").json() == {"status": "ok"}
    e = error_of(httpx.get(base_url + "/v1/nope"), 404)
    assert e["type"] == "invalid_request_error"
    error_of(httpx.post(base_url + "/nope", json={}), 404)
    error_of(httpx.get(base_url + "/v1/completions"), 405)


def test_sse_framing(base_url):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "stream": True, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base_url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")
    assert events[-1] == ""
    events = events[:-1]
    for ev in events:
        assert ev.startswith("data: ") and "\n" not in ev, repr(ev)
    chunks = [json.loads(ev[6:]) for ev in events[:-1]]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    text_chunks = [c for c in chunks if c["choices"]]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" in c and c["usage"] is None for c in text_chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_tokenize_detokenize_tokenizer_info(base_url):
    t = httpx.post(base_url + "/tokenize", json={"prompt": "Hello world"}).json()
    assert t["tokens"] and t["count"] == len(t["tokens"])
    assert httpx.post(base_url + "/detokenize", json={"tokens": t["tokens"]}).json() == {"prompt": "Hello world"}
    special = httpx.post(base_url + "/tokenize", json={"prompt": "<|im_start|>", "add_special_tokens": False}).json()
    assert len(special["tokens"]) == 1
    info = httpx.get(base_url + "/tokenizer_info").json()
    assert info["eos_token"] and "chat_template" in info and "bos_token" in info and "pad_token" in info
    error_of(httpx.post(base_url + "/detokenize", json={"tokens": [-1]}), 400)
    error_of(httpx.post(base_url + "/detokenize", json={"tokens": "abc"}), 400)
    error_of(httpx.post(base_url + "/tokenize", json={"prompt": 5}), 400)


def test_engine_state(base_url):
    s = httpx.get(base_url + "/v1/engine/state").json()
    assert s["state"] == "ready" and s["model"] == MODEL
    assert s["kv_blocks_total"] > 0 and s["max_model_len"] == 2048
    for k in ("num_requests_running", "num_requests_waiting", "kv_blocks_used", "generation_tokens_per_s",
              "num_preemptions", "engine_steps"):
        assert k in s
    assert s["kv_residual_steals"] == 0 and s["max_num_seqs"] >= 1


def test_metrics_exposition(server):
    httpx.post(server.base_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "ignore_eos": True},
               timeout=60)
    text = httpx.get(server.base_url + "/metrics").text
    for name, kind in [("omnibus:num_requests_running", "gauge"), ("omnibus:num_requests_waiting", "gauge"),
                       ("omnibus:kv_cache_usage_perc", "gauge"), ("omnibus:num_preemptions_total", "counter"),
                       ("omnibus:prompt_tokens_total", "counter"), ("omnibus:generation_tokens_total", "counter"),
                       ("omnibus:time_to_first_token_seconds", "histogram"),
                       ("omnibus:time_per_output_token_seconds", "histogram"),
                       ("omnibus:e2e_request_latency_seconds", "histogram"),
                       ("omnibus:request_queue_time_seconds", "histogram")]:
        assert f"# TYPE {name} {kind}\n" in text, name
    m = server.metrics()
    assert m["omnibus:generation_tokens_total"] >= 3
    assert m["omnibus:time_to_first_token_seconds_count"] >= 1
    assert m['omnibus:time_to_first_token_seconds_bucket{le="+Inf"}'] == m["omnibus:time_to_first_token_seconds_count"]


def post(base_url, path, body, **kw):
    return httpx.post(base_url + path, content=body if isinstance(body, (bytes, str)) else json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=60, **kw)


@pytest.mark.parametrize("body,param", [
    ('{"prompt": "x", "max_tokens": 3', None),              # malformed JSON
    ('[1, 2]', None),                                       # not an object
    ({"prompt": "x", "max_tokens": "3"}, "max_tokens"),     # wrong types
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "n": 2.5}, "n"),
    ({"prompt": "x", "stop": 7}, "stop"),
    ({"prompt": "x", "logprobs": True}, "logprobs"),
    ({"prompt": "x", "temperature": 2.5}, "temperature"),   # out of range
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "max_tokens": -5}, "max_tokens"),
    ({"prompt": "x", "n": 1000}, "n"),
    ({"prompt": "x", "logprobs": 50}, "logprobs"),
    ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": "x", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),  # as vLLM: not streamed
    ({"prompt": "x", "presence_penalty": -9}, "presence_penalty"),
    ({"prompt": "x", "logit_bias": {"999999": 1}}, "logit_bias"),
    ({"prompt": [1, 99999999]}, "prompt"),
    ({"prompt": ""}, "prompt"),                             # empty prompt
    ({"prompt": []}, "prompt"),
    ({}, "prompt"),
    ({"prompt": "x", "max_tokens": 4000}, "prompt"),        # too long for the context (2048)
    ({"prompt": "word " * 3000, "max_tokens": 1}, "prompt"),
])
def test_completion_400(base_url, body, param):
    e = error_of(post(base_url, "/v1/completions", body), 400)
    assert e["type"] == "invalid_request_error"
    if param:
        assert e["param"] == param, e


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}, "messages"),
])
def test_chat_400(base_url, body, param):
    e = error_of(post(base_url, "/v1/chat/completions", body), 400)
    assert e["param"] == param, e


def test_prompt_logprobs(base_url):
    """vLLM's prompt_logprobs: per prompt token (none for the first) a dict
    token id -> {logprob, rank, decoded_token} holding the token itself and the
    top k; echo + logprobs reports the same numbers (one engine computation)."""
    prompt = "The capital of France is Paris"
    ids = post(base_url, "/tokenize", {"prompt": prompt}).json()["tokens"]
    r = post(base_url, "/v1/completions", {"prompt": prompt, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    pl = body["choices"][0]["prompt_logprobs"]
    assert len(pl) == len(ids) == body["usage"]["prompt_tokens"]
    assert pl[0] is None
    for tok, d in zip(ids[1:], pl[1:]):
        own = d[str(tok)]
        assert own["logprob"] <= 0 and own["rank"] >= 1
        assert own["decoded_token"] == httpx.post(base_url + "/detokenize", json={"tokens": [tok]}).json()["prompt"]
        assert sorted(e["rank"] for e in d.values() if e["rank"] <= 3) == [1, 2, 3]
        assert len(d) == (3 if own["rank"] <= 3 else 4)
        by_rank = sorted(d.values(), key=lambda e: e["rank"])
        assert [e["logprob"] for e in by_rank] == sorted((e["logprob"] for e in d.values()), reverse=True)

    echo = post(base_url, "/v1/completions", {"prompt": prompt, "max_tokens": 2, "temperature": 0, "echo": True,
                                              "logprobs": 3}).json()
    lp = echo["choices"][0]["logprobs"]
    assert lp["token_logprobs"][:len(ids)] == [None] + [d[str(t)]["logprob"] for t, d in zip(ids[1:], pl[1:])]
    assert echo["choices"][0]["prompt_logprobs"] == pl  # vLLM: echo + logprobs k scores the prompt with k too
    assert echo["choices"][0]["text"] == prompt + body["choices"][0]["text"]

    chat = post(base_url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                                                   "prompt_logprobs": 0}).json()
    assert len(chat["prompt_logprobs"]) == chat["usage"]["prompt_tokens"]
    assert chat["prompt_logprobs"][0] is None
    assert all(len(d) == 1 for d in chat["prompt_logprobs"][1:])


def test_context_error_code(base_url):
    e = error_of(post(base_url, "/v1/completions", {"prompt": "x", "max_tokens": 4000}), 400)
    assert e["code"] == "context_length_exceeded"


def test_unknown_model_404(base_url):
    e = error_of(post(base_url, "/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404)
    assert e["code"] == "model_not_found"


def test_garbage_http_does_not_crash(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        s.recv(4096)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{\"pro")
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_keep_alive_reuses_connection(base_url):
    with httpx.Client(base_url=base_url, timeout=60) as c:
        for _ in range(3):
            assert c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2}).status_code == 200
            with c.stream("POST", "/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "stream": True}) as r:
                assert r.read().endswith(b"data: [DONE]\n\n")
            assert c.get("/v1/models").status_code == 200


@pytest.fixture(scope="module")
def guarded(start_server):
    """A server with an API key, a small body limit and a waiting bound of 1 with one sequence at a time."""
    return start_server("--api-key", "sekret", "--max-body-bytes", "4096", "--max-waiting", "1",
                        "--max-num-seqs", "1", "--kv-cache-memory", "64MiB", "--max-model-len", "1024")


def test_401_with_api_key(guarded):
    url = guarded.base_url
    assert httpx.get(url + "/health").status_code == 200  # stays open
    assert httpx.get(url + "/metrics").status_code == 200
    e = error_of(httpx.get(url + "/v1/models"), 401)
    assert e["type"] == "authentication_error"
    error_of(httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    error_of(httpx.post(url + "/v1/completions", json={"prompt": "x"}), 401)
    ok = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer sekret"})
    assert ok.status_code == 200


def test_413_body_limit(guarded):
    big = json.dumps({"prompt": "x" * 10000})
    e = error_of(httpx.post(guarded.base_url + "/v1/completions", content=big,
                            headers={"Authorization": "Bearer sekret", "Content-Type": "application/json"}), 413)
    assert e["type"] == "invalid_request_error"
    assert httpx.get(guarded.base_url + "/health").status_code == 200


def test_503_when_the_queue_is_full(guarded):
    auth = {"Authorization": "Bearer sekret"}
    long_body = {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=guarded.base_url, headers=auth, timeout=120) as c:
        with c.stream("POST", "/v1/completions", json=long_body) as running:
            assert running.status_code == 200
            lines = running.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # it runs: one sequence slot taken
            with httpx.Client(base_url=guarded.base_url, headers=auth, timeout=120) as c2:
                with c2.stream("POST", "/v1/completions", json=long_body) as waiting:
                    assert waiting.status_code == 200  # accepted: waits for the slot
                    r = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
                    e = error_of(r, 503)
                    assert e["code"] is None or isinstance(e["code"], str)
    guarded.wait_idle()  # the streams were dropped: their requests were aborted
    with httpx.Client(base_url=guarded.base_url, headers=auth, timeout=120) as c3:
        assert c3.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def raw_request(body):
    b = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(b)) + b


def test_next_request_right_after_a_generation_response(server):
    """A keep-alive client may send its next request before the server has
    finished handling the previous response's completion (a race that once hung)."""
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(raw_request({"prompt": "Hi", "max_tokens": 2}))
            data = b""
            while b'"usage"' not in data:
                data += s.recv(65536)
            s.sendall(raw_request({"prompt": "Hi", "max_tokens": 2, "stream": True}))
            data = b""
            while not data.endswith(b"0\r\n\r\n"):
                chunk = s.recv(65536)
                assert chunk, "connection closed"
                data += chunk
            assert b"data: [DONE]" in data


def test_pipelined_requests(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(raw_request({"prompt": "Hi", "max_tokens": 2}) + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b'{"status":"ok"}' not in data:
            chunk = s.recv(65536)
            assert chunk, "connection closed"
            data += chunk
        assert data.count(b"HTTP/1.1 200 OK") == 2


@pytest.mark.parametrize("method,path,allow", [
    ("POST", "/health", "GET, HEAD"),
    ("DELETE", "/health", "GET, HEAD"),
    ("POST", "/metrics", "GET, HEAD"),
    ("POST", "/", "GET, HEAD"),
    ("PUT", "/v1/models", "GET, HEAD"),
    ("GET", "/v1/completions", "POST"),
    ("GET", "/tokenize", "POST"),
])
def test_405_names_the_allowed_methods(base_url, method, path, allow):
    e = error_of(httpx.request(method, base_url + path, timeout=60), 405)
    assert e["code"] == "method_not_allowed" and allow in e["message"]
    assert httpx.request(method, base_url + path, timeout=60).headers["allow"] == allow


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/json"])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"])
def test_415_for_a_body_that_is_not_json(base_url, path, content_type):
    r = httpx.post(base_url + path, content=json.dumps({"prompt": "x", "max_tokens": 1}),
                   headers={"Content-Type": content_type}, timeout=60)
    e = error_of(r, 415)
    assert e["code"] == "unsupported_media_type"
    assert "application/json" in e["message"] and content_type in e["message"]


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", None])
def test_json_content_types_and_none_are_accepted(base_url, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = httpx.post(base_url + "/v1/completions", content=json.dumps({"prompt": "Hi", "max_tokens": 1}),
                   headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(guarded, scheme):
    ok = httpx.get(guarded.base_url + "/v1/models", headers={"Authorization": f"{scheme} sekret"})
    assert ok.status_code == 200, ok.text
    error_of(httpx.get(guarded.base_url + "/v1/models", headers={"Authorization": f"{scheme} SEKRET"}), 401)


def test_431_for_an_oversized_header_block(base_url):
    headers = {f"X-Filler-{i}": "x" * 1000 for i in range(80)}  # 80 KB of headers, over the 64 KiB limit
    e = error_of(httpx.get(base_url + "/v1/models", headers=headers, timeout=60), 431)
    assert e["code"] == "request_header_fields_too_large" and "header" in e["message"]
    assert httpx.get(base_url + "/health", timeout=60).status_code == 200
