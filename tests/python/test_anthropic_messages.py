"""The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens)
with the official `anthropic` Python SDK, on SmolLM2: plain messages, tool
use (tool_use then tool_result; tool_choice any always a valid tool_use),
streaming that reassembles to the non-streamed message, count_tokens against
usage, prompt caching reported in cache_read_input_tokens, stop sequences,
the x-api-key header, and malformed fields answered with a 400 in
Anthropic's error shape naming the field (the server keeps serving).
"""
import pathlib
import uuid

import anthropic
import httpx
import jsonschema
import pytest

MODEL = "smollm2-135m"
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "input_schema": {"type": "object",
                            "properties": {"city": {"type": "string", "maxLength": 30},
                                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                            "required": ["city", "unit"], "additionalProperties": False}}
ADD = {"name": "add", "description": "Add two integers.",
       "input_schema": {"type": "object",
                        "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                       "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
                        "required": ["a", "b"], "additionalProperties": False}}
TOOLS = [WEATHER, ADD]
SCHEMAS = {t["name"]: t["input_schema"] for t in TOOLS}
GREEDY = {"temperature": 0}
SAMPLED = {"temperature": 1.0}


@pytest.fixture(scope="module")
def srv(start_server):
    return start_server("--max-num-seqs", "16", "--kv-cache-memory", "256MiB", "--max-model-len", "2048")


@pytest.fixture(scope="module")
def keyed(start_server):
    return start_server("--max-num-seqs", "4", "--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                        "--api-key", "sekrit")


@pytest.fixture
def client(srv):
    return anthropic.Anthropic(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=300)


def user(text):
    return [{"role": "user", "content": text}]


def test_create_plain(client):
    m = client.messages.create(model=MODEL, max_tokens=16, messages=user("Say hello."))
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert m.id.startswith("msg_")
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in m.content] in (["text"], [])
    assert 1 <= m.usage.output_tokens <= 16
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens > 0
    assert m.usage.cache_creation_input_tokens == 0
    if m.stop_reason == "max_tokens":
        assert m.usage.output_tokens == 16


def test_system_blocks_and_sampling(client):
    # This SDK no longer types the sampling fields; older clients send them, and the server takes them.
    m = client.messages.create(
        model=MODEL, max_tokens=8, extra_body={"temperature": 0.7, "top_k": 20, "top_p": 0.9},
        system=[{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}])
    assert m.type == "message" and m.usage.output_tokens <= 8


def test_stop_sequences(client):
    # SmolLM2 answers in English: a space comes within 40 tokens, and ends the message there.
    m = client.messages.create(model=MODEL, max_tokens=40, extra_body=GREEDY, stop_sequences=[" "],
                               messages=user("Write one sentence about the sea."))
    assert m.stop_reason == "stop_sequence", m
    assert m.stop_sequence == " "
    assert all(" " not in b.text for b in m.content if b.type == "text")


def test_count_tokens_equals_input_tokens(client):
    # A fresh nonce at the start of the system prompt: no cached block can match.
    kw = dict(model=MODEL, system=f"{uuid.uuid4().hex} You answer questions about weather.",
              messages=user("Is it raining in Oslo?"), tools=TOOLS)
    n = client.messages.count_tokens(**kw).input_tokens
    m = client.messages.create(max_tokens=4, **kw)
    assert m.usage.cache_read_input_tokens == 0
    assert n == m.usage.input_tokens
    # Without tools the prompt is shorter: count_tokens renders what create renders.
    n_plain = client.messages.count_tokens(model=MODEL, system=kw["system"], messages=kw["messages"]).input_tokens
    assert n_plain < n


def test_repeated_long_system_prompt_reads_the_cache(client):
    system = uuid.uuid4().hex + " " + " ".join(f"Rule {i}: be careful with item number {i}." for i in range(60))
    kw = dict(model=MODEL, max_tokens=4, system=[{"type": "text", "text": system,
                                                   "cache_control": {"type": "ephemeral"}}])
    n = client.messages.count_tokens(model=MODEL, system=kw["system"], messages=user("First?")).input_tokens
    assert n > 400
    first = client.messages.create(messages=user("First?"), **kw)
    assert first.usage.cache_read_input_tokens == 0
    second = client.messages.create(messages=user("Second?"), **kw)
    total = second.usage.input_tokens + second.usage.cache_read_input_tokens + second.usage.cache_creation_input_tokens
    assert total == client.messages.count_tokens(model=MODEL, system=kw["system"],
                                                 messages=user("Second?")).input_tokens
    # Everything up to the last full block before the question comes from the cache.
    assert second.usage.cache_read_input_tokens >= n - 64, second.usage
    assert second.usage.input_tokens < 64


