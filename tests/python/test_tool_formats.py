"""The qwen3_coder (XML) and pythonic tool-call formats end to end, chosen
with --tool-call-parser on SmolLM2: a forced call (tool_choice "required" or
named) is constrained to the format by the grammar, so it always comes back
as message.tool_calls whose arguments validate against the function's
schema, streamed or not (the delta.tool_calls reassemble to the same calls).
"""
import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                  "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object",
                   "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100},
                                  "b": {"type": "integer", "minimum": -100, "maximum": 100}},
                   "required": ["a", "b"], "additionalProperties": False}}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module", params=["qwen3_coder", "pythonic"])
def client(request, start_server):
    s = start_server("--max-num-seqs", "8", "--kv-cache-memory", "128MiB", "--max-model-len", "1024",
                     "--tool-call-parser", request.param)
    return openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


def check(calls, allowed):
    assert calls, "no tool_calls"
    for c in calls:
        assert c.function.name in allowed
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


@pytest.mark.parametrize("choice", ["required", "get_weather", "add"])
def test_forced_calls_parse_and_validate(client, choice):
    tool_choice = choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    allowed = set(SCHEMAS) if choice == "required" else {choice}
    for seed in (1, 2):
        r = client.chat.completions.create(
            model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Weather in Oslo? Or 2+3?"}],
            tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=False, temperature=1.0, seed=seed,
            max_tokens=200)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert len(c.message.tool_calls) == 1
        check(c.message.tool_calls, allowed)


def test_streamed_calls_reassemble(client):
    kw = dict(model=client.models.list().data[0].id, messages=[{"role": "user", "content": "Add 4 and 5."}],
              tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
              parallel_tool_calls=False, temperature=0, max_tokens=200)
    plain = client.chat.completions.create(**kw).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                calls[d.index] = (d.function.name, d.function.arguments)
            finish = ch.finish_reason or finish
    assert finish == "tool_calls"
    assert list(calls.values()) == [(c.function.name, c.function.arguments) for c in plain]
