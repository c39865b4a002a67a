"""Speculative decoding end to end (docs/engine.md, "Speculative decoding"): a server
started with `--speculative ngram` answers exactly what the plain session server answers,
greedy and seeded, plain and streamed, with logprobs, n > 1, stop strings and structured
output; its /metrics count drafts and accepted tokens in vLLM's spec_decode names; a
request can opt out with "speculative": false.
"""
import json
import re

import httpx
import pytest

REPEAT = ("Copy this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape. "
          "apple, banana, cherry, date, elderberry, fig, grape. apple, banana,")
FLAGS = ("--max-num-seqs", "256", "--kv-cache-memory", "256MiB", "--max-model-len", "2048")


@pytest.fixture(scope="module")
def spec(start_server):
    return start_server(*FLAGS, "--speculative", "ngram", "--num-speculative-tokens", "5")


@pytest.fixture(scope="module")
def drafting(start_server):
    # --no-spec-backoff: with its default backoff the engine drafts only while its step-time
    # model says drafts pay, and on a loaded machine (CI, after the sanitizer runs) a whole
    # request could go undrafted; the tests that count drafts need every step to draft.
    return start_server(*FLAGS, "--speculative", "ngram", "--num-speculative-tokens", "5",
                        "--no-spec-backoff")


def post(server, path, body):
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def spec_counters(server):
    """The spec_decode samples as {name: value}; per-position ones as name[position], once the
    engine has published the step that ended its last request (stats are published after each
    step, so a response can reach the client a moment before its last step's counts do)."""
    server.wait_idle()
    out = {}
    for line in httpx.get(server.base_url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r'(omnibus:spec_decode_\w+)\{[^}]*?(?:position="(\d+)")?\} (\S+)$', line)
        if m:
            out[m[1] + (f"[{m[2]}]" if m[2] else "")] = float(m[3])
    return out


# Repeated keys: prompt lookup finds them in the output, the grammar checks every draft.
FRUITS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "fruits", "schema": {
    "type": "array", "minItems": 3, "items": {
        "type": "object", "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["name", "count"], "additionalProperties": False}}}}

CASES = [
    ("/v1/completions", {"prompt": REPEAT, "max_tokens": 48, "temperature": 0, "logprobs": 2}),
    ("/v1/completions", {"prompt": REPEAT, "max_tokens": 40, "temperature": 0.8, "seed": 7, "n": 2,
                         "logprobs": 1}),
    ("/v1/completions", {"prompt": REPEAT, "max_tokens": 64, "temperature": 0, "stop": ["fig"]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": REPEAT}], "max_tokens": 48,
                              "temperature": 0, "logprobs": True, "top_logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "List three fruits as JSON."}],
                              "max_tokens": 40, "temperature": 0,
                              "response_format": {"type": "json_object"}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "List five fruits and how many."}],
                              "max_tokens": 80, "temperature": 0, "response_format": FRUITS_SCHEMA}),
]


def assert_same_choices(fast, plain):
    """Texts (or messages), logprobs and finish reasons of two answers' choices are equal."""
    assert [c.get("text", c.get("message")) for c in fast["choices"]] == \
        [c.get("text", c.get("message")) for c in plain["choices"]]
    assert [c["logprobs"] for c in fast["choices"]] == [c["logprobs"] for c in plain["choices"]]
    assert [c["finish_reason"] for c in fast["choices"]] == [c["finish_reason"] for c in plain["choices"]]


@pytest.mark.parametrize("path,body", CASES)
def test_answers_equal_the_plain_servers(server, spec, path, body):
    plain = post(server, path, body)
    fast = post(spec, path, body)
    assert_same_choices(fast, plain)
    assert fast["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]


def test_streamed_text_is_the_same(server, spec):
    body = {"prompt": REPEAT, "max_tokens": 48, "temperature": 0, "stream": True}
    def text(s):
        parts = []
        with httpx.stream("POST", s.base_url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    parts += [c["text"] for c in json.loads(line[6:])["choices"]]
        return "".join(parts)
    assert text(spec) == text(server)


def test_metrics_count_drafts_and_acceptance(drafting):
    before = spec_counters(drafting)
    post(drafting, "/v1/completions", {"prompt": REPEAT, "max_tokens": 48, "temperature": 0})
    after = spec_counters(drafting)
    drafted = after["omnibus:spec_decode_num_draft_tokens_total"] - before.get(
        "omnibus:spec_decode_num_draft_tokens_total", 0)
    accepted = after["omnibus:spec_decode_num_accepted_tokens_total"] - before.get(
        "omnibus:spec_decode_num_accepted_tokens_total", 0)
    assert drafted > 0 and 0 < accepted <= drafted
    assert after["omnibus:spec_decode_num_accepted_tokens_per_pos_total[0]"] > 0


def test_constrained_requests_are_speculated(drafting):
    """Structured output drafts too: the grammar cuts each draft where it refuses a token."""
    before = spec_counters(drafting)
    post(drafting, "/v1/chat/completions", CASES[-1][1])
    after = spec_counters(drafting)
    assert after["omnibus:spec_decode_num_draft_tokens_total"] > before.get(
        "omnibus:spec_decode_num_draft_tokens_total", 0)
    assert after["omnibus:spec_decode_num_accepted_tokens_total"] > before.get(
        "omnibus:spec_decode_num_accepted_tokens_total", 0)


def test_a_request_can_opt_out(drafting):
    before = spec_counters(drafting)
    post(drafting, "/v1/completions", {"prompt": REPEAT, "max_tokens": 32, "temperature": 0,
                                       "speculative": False})
    assert spec_counters(drafting)["omnibus:spec_decode_num_drafts_total"] == \
        before["omnibus:spec_decode_num_drafts_total"]
    r = httpx.post(drafting.base_url + "/v1/completions",
                   json={"prompt": "x", "max_tokens": 2, "speculative": "no"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
