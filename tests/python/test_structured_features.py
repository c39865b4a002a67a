"""Structured output with the other request features (split from
test_structured_output.py, which holds the generated cases and the errors):
response_format text, strict schemas, truncation, seeds, n = 3, streaming,
logprobs, stop strings and the OpenAI client's parse() with Pydantic models,
each on both bundled models.
"""
import json
import math
import re

import httpx
import pydantic
import pytest

from structured_common import (ENDPOINTS, client, output_text, parse_json, post_all, request,  # noqa: F401
                               schema_errors, srv)


# --- features together with a constraint ---------------------------------------------------------------------------

S = {"type": "string", "maxLength": 24}  # as test_structured_output.py's S
# test_structured_output.py's "nested" case: nested objects and an array.
NESTED = {"type": "object", "title": "Order", "description": "annotations are ignored",
          "properties": {"customer": {"type": "object", "properties": {"name": S, "vip": {"type": "boolean"}},
                                      "required": ["name", "vip"], "additionalProperties": False},
                         "items": {"type": "array", "minItems": 1, "maxItems": 3,
                                   "items": {"type": "string", "maxLength": 12}},
                         "total": {"type": "integer", "minimum": 0, "maximum": 10000}},
          "required": ["customer", "items", "total"], "additionalProperties": False}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def test_response_format_text_is_free_text(srv):
    server, model = srv
    for path, extra in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}]}),
                        ("/v1/completions", {"prompt": "Hello,"})):
        r = httpx.post(server.base_url + path, timeout=120,
                       json={"model": model, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                             "response_format": {"type": "text"}, **extra})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "length"


def test_strict_schema_allows_no_extra_properties(srv):
    # additionalProperties defaults to true, except under OpenAI's strict: then no key beyond the schema's.
    server, model = srv
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["a"]}
    items = [request(model, ENDPOINTS[i % 2], "json_schema", "response_format", schema, 300 + i, 200, strict=True)
             for i in range(8)]
    for (path, _), r in zip(items, post_all(server.base_url, items, workers=8)):
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        assert c["finish_reason"] == "stop", c
        value = parse_json(output_text(path, c))
        assert isinstance(value, dict) and list(value) == ["a"] and 0 <= value["a"] <= 9, value


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_truncated_json_is_length(srv, endpoint):
    # No PERSON document fits in 3 tokens: the output is a cut-off prefix and says so.
    server, model = srv
    path, body = request(model, endpoint, "json_schema", "response_format", PERSON, 8, 3)
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()
    c = data["choices"][0]
    assert c["finish_reason"] == "length", c
    assert data["usage"]["completion_tokens"] == 3
    text = output_text(path, c)
    assert text.startswith("{") and schema_errors(PERSON, text) is not None, text


