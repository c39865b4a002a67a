"""Tool calling on a real server (SmolLM2, whose template has no tools: the
server describes them in Hermes style and reads <tool_call> blocks back).

The tiny model does not decide to call tools by itself, so the tests ask it to
repeat a <tool_call> block, which is enough to check the whole path: prompt,
parser, message.tool_calls, delta.tool_calls and finish_reason.
"""
import json
import re

import httpx

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = ('Repeat this text exactly, nothing else:\n<tool_call>\n'
       '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
ID = re.compile(r"^call_[A-Za-z0-9]{24}$")


def chat(base_url, **body):
    return httpx.post(base_url + "/v1/chat/completions", json=body, timeout=120)


def test_tool_call_non_streaming(base_url):
    r = chat(base_url, messages=[{"role": "user", "content": ASK}], tools=TOOLS, max_tokens=60, temperature=0)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "tool_calls", c
    assert c["message"]["content"] is None
    [call] = c["message"]["tool_calls"]
    assert ID.match(call["id"]) and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_tool_call_streaming_each_choice(base_url):
    r = chat(base_url, messages=[{"role": "user", "content": ASK}], tools=TOOLS, max_tokens=60, temperature=0,
             stream=True, n=2)
    assert r.status_code == 200, r.text
    calls, finish = {0: [], 1: []}, {}
    for line in r.text.splitlines():
        if not line.startswith("data: {"):
            continue
        for c in json.loads(line[6:])["choices"]:
            calls[c["index"]] += c["delta"].get("tool_calls", [])
            if c["finish_reason"]:
                finish[c["index"]] = c["finish_reason"]
    assert finish == {0: "tool_calls", 1: "tool_calls"}
    for i in (0, 1):
        [call] = calls[i]
        assert call["index"] == 0 and ID.match(call["id"])
        assert call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_tool_history_and_choice_none(base_url):
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "22 C"}]
    r = chat(base_url, messages=msgs, tools=TOOLS, max_tokens=8, temperature=0)
    assert r.status_code == 200, r.text
    r = chat(base_url, messages=[{"role": "user", "content": ASK}], tools=TOOLS, tool_choice="none", max_tokens=60,
             temperature=0)
    c = r.json()["choices"][0]
    assert "tool_calls" not in c["message"] and c["finish_reason"] != "tool_calls"


def test_tool_errors_name_the_field(base_url):
    msgs = [{"role": "user", "content": "hi"}]
    for body, param in [({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
                        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                         "tool_choice.function.name"),
                        ({"tool_choice": "required"}, "tool_choice"),
                        ({"tools": TOOLS, "parallel_tool_calls": 1}, "parallel_tool_calls")]:
        r = chat(base_url, messages=msgs, max_tokens=4, **body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param
