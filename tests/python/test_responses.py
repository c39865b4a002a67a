"""POST /v1/responses with the official `openai` client (docs/server.md, Responses API).

On the bundled SmolLM2 (the session server): create plain (the same text as
the chat path), streamed (the documented event order, reassembling to the
final object), function tools with a two-turn round trip through
function_call_output (by items and by previous_response_id), text.format
json_schema, responses.parse with a Pydantic model, previous_response_id
reusing the prefix (cached_tokens), GET / DELETE, and 400s naming the field.
On the random-weight Qwen 3 with --reasoning-parser deepseek_r1 and a tiny
store: reasoning items (and their streamed deltas) and eviction (404).
"""
import json

import httpx
import openai
import pydantic
import pytest

from conftest import ROOT

QWEN3 = ROOT / "models" / "random" / "qwen3.gguf"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}


def client_for(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=120)


def model_of(server):
    return httpx.get(server.base_url + "/v1/models").json()["data"][0]["id"]


@pytest.fixture(scope="module")
def oa(server):
    return client_for(server), model_of(server)


def test_create_plain_is_the_chat_paths_answer(oa, server):
    client, model = oa
    r = client.responses.create(model=model, input="Name a colour.", instructions="Answer in one word.",
                                max_output_tokens=8, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert [item.type for item in r.output] == ["message"]
    chat = httpx.post(server.base_url + "/v1/chat/completions", json={
        "model": model, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "system", "content": "Answer in one word."},
                     {"role": "user", "content": "Name a colour."}]}).json()
    assert r.output_text == chat["choices"][0]["message"]["content"]
    assert r.usage.input_tokens == chat["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == chat["usage"]["completion_tokens"]
    assert r.instructions == "Answer in one word." and r.max_output_tokens == 8
    if chat["choices"][0]["finish_reason"] == "length":
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_stream_follows_the_event_order_and_reassembles(oa):
    client, model = oa
    kwargs = dict(model=model, input="Count to five.", max_output_tokens=16, temperature=0)
    whole = client.responses.create(**kwargs)
    types, deltas = [], []
    with client.responses.stream(**kwargs) as s:
        for ev in s:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
    final = ev.response  # the last event's (get_final_response() knows only response.completed)
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done",
                          "response.completed" if final.status == "completed" else "response.incomplete"]
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_sequence_numbers_count_from_zero(server):
    model = model_of(server)
    seqs = []
    with httpx.stream("POST", server.base_url + "/v1/responses", json={
            "model": model, "input": "Hi", "max_output_tokens": 4, "stream": True}, timeout=120) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                seqs.append(json.loads(line[6:])["sequence_number"])
    assert seqs == list(range(len(seqs))) and len(seqs) >= 6


def test_function_tools_round_trip(oa):
    client, model = oa
    first_input = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.responses.create(model=model, input=first_input, tools=[WEATHER], tool_choice="required",
                                max_output_tokens=60, temperature=0)
    calls = [item for item in r.output if item.type == "function_call"]
    assert calls, r.output
    assert calls[0].name == "get_weather" and calls[0].call_id
    assert isinstance(json.loads(calls[0].arguments)["city"], str)
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"}
    # Turn two with the items sent back ...
    items = first_input + [item.model_dump(exclude_none=True) for item in r.output] + [result]
    r2 = client.responses.create(model=model, input=items, tools=[WEATHER], max_output_tokens=12, temperature=0)
    assert r2.output[-1].type in ("message", "function_call")
    # ... and the same by previous_response_id: the same conversation, the same answer.
    r3 = client.responses.create(model=model, previous_response_id=r.id, input=[result], tools=[WEATHER],
                                 max_output_tokens=12, temperature=0)
    assert r3.output_text == r2.output_text
    assert r3.usage.input_tokens == r2.usage.input_tokens
    assert r3.previous_response_id == r.id
    # A named tool_choice.
    r4 = client.responses.create(model=model, input=first_input, tools=[WEATHER], max_output_tokens=60,
                                 tool_choice={"type": "function", "name": "get_weather"}, temperature=0)
    assert [i.name for i in r4.output if i.type == "function_call"] == ["get_weather"]


