"""Reasoning models through /v1/chat/completions (docs/server.md, Reasoning models).

On the random-weight Qwen 3 GGUF (models/random/qwen3.gguf, tools/golden/
make_random_models.py) with the real Qwen 3 chat template:
- `--reasoning-parser deepseek_r1` (the output starts thinking): with a hard
  budget of N the text between the tags is exactly N tokens, then the engine
  forces </think>; reasoning_content and content are the split of the raw
  output (read back from the logprobs' bytes) that an independent splitter
  here computes; streamed deltas reassemble to the same split; usage counts
  the block as reasoning tokens; json_schema constrains only the answer;
  a forced tool call is read from the answer only;
- `--reasoning-parser auto` (qwen3 from the template): the output opens the
  block itself (steered with logit_bias), `enable_thinking: false` renders the
  template's no-think form (the empty block in the prompt) and the output is
  then all content; malformed fields are 400s naming them.
"""
import json

import httpx
import pytest

from conftest import ROOT

MODEL = ROOT / "models" / "random" / "qwen3.gguf"
WS = " \t\r\n"
MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def split_ref(text, starts_open):
    """The documented split (reasoning_parser.h), written independently."""
    s = text
    t = s.lstrip(WS)
    if t.startswith("<think>"):
        s = t[len("<think>"):]
    elif not starts_open:
        return "", text
    end = s.find("</think>")
    if end < 0:
        return s.strip(WS), ""
    return s[:end].strip(WS), s[end + len("</think>"):].lstrip(WS)


def raw_text(choice):
    data = bytes(b for entry in choice["logprobs"]["content"] for b in entry["bytes"])
    return data.decode("utf-8", errors="replace")


def chat(server, **body):
    r = httpx.post(server.base_url + "/v1/chat/completions",
                   json={"messages": MESSAGES, "temperature": 0, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server, **body):
    reasoning, content, calls, usage = [], [], [], None
    with httpx.stream("POST", server.base_url + "/v1/chat/completions",
                      json={"messages": MESSAGES, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}, **body}, timeout=120) as s:
        assert s.status_code == 200
        saw_content = False
        for line in s.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk["choices"]:
                d = ch["delta"]
                if d.get("reasoning_content"):
                    assert not saw_content, "reasoning after content"
                    assert d["reasoning"] == d["reasoning_content"]
                    reasoning.append(d["reasoning_content"])
                if d.get("content"):
                    saw_content = True
                    content.append(d["content"])
                calls.extend(d.get("tool_calls") or [])
    return "".join(reasoning), "".join(content), calls, usage


def token_id(server, text):
    r = httpx.post(server.base_url + "/tokenize", json={"prompt": text, "add_special_tokens": False})
    ids = r.json()["tokens"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


@pytest.fixture(scope="module")
def r1_server(start_server):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not generated (scripts/fetch_models.sh)")
    return start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB",
                        "--reasoning-parser", "deepseek_r1", "--reasoning-budget", "12", model=str(MODEL))


@pytest.fixture(scope="module")
def qwen3_server(start_server):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not generated (scripts/fetch_models.sh)")
    return start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB",
                        "--reasoning-parser", "auto", model=str(MODEL))


@pytest.mark.parametrize("budget", [0, 5, 17])
def test_the_budget_caps_thinking_exactly_and_the_split_is_exact(r1_server, budget):
    close = token_id(r1_server, "</think>")
    out = chat(r1_server, max_tokens=40, thinking_token_budget=budget, logprobs=True,
               logit_bias={str(close): -100})  # the model itself would never close the block
    choice = out["choices"][0]
    entries = choice["logprobs"]["content"]
    tags = [i for i, e in enumerate(entries) if e["token"] == "</think>"]
    assert tags == [budget], tags  # exactly `budget` tokens inside, then the forced tag
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == budget + 1
    reasoning, content = split_ref(raw_text(choice), starts_open=True)
    msg = choice["message"]
    assert (msg["reasoning_content"] or "") == reasoning
    assert msg["reasoning"] == msg["reasoning_content"]
    assert msg["content"] == content
    if budget == 17:
        assert reasoning and content


def test_the_server_budget_is_the_default(r1_server):
    out = chat(r1_server, max_tokens=30, logprobs=True,
               logit_bias={str(token_id(r1_server, "</think>")): -100})
    tokens = [e["token"] for e in out["choices"][0]["logprobs"]["content"]]
    assert tokens.index("</think>") == 12  # --reasoning-budget 12
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 13