def check_tool_use(m, allowed):
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use", m
    assert len(uses) == 1, m
    u = uses[0]
    assert u.name in allowed and u.id.startswith("toolu_")
    jsonschema.validate(u.input, SCHEMAS[u.name])
    return u


def test_tool_choice_any_always_yields_a_valid_tool_use(client):
    questions = ["What is the weather like in Paris?", "What is 17 plus 25?", "Tell me a joke.",
                 "Is it cold in Oslo?", "Add 3 and 4.", "Hello!"]
    for q in questions:
        m = client.messages.create(model=MODEL, max_tokens=300, extra_body=SAMPLED, messages=user(q), tools=TOOLS,
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True})
        check_tool_use(m, set(SCHEMAS))
    m = client.messages.create(model=MODEL, max_tokens=300, extra_body=SAMPLED, messages=user("Hi"), tools=TOOLS,
                               tool_choice={"type": "tool", "name": "add"})
    assert {b.name for b in m.content if b.type == "tool_use"} == {"add"}


def test_tool_use_then_tool_result_round_trip(client):
    msgs = user("What is the weather in Paris, in celsius?")
    first = client.messages.create(model=MODEL, max_tokens=300, messages=msgs, tools=TOOLS,
                                   tool_choice={"type": "tool", "name": "get_weather",
                                                "disable_parallel_tool_use": True})
    u = check_tool_use(first, {"get_weather"})
    msgs = msgs + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id,
                                                 "content": "18 degrees and sunny"}]}]
    # The result rendered: the prompt grew by it, and the model answers in text.
    n_before = client.messages.count_tokens(model=MODEL, messages=msgs[:1], tools=TOOLS).input_tokens
    n_after = client.messages.count_tokens(model=MODEL, messages=msgs, tools=TOOLS).input_tokens
    assert n_after > n_before
    second = client.messages.create(model=MODEL, max_tokens=24, messages=msgs, tools=TOOLS,
                                    tool_choice={"type": "none"})
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert all(b.type == "text" for b in second.content)


def test_stream_reassembles_to_the_same_message(client):
    for kw in (dict(messages=user("Count from one to five."), max_tokens=24),
               dict(messages=user("Weather in Rome?"), max_tokens=200, tools=TOOLS,
                    tool_choice={"type": "any", "disable_parallel_tool_use": True})):
        plain = client.messages.create(model=MODEL, extra_body=GREEDY, **kw)
        events = []
        with client.messages.stream(model=MODEL, extra_body=GREEDY, **kw) as s:
            for e in s:
                events.append(e.type)
            streamed = s.get_final_message()
        def blocks(m):  # tool_use ids are fresh per response: compared apart
            return [{k: v for k, v in b.model_dump().items() if k != "id"} for b in m.content]
        assert blocks(streamed) == blocks(plain)
        assert all(b.id.startswith("toolu_") for b in streamed.content if b.type == "tool_use")
        assert streamed.stop_reason == plain.stop_reason
        assert streamed.usage.output_tokens == plain.usage.output_tokens
        assert (streamed.usage.input_tokens + streamed.usage.cache_read_input_tokens
                == plain.usage.input_tokens + plain.usage.cache_read_input_tokens)
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert "message_delta" in events


