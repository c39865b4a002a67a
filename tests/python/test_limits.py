"""Bounded responses (issue 21): --max-logprobs, --max-n and
--max-logprob-entries refuse, up front and with a 400 naming the limit and the
flag, requests whose answer would be unbounded. The RSS side (memory handed
back after a large response) is in test_memory.py."""
import httpx
import pytest


def error_400(r, param, *texts):
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert e["type"] == "invalid_request_error" and e["param"] == param, e
    for t in texts:
        assert t in e["message"], e["message"]
    return e


def completion(url, **body):
    return httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 1, **body}, timeout=120)


def chat(url, **body):
    return httpx.post(url + "/v1/chat/completions", timeout=120,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, **body})


def test_the_issue_spike_is_refused_at_once(base_url):
    """{"prompt": <~4000 words>, "max_tokens": 1, "echo": true, "logprobs": 20, "n": 128}: a
    50 KB request that built a 594 MB response."""
    r = completion(base_url, prompt="word " * 4000, echo=True, logprobs=20, n=128)
    error_400(r, "n", "at most 16", "--max-n")


@pytest.mark.parametrize("field,value,flag,limit", [
    ("n", 17, "--max-n", 16), ("best_of", 17, "--max-n", 16),
    ("logprobs", 21, "--max-logprobs", 20), ("prompt_logprobs", 21, "--max-logprobs", 20)])
def test_completion_defaults(base_url, field, value, flag, limit):
    error_400(completion(base_url, **{field: value}), field, f"at most {limit}", flag)


def test_chat_defaults(base_url):
    error_400(chat(base_url, logprobs=True, top_logprobs=21), "top_logprobs", "at most 20", "--max-logprobs")
    error_400(chat(base_url, n=17), "n", "at most 16", "--max-n")
    ok = chat(base_url, logprobs=True, top_logprobs=20, n=16)
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["choices"]) == 16


def test_entry_bound_at_the_defaults(base_url):
    # 16 choices x (1500 echoed + 1 generated + 1500 prompt_logprobs) x 21 > 1,000,000.
    prompt = list(range(100, 1600))
    e = error_400(completion(base_url, prompt=prompt, echo=True, logprobs=20, n=16), "logprobs",
                  "--max-logprob-entries", "1000000")
    assert e["code"] == "response_too_large"


@pytest.fixture(scope="module")
def tight(start_server):
    return start_server("--max-logprobs", "3", "--max-n", "2", "--max-logprob-entries", "1000",
                        "--kv-cache-memory", "64MiB", "--max-model-len", "1024")


def test_flags_set_the_limits(tight):
    url = tight.base_url
    error_400(completion(url, logprobs=4), "logprobs", "at most 3", "--max-logprobs")
    error_400(chat(url, logprobs=True, top_logprobs=4), "top_logprobs", "at most 3", "--max-logprobs")
    error_400(completion(url, n=3), "n", "at most 2", "--max-n")
    # 2 x (max_tokens 200) x (3 + 1) = 1600 entries > 1000; without logprobs none are counted.
    error_400(completion(url, n=2, logprobs=3, max_tokens=200), "logprobs", "limit of 1000", "--max-logprob-entries")
    error_400(chat(url, logprobs=True, top_logprobs=3, max_tokens=300), "top_logprobs", "--max-logprob-entries")
    assert completion(url, n=2, max_tokens=200, ignore_eos=True).status_code == 200
    # Within every bound: 2 x (10 echoed + 10 generated + 10 prompt_logprobs) x 4 = 240 entries.
    ok = completion(url, prompt=list(range(100, 110)), n=2, logprobs=3, max_tokens=10, echo=True)
    assert ok.status_code == 200, ok.text
    lp = ok.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 20 and all(len(t) <= 4 for t in lp["top_logprobs"][1:])
