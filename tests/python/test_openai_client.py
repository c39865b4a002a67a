"""The official `openai` client against omnibus serve: completions and chat,
streaming and not, n, stop, seed, logprobs, echo, usage."""
import math

import httpx
import openai
import pytest

from conftest import MODEL


@pytest.fixture
def tokenize(base_url):
    return lambda text: httpx.post(base_url + "/tokenize", json={"prompt": text}).json()["tokens"]


@pytest.fixture
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].owned_by == "omnibus"


def test_completion_greedy_with_usage(client, tokenize):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert r.model == MODEL
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.finish_reason in ("stop", "length")
    assert "Paris" in c.text
    assert r.usage.prompt_tokens == len(tokenize("The capital of France is"))
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_length_and_ignore_eos(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12


def test_greedy_stream_equals_non_stream(client):
    kw = dict(model=MODEL, prompt="List three colors:", max_tokens=16, temperature=0)
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_n3_and_seed_reproducibility(client, tokenize):
    # ignore_eos (a vLLM extension we accept): every sequence yields exactly max_tokens.
    kw = dict(model=MODEL, prompt="My favourite animal is", max_tokens=10, temperature=1.0, seed=1234, n=3,
              extra_body={"ignore_eos": True})
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    texts_a = [c.text for c in sorted(a.choices, key=lambda c: c.index)]
    texts_b = [c.text for c in sorted(b.choices, key=lambda c: c.index)]
    assert texts_a == texts_b
    assert len(set(texts_a)) > 1, "the n=3 samples should differ (seed + i per sequence)"
    assert a.usage.prompt_tokens == len(tokenize(kw["prompt"]))  # counted once for the n sequences
    assert a.usage.completion_tokens == 30
    c = client.completions.create(**{**kw, "seed": 99})
    assert [x.text for x in sorted(c.choices, key=lambda c: c.index)] != texts_a


def test_n3_stream_has_every_index(client):
    stream = client.completions.create(model=MODEL, prompt="Hello", max_tokens=5, n=3, temperature=0.8,
                                       seed=7, stream=True, extra_body={"ignore_eos": True})
    texts, finishes = {}, {}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert finishes == {0: "length", 1: "length", 2: "length"}


def test_prompt_list_and_token_prompts(client, tokenize):
    r = client.completions.create(model=MODEL, prompt=["The sky is", "Water is"], max_tokens=4, temperature=0, n=2)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    by_index = {c.index: c.text for c in r.choices}
    assert by_index[0] == by_index[1] and by_index[2] == by_index[3]  # greedy: same within a prompt
    ids = tokenize("The sky is")
    t = client.completions.create(model=MODEL, prompt=ids, max_tokens=4, temperature=0)
    assert t.choices[0].text == by_index[0]


def test_stop_string(client):
    kw = dict(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0)
    free = client.completions.create(**kw).choices[0].text
    assert " 6" in free, free
    r = client.completions.create(stop=[" 6"], **kw)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == free[:free.index(" 6")]
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=[" 6"], stream=True, **kw)
                       if c.choices)
    assert streamed == r.choices[0].text


def test_logprobs_and_echo(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0,
                                  logprobs=2, echo=True)
    c = r.choices[0]
    lp = c.logprobs
    assert c.text.startswith("The capital of France is")
    n_prompt = r.usage.prompt_tokens
    assert len(lp.tokens) == n_prompt + r.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) == 2 for t in lp.top_logprobs[1:])
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == c.text
    # Greedy: each generated token is its position's best alternative.
    for tok, logp, top in zip(lp.tokens[n_prompt:], lp.token_logprobs[n_prompt:], lp.top_logprobs[n_prompt:]):
        assert max(top.values()) == pytest.approx(logp)
        assert top[tok] == pytest.approx(logp)


def test_echo_max_tokens_zero_scores_the_prompt(client):
    r = client.completions.create(model=MODEL, prompt="Paris is in France", max_tokens=0, echo=True, logprobs=1)
    c = r.choices[0]
    assert c.text == "Paris is in France"
    assert r.usage.completion_tokens == 0
    assert len(c.logprobs.tokens) == r.usage.prompt_tokens
    assert all(math.isfinite(x) for x in c.logprobs.token_logprobs[1:])


def test_chat(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 2+2?"}],
                                       max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert msg.role == "assistant"
    assert msg.content
    assert "<|im_" not in msg.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5


def test_chat_stream_with_usage(client):
    kw = dict(model=MODEL, messages=[{"role": "system", "content": "You are terse."},
                                     {"role": "user", "content": "Name a fruit."}], max_tokens=16, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi"}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 5
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or t.token.startswith("bytes:")
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob)


def test_chat_seed_reproducible(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me a word."}], max_tokens=8,
              temperature=1.0, seed=42)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_errors_surface_as_openai_exceptions(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=5, temperature=3)
    assert e.value.body["param"] == "temperature" if isinstance(e.value.body, dict) else True
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=5)