def test_raw_stream_event_sequence(srv):
    body = {"model": MODEL, "max_tokens": 6, "stream": True, "messages": user("Hi")}
    with httpx.stream("POST", srv.base_url + "/v1/messages", json=body, timeout=120,
                      headers={"anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    names = [line[len("event: "):] for line in text.splitlines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    blocks = names[2:-2]
    if blocks:
        assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
        assert set(blocks[1:-1]) == {"content_block_delta"}
    assert "[DONE]" not in text


def post(srv, body, path="/v1/messages", **kw):
    return httpx.post(srv.base_url + path, json=body, timeout=60, **kw)


def check_error(r, status, etype, field):
    assert r.status_code == status, r.text
    j = r.json()
    assert j["type"] == "error" and j["error"]["type"] == etype, j
    if field is not None:
        assert j["error"]["message"].startswith(field + ":"), j


@pytest.mark.parametrize("patch,field", [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"model": None}, "model"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages.0.content.0.tool_use_id"),
    ({"temperature": 3}, "temperature"),
    ({"top_k": 1.5}, "top_k"),
    ({"stop_sequences": [1]}, "stop_sequences.0"),
    ({"system": {"text": "x"}}, "system"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking.budget_tokens"),
])
def test_malformed_fields_are_400_naming_the_field(srv, patch, field):
    body = {"model": MODEL, "max_tokens": 8, "messages": user("hi")}
    for k, v in patch.items():
        if v is None:
            body.pop(k)
        else:
            body[k] = v
    check_error(post(srv, body), 400, "invalid_request_error", field)
    assert httpx.get(srv.base_url + "/health", timeout=10).status_code == 200


def test_other_errors_in_anthropic_shape(srv, client):
    r = httpx.post(srv.base_url + "/v1/messages", content=b"{not json", timeout=10)
    check_error(r, 400, "invalid_request_error", None)
    check_error(httpx.get(srv.base_url + "/v1/messages", timeout=10), 405, "invalid_request_error", None)
    check_error(post(srv, {"model": "claude-x", "max_tokens": 4, "messages": user("hi")}), 404, "not_found_error",
                None)
    check_error(post(srv, {"model": MODEL, "max_tokens": 4000, "messages": user("hi")}), 400,
                "invalid_request_error", "messages")  # the context is 2048 tokens
    check_error(post(srv, {"model": MODEL}, path="/v1/messages/count_tokens"), 400, "invalid_request_error",
                "messages")
    check_error(post(srv, {"model": "claude-x", "messages": user("hi")}, path="/v1/messages/count_tokens"), 404,
                "not_found_error", None)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=0, messages=user("hi"))
    assert "max_tokens" in str(e.value)


def test_x_api_key(keyed):
    body = {"model": MODEL, "max_tokens": 2, "messages": user("hi")}
    check_error(post(keyed, body), 401, "authentication_error", None)
    check_error(post(keyed, body, headers={"x-api-key": "wrong"}), 401, "authentication_error", None)
    assert post(keyed, body, headers={"x-api-key": "sekrit", "anthropic-version": "2023-06-01"}).status_code == 200
    assert post(keyed, body, headers={"authorization": "Bearer sekrit"}).status_code == 200
    c = anthropic.Anthropic(base_url=keyed.base_url, api_key="sekrit", max_retries=0, timeout=120)
    assert c.messages.count_tokens(model=MODEL, messages=user("hi")).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=keyed.base_url, api_key="nope", max_retries=0).messages.create(
            model=MODEL, max_tokens=2, messages=user("hi"))


# --- thinking, on the random-weight Qwen 3 with the real Qwen 3 template (tests/python/test_reasoning.py) ---

QWEN3 = pathlib.Path(__file__).resolve().parents[2] / "models" / "random" / "qwen3.gguf"


@pytest.fixture(scope="module")
def r1(start_server):
    if not QWEN3.exists():
        pytest.skip(f"{QWEN3} not generated (scripts/fetch_models.sh)")
    return start_server("--max-model-len", "1024", "--kv-cache-memory", "64MiB", "--served-model-name", "qwen3",
                        "--reasoning-parser", "deepseek_r1", model=str(QWEN3))


def test_thinking_blocks_are_the_chat_paths_reasoning_split(r1):
    c = anthropic.Anthropic(base_url=r1.base_url, api_key="unused", max_retries=0, timeout=120)
    q = "What is 2 + 2?"
    for budget in (3, 9):
        chat = httpx.post(r1.base_url + "/v1/chat/completions", timeout=120, json={
            "model": "qwen3", "messages": user(q), "max_tokens": 24, "temperature": 0,
            "thinking_token_budget": budget, "chat_template_kwargs": {"enable_thinking": True}}).json()
        msg = chat["choices"][0]["message"]
        assert msg["reasoning_content"], msg  # deepseek_r1: the output starts inside the block
        kw = dict(model="qwen3", max_tokens=24, messages=user(q), extra_body=GREEDY,
                  thinking={"type": "enabled", "budget_tokens": budget})
        m = c.messages.create(**kw)
        assert m.content[0].type == "thinking"
        assert m.content[0].thinking == msg["reasoning_content"]
        text = "".join(b.text for b in m.content if b.type == "text")
        assert text == (msg["content"] or "")
        assert m.usage.output_tokens == chat["usage"]["completion_tokens"]
        with c.messages.stream(**kw) as s:
            kinds = [e.delta.type for e in s if e.type == "content_block_delta"]
            streamed = s.get_final_message()
        assert "thinking_delta" in kinds
        assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in m.content]
    omitted = c.messages.create(model="qwen3", max_tokens=24, messages=user(q), extra_body=GREEDY,
                                thinking={"type": "enabled", "budget_tokens": 3, "display": "omitted"})
    assert all(b.type == "text" for b in omitted.content)


def test_thinking_disabled_renders_the_no_think_form(r1):
    c = anthropic.Anthropic(base_url=r1.base_url, api_key="unused", max_retries=0, timeout=120)
    on = c.messages.count_tokens(model="qwen3", messages=user("Hi"),
                                 thinking={"type": "enabled", "budget_tokens": 8}).input_tokens
    off = c.messages.count_tokens(model="qwen3", messages=user("Hi"), thinking={"type": "disabled"}).input_tokens
    assert off > on  # Qwen 3's template adds the empty <think></think> block when thinking is off
    m = c.messages.create(model="qwen3", max_tokens=4, messages=user("Hi"), thinking={"type": "disabled"})
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == off