def test_seeded_constrained_sampling_is_reproducible(srv):
    server, model = srv
    path, body = request(model, "completions", "json_schema", "guided", PERSON, 77, 200)
    a, b = post_all(server.base_url, [(path, body), (path, body)], workers=1)
    assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
    assert a.json()["choices"][0]["text"] == b.json()["choices"][0]["text"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_n3_every_choice_validates(srv, endpoint):
    server, model = srv
    path, body = request(model, endpoint, "json_schema", "response_format", PERSON, 5, 200, n=3)
    r = httpx.post(server.base_url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert sorted(c["index"] for c in choices) == [0, 1, 2]
    for c in choices:
        assert c["finish_reason"] == "stop", c
        assert schema_errors(PERSON, output_text(path, c)) is None, schema_errors(PERSON, output_text(path, c))


def stream_texts(base_url, path, body):
    """Streams one request; ({index: text}, {index: finish_reason})."""
    texts, finishes = {}, {}
    with httpx.stream("POST", base_url + path, json={**body, "stream": True}, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:]).get("choices") or []:
                piece = c["delta"].get("content") if "delta" in c else c.get("text")
                if "delta" in c:
                    assert not c["delta"].get("tool_calls"), c
                texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
                if c.get("finish_reason"):
                    assert c["index"] not in finishes, f"two finish reasons for choice {c['index']}"
                    finishes[c["index"]] = c["finish_reason"]
    return texts, finishes


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_streamed_output_validates_and_equals_non_streamed(srv, endpoint):
    server, model = srv
    schema = NESTED  # nested objects and an array
    path, body = request(model, endpoint, "json_schema", "structured_outputs", schema, 11, 400)
    texts, finishes = stream_texts(server.base_url, path, body)
    assert finishes == {0: "stop"}, (finishes, texts)
    assert schema_errors(schema, texts[0]) is None, schema_errors(schema, texts[0])
    r = httpx.post(server.base_url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    assert output_text(path, r.json()["choices"][0]) == texts[0]  # same seed, same tokens

    # n=2 streamed with a regex: both indexes end and full-match.
    path, body = request(model, endpoint, "regex", "guided", r"[A-Z][a-z]{2,10} [0-9]{2}", 12, 32, n=2)
    texts, finishes = stream_texts(server.base_url, path, body)
    assert finishes == {0: "stop", 1: "stop"}, (finishes, texts)
    for t in texts.values():
        assert re.fullmatch(r"[A-Z][a-z]{2,10} [0-9]{2}", t), texts


def test_completion_logprobs_with_a_regex(srv):
    server, model = srv
    pattern = r"[0-9]{3}-[0-9]{4}"
    path, body = request(model, "completions", "regex", "structured_outputs", pattern, 3, 24, logprobs=2)
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()
    c = data["choices"][0]
    assert c["finish_reason"] == "stop" and re.fullmatch(pattern, c["text"]), c
    lp = c["logprobs"]
    assert "".join(lp["tokens"]) == c["text"]
    # The end-of-generation token that ends a complete match counts in usage but has no logprobs entry
    # (server/choice_output.h).
    assert len(lp["tokens"]) in (data["usage"]["completion_tokens"] - 1, data["usage"]["completion_tokens"])
    assert all(math.isfinite(x) and x <= 0 for x in lp["token_logprobs"]), lp["token_logprobs"]
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"]), lp["top_logprobs"]


def test_chat_logprobs_with_a_schema(srv):
    server, model = srv
    path, body = request(model, "chat", "json_schema", "response_format", PERSON, 4, 200, logprobs=True,
                         top_logprobs=2)
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()
    c = data["choices"][0]
    assert c["finish_reason"] == "stop", c
    content = c["message"]["content"]
    assert schema_errors(PERSON, content) is None, schema_errors(PERSON, content)
    tokens = c["logprobs"]["content"]
    assert len(tokens) in (data["usage"]["completion_tokens"] - 1, data["usage"]["completion_tokens"])
    assert b"".join(bytes(t["bytes"]) for t in tokens).decode("utf-8") == content
    assert all(math.isfinite(t["logprob"]) and t["logprob"] <= 0 for t in tokens)
    assert all(1 <= len(t["top_logprobs"]) <= 2 for t in tokens)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_stop_string_cuts_constrained_output(srv, endpoint):
    # The grammar forces "X" after the three pairs; the stop string ends the output right before it.
    server, model = srv
    path, body = request(model, endpoint, "regex", "guided", r"(ab|cd){3}X[0-9]{2}", 9, 32, stop=["X"])
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop", c
    assert re.fullmatch(r"(ab|cd){3}", output_text(path, c)), c
    # A stop string the grammar never allows leaves the output whole.
    path, body = request(model, endpoint, "choice", "structured_outputs", ["alpha", "beta"], 9, 16, stop=["\n\n"])
    r = httpx.post(server.base_url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop" and output_text(path, c) in ("alpha", "beta"), c


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=20)
    age: int = pydantic.Field(ge=0, le=120)


class Team(pydantic.BaseModel):
    team: str = pydantic.Field(max_length=16)
    members: list[Person] = pydantic.Field(min_length=1, max_length=2)


def test_openai_parse_with_pydantic_models(srv, client):
    _, model = srv
    for cls, seed in ((Person, 1), (Team, 2)):
        r = client.chat.completions.parse(
            model=model, messages=[{"role": "user", "content": f"Make up a {cls.__name__.lower()}."}],
            response_format=cls, temperature=1.0, seed=seed, max_tokens=300)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", r
        assert isinstance(msg.parsed, cls), msg
        assert msg.parsed == cls.model_validate_json(msg.content)