def test_streamed_deltas_reassemble_to_the_same_split(r1_server):
    body = dict(max_tokens=48, thinking_token_budget=20)
    whole = chat(r1_server, **body)
    reasoning, content, _, usage = stream(r1_server, **body)
    msg = whole["choices"][0]["message"]
    assert reasoning == (msg["reasoning_content"] or "")
    assert content == msg["content"]
    assert usage["completion_tokens_details"] == whole["usage"]["completion_tokens_details"]


def test_json_schema_constrains_only_the_answer(r1_server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    for stream_it in (False, True):
        body = dict(max_tokens=200, thinking_token_budget=10, response_format=fmt)
        if stream_it:
            reasoning, content, _, usage = stream(r1_server, **body)
        else:
            out = chat(r1_server, **body)
            assert out["choices"][0]["finish_reason"] == "stop"
            msg = out["choices"][0]["message"]
            reasoning, content, usage = msg["reasoning_content"], msg["content"], out["usage"]
        assert isinstance(json.loads(content)["ok"], bool), content
        assert reasoning  # free text, not JSON
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 11


def test_a_forced_tool_call_is_read_from_the_answer(r1_server):
    tools = [{"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                                      "required": ["a"]}}}]
    out = chat(r1_server, max_tokens=300, thinking_token_budget=6, tools=tools, tool_choice="required",
               parallel_tool_calls=False)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    calls = choice["message"]["tool_calls"]
    assert len(calls) >= 1 and calls[0]["function"]["name"] == "add"
    assert isinstance(json.loads(calls[0]["function"]["arguments"])["a"], int)
    assert choice["message"]["reasoning_content"]
    _, _, streamed_calls, _ = stream(r1_server, max_tokens=300, thinking_token_budget=6, tools=tools,
                                     tool_choice="required", parallel_tool_calls=False)
    assert [c["function"] for c in streamed_calls] == [c["function"] for c in calls]


def test_qwen3_output_opens_the_block_itself(qwen3_server):
    think = token_id(qwen3_server, "<think>")
    out = chat(qwen3_server, max_tokens=20, thinking_token_budget=7, logit_bias={str(think): 100})
    msg = out["choices"][0]["message"]
    # Every sampled token is "<think>": the first opens the block, seven are its text,
    # the engine closes it, the rest is the answer.
    assert msg["reasoning_content"] == "<think>" * 7
    assert msg["content"] == "<think>" * (20 - 9)
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 9


def test_enable_thinking_false_renders_the_no_think_form(qwen3_server):
    think, close = token_id(qwen3_server, "<think>"), token_id(qwen3_server, "</think>")
    bias = {str(think): -100, str(close): -100}
    on = chat(qwen3_server, max_tokens=8, logit_bias=bias)
    off = chat(qwen3_server, max_tokens=8, logit_bias=bias, chat_template_kwargs={"enable_thinking": False})
    r = httpx.post(qwen3_server.base_url + "/tokenize",
                   json={"prompt": "<think>\n\n</think>\n\n", "add_special_tokens": False})
    assert off["usage"]["prompt_tokens"] == on["usage"]["prompt_tokens"] + r.json()["count"]
    msg = off["choices"][0]["message"]
    assert msg["reasoning_content"] is None and msg["content"]
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    # reasoning_effort "none" turns thinking off the same way.
    none = chat(qwen3_server, max_tokens=8, logit_bias=bias, reasoning_effort="none")
    assert none["usage"]["prompt_tokens"] == off["usage"]["prompt_tokens"]


@pytest.mark.parametrize("field,value", [("chat_template_kwargs", [1]), ("reasoning_effort", "huge"),
                                         ("reasoning_effort", 3), ("thinking_token_budget", -2),
                                         ("thinking_token_budget", "5"), ("include_reasoning", "no")])
def test_malformed_reasoning_fields_are_400s_naming_them(qwen3_server, field, value):
    r = httpx.post(qwen3_server.base_url + "/v1/chat/completions",
                   json={"messages": MESSAGES, "max_tokens": 2, field: value}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field
    bad_history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": 1},
                   {"role": "user", "content": "c"}]
    r = httpx.post(qwen3_server.base_url + "/v1/chat/completions",
                   json={"messages": bad_history, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].reasoning_content", r.text
    assert httpx.get(qwen3_server.base_url + "/health").status_code == 200


def test_deepseek_r1_after_a_no_think_prompt_is_all_content(r1_server):
    # The template's no-think form closes the block in the prompt: nothing is reasoning, nothing forced.
    out = chat(r1_server, max_tokens=16, thinking_token_budget=2, logprobs=True,
               chat_template_kwargs={"enable_thinking": False},
               logit_bias={str(token_id(r1_server, "<think>")): -100, str(token_id(r1_server, "</think>")): -100})
    choice = out["choices"][0]
    assert choice["message"]["reasoning_content"] is None
    assert choice["message"]["content"] == raw_text(choice)
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
