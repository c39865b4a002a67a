"""Prefix caching through the API: a repeated prompt reports its cached tokens
(usage.prompt_tokens_details.cached_tokens, as OpenAI's prompt caching does),
/metrics counts prefix-cache queries and hits, and the answer is unchanged."""
import re

import httpx

from conftest import MODEL

# Long enough for several full 16-token KV blocks.
PROMPT = ("You are a meticulous assistant. Answer briefly and precisely. " * 8) + "Question: what is two plus two?"


def metric(base_url, name):
    text = httpx.get(base_url + "/metrics").text
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def repeat_prompt(base_url):
    """Sends PROMPT twice (greedy); checks that the second reuses every full block
    but the one holding the last prompt token and answers the same. Returns its
    cached token count."""
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    first = httpx.post(base_url + "/v1/completions", json=body, timeout=120).json()
    second = httpx.post(base_url + "/v1/completions", json=body, timeout=120).json()
    prompt_tokens = second["usage"]["prompt_tokens"]
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert prompt_tokens - 16 <= cached < prompt_tokens, second["usage"]
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    return cached


def test_repeated_prompt_reports_cached_tokens(base_url):
    hits_before = metric(base_url, "omnibus:prefix_cache_hits_total")
    cached = repeat_prompt(base_url)
    assert metric(base_url, "omnibus:prefix_cache_hits_total") >= hits_before + cached
    assert 0 < metric(base_url, "omnibus:prefix_cache_hit_rate") <= 1


def test_queue_time_is_observed(base_url):
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    httpx.post(base_url + "/v1/completions", json=body, timeout=120).raise_for_status()
    assert metric(base_url, "omnibus:request_queue_time_seconds_count") >= 1


def test_kivi2_prefix_hit_keeps_the_answer(start_server):
    """kivi2 reads the block before a query's open one in fp16: a hit must still
    hold those rows (else it is cut back), and the answer does not change."""
    base_url = start_server("--kv-cache-dtype", "kivi2").base_url
    repeat_prompt(base_url)
    assert metric(base_url, "omnibus:kv_residual_steals_total") == 0
