"""The endpoints a router reads from an omnibus worker (vllm-router, SGLang's
router): /get_load, /get_server_info, /server_info, /get_model_info, and the
cache control a router or operator sends: /flush_cache (/reset_prefix_cache),
with /v1/engine/kv_blocks showing the prefix cache's block hashes."""
import json
import time

import httpx

PROMPT = "The history of the printing press begins in " * 12  # several full KV blocks


def complete(base_url, prompt=PROMPT, max_tokens=2):
    r = httpx.post(base_url + "/v1/completions", timeout=60,
                   json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def kv_blocks(base_url):
    r = httpx.get(base_url + "/v1/engine/kv_blocks", timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["n_cached"] == len(body["block_hashes"])
    assert all(isinstance(h, int) and 0 <= h < 2**64 for h in body["block_hashes"])
    return body


def test_get_load_counts_running_and_waiting(server):
    server.wait_idle()
    idle = httpx.get(server.base_url + "/get_load", timeout=10).json()
    assert idle["load"] == 0
    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=60,
                      json={"prompt": "Count: one, two,", "max_tokens": 400, "stream": True,
                            "ignore_eos": True}) as r:
        lines = r.iter_lines()  # kept: a dropped generator closes the stream
        next(lines)  # the stream has started: the request runs
        # The engine publishes its counts after each step: the first step's may lag the first bytes.
        deadline = time.time() + 10
        while (busy := httpx.get(server.base_url + "/get_load", timeout=10).json())["load"] == 0:
            assert time.time() < deadline, "the running request never showed in /get_load"
            time.sleep(0.01)
        assert busy["load"] >= 1
        assert busy["load"] == busy["num_requests_running"] + busy["num_requests_waiting"]
    server.wait_idle()  # closing the stream aborted the request


def test_server_info_describes_engine_and_kv_pool(server):
    state = httpx.get(server.base_url + "/v1/engine/state", timeout=10).json()
    for path in ("/get_server_info", "/server_info"):
        info = httpx.get(server.base_url + path, timeout=10).json()
        assert info["dp_size"] == 1  # what vllm-router --dp-aware parses
        assert info["engine"] == "omnibus"
        assert info["max_model_len"] == 2048 == state["max_model_len"]
        assert info["max_num_seqs"] == state["max_num_seqs"]
        kv = info["kv_cache"]
        assert kv["block_size"] == state["block_size"]
        assert kv["num_blocks"] == state["kv_blocks_total"]
        assert kv["num_tokens"] == kv["num_blocks"] * kv["block_size"]
        assert 0 < kv["bytes"] <= 256 * 2**20
        assert kv["dtype"] == "f16" and kv["prefix_caching"] is True
        assert info["model_path"].endswith(".gguf")
        assert info["isa"] in ("scalar", "avx2", "avx-vnni", "avx512", "amx")  # kernels/cpu_features.h
        # A default server (--kv-role both, no --kv-transfer) has no KV transfer (docs/security.md).
        assert info["kv_transfer"] is None


def test_model_info(server):
    info = httpx.get(server.base_url + "/get_model_info", timeout=10).json()
    assert info["is_generation"] is True
    assert info["architecture"] == "llama"
    assert info["model_path"].endswith(".gguf")
    assert info["vocab_size"] == 49152


def test_health_generate_runs_the_engine(server):
    server.wait_idle()
    steps = httpx.get(server.base_url + "/v1/engine/state", timeout=10).json()["engine_steps"]
    r = httpx.get(server.base_url + "/health_generate", timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    server.wait_idle()
    assert httpx.get(server.base_url + "/v1/engine/state", timeout=10).json()["engine_steps"] == steps + 1


def test_router_endpoints_reject_other_methods(server):
    r = httpx.post(server.base_url + "/get_load", timeout=10)
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    r = httpx.get(server.base_url + "/flush_cache", timeout=10)
    assert r.status_code == 405


def test_flush_cache_drops_the_prefix_cache(server):
    complete(server.base_url)
    server.wait_idle()
    assert kv_blocks(server.base_url)["n_cached"] >= 4
    r = httpx.post(server.base_url + "/flush_cache", timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["flushed"] is True
    assert kv_blocks(server.base_url)["n_cached"] == 0
    # The prompt is computed again, then cached again: the same hashes as before.
    first = complete(server.base_url)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    server.wait_idle()
    before = set(kv_blocks(server.base_url)["block_hashes"])
    assert httpx.post(server.base_url + "/reset_prefix_cache", timeout=30).status_code == 200
    complete(server.base_url)
    server.wait_idle()
    assert set(kv_blocks(server.base_url)["block_hashes"]) == before


def test_flush_cache_is_refused_while_requests_run(server):
    complete(server.base_url)
    with httpx.stream("POST", server.base_url + "/v1/completions", timeout=60,
                      json={"prompt": "Count: one, two,", "max_tokens": 400, "stream": True,
                            "ignore_eos": True}) as r:
        lines = r.iter_lines()  # kept: a dropped generator closes the stream
        next(lines)
        refused = httpx.post(server.base_url + "/flush_cache", timeout=30)
        assert refused.status_code == 409
        err = refused.json()["error"]
        assert err["code"] == "requests_running" and "running" in err["message"]
        assert kv_blocks(server.base_url)["n_cached"] > 0  # nothing was dropped
    server.wait_idle()
    assert httpx.post(server.base_url + "/flush_cache", timeout=30).status_code == 200


def test_metrics_and_health_unchanged_by_flush(server):
    server.wait_idle()
    assert httpx.post(server.base_url + "/flush_cache", timeout=30).status_code == 200
    assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    assert json.loads(httpx.get(server.base_url + "/get_load", timeout=10).text)["load"] == 0