def test_text_format_json_schema(oa):
    client, model = oa
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                               "sunny": {"type": "boolean"}},
              "required": ["city", "sunny"], "additionalProperties": False}
    r = client.responses.create(model=model, input="Describe the weather in Rome as JSON.", max_output_tokens=60,
                                text={"format": {"type": "json_schema", "name": "weather", "schema": schema,
                                                 "strict": True}}, temperature=0)
    obj = json.loads(r.output_text)
    assert set(obj) == {"city", "sunny"} and isinstance(obj["sunny"], bool)


class Answer(pydantic.BaseModel):
    colour: str
    count: int


def test_parse_with_a_pydantic_model(oa):
    client, model = oa
    r = client.responses.parse(model=model, input="A colour and a number, as JSON.", text_format=Answer,
                               max_output_tokens=60, temperature=0)
    assert isinstance(r.output_parsed, Answer)


def test_previous_response_id_reuses_the_prefix(oa):
    client, model = oa
    story = "Here is a long story about a lighthouse keeper and the sea. " * 12
    r1 = client.responses.create(model=model, input=story + "Summarise it.", max_output_tokens=8, temperature=0)
    r2 = client.responses.create(model=model, previous_response_id=r1.id, input="Shorter, please.",
                                 max_output_tokens=8, temperature=0)
    assert r2.usage.input_tokens > r1.usage.input_tokens
    assert r2.usage.input_tokens_details.cached_tokens > 0
    assert r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens // 2
    got = client.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    client.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=model, previous_response_id=r1.id, input="x", max_output_tokens=2)
    assert e.value.body["param"] == "previous_response_id"
    not_stored = client.responses.create(model=model, input="x", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(not_stored.id)


@pytest.mark.parametrize("body,param", [
    ({}, "input"),
    ({"input": 3}, "input"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": 5}, "temperature"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
    ({"input": "x", "store": "yes"}, "store"),
])
def test_malformed_fields_are_400s_naming_them(server, body, param):
    r = httpx.post(server.base_url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert err["type"] == "invalid_request_error" and err["message"]
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_unknown_ids_and_methods(server):
    assert httpx.get(server.base_url + "/v1/responses/resp_nope").status_code == 404
    assert httpx.delete(server.base_url + "/v1/responses/resp_nope").status_code == 404
    assert httpx.put(server.base_url + "/v1/responses/resp_nope").status_code == 405
    assert httpx.get(server.base_url + "/v1/responses").status_code == 405


@pytest.fixture(scope="module")
def thinking_server(start_server):
    if not QWEN3.exists():
        pytest.skip(f"{QWEN3} not generated (scripts/fetch_models.sh)")
    return start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB", "--reasoning-parser",
                        "deepseek_r1", "--responses-store-size", "2", model=str(QWEN3))


def test_reasoning_items_and_their_stream(thinking_server):
    client, model = client_for(thinking_server), model_of(thinking_server)
    kwargs = dict(model=model, input="Think first.", max_output_tokens=24, temperature=0,
                  reasoning={"effort": "low"}, extra_body={"thinking_token_budget": 6})
    r = client.responses.create(**kwargs)
    assert r.output[0].type == "reasoning"
    chat = httpx.post(thinking_server.base_url + "/v1/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": "Think first."}], "max_tokens": 24,
        "temperature": 0, "reasoning_effort": "low", "thinking_token_budget": 6}).json()
    assert r.output[0].content[0].text == chat["choices"][0]["message"]["reasoning_content"]
    assert r.output_text == (chat["choices"][0]["message"]["content"] or "")
    assert r.usage.output_tokens_details.reasoning_tokens == 7
    reasoning = []
    with client.responses.stream(**kwargs) as s:
        for ev in s:
            if ev.type == "response.reasoning_text.delta":
                reasoning.append(ev.delta)
    assert ev.type in ("response.completed", "response.incomplete")
    final = ev.response
    assert "".join(reasoning) == final.output[0].content[0].text == r.output[0].content[0].text


def test_the_store_is_bounded(thinking_server):
    client, model = client_for(thinking_server), model_of(thinking_server)
    ids = [client.responses.create(model=model, input=f"n{i}", max_output_tokens=2).id for i in range(3)]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ids[0])  # evicted: the store holds 2
    assert client.responses.retrieve(ids[2]).id == ids[2]
