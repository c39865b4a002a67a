"""Every architecture family omnibus runs, end to end: `omnibus serve` and
`omnibus generate` on the random-weight GGUF of each (models/random/<family>.gguf,
tools/golden/make_random_models.py; scripts/fetch_models.sh makes them).

Per family: a chat completion through the GGUF's own chat template (Llama 3
headers, Mistral [INST], Phi-3 turns, Qwen's ChatML), streamed and not,
giving the same greedy text; concurrent requests giving what each gives alone
(continuous batching; for qwen3moe, other tokens in the same expert matmuls);
and the CLI's greedy text equal to the server's. Correctness against llama.cpp
is in src/model/llama_family_golden_test.cc (logits, greedy choices) and
tests/python/test_perplexity.py.
"""
import concurrent.futures
import json
import subprocess

import httpx
import pytest

from conftest import ROOT, omnibus_bin

FAMILIES = ["llama3", "mistral", "qwen2", "qwen3", "qwen3moe", "phi3"]
PROMPTS = ["The capital of France is", "def add(a, b):\n   ", "Once upon a time " * 8,
           "1, 2, 3, 4,"]


def model_path(family):
    path = ROOT / "models" / "random" / f"{family}.gguf"
    if not path.exists():
        pytest.skip(f"{path} not generated (scripts/fetch_models.sh)")
    return str(path)


@pytest.fixture(scope="module", params=FAMILIES)
def family_server(request, start_server):
    model = model_path(request.param)
    return request.param, model, start_server("--max-model-len", "1024", "--kv-cache-memory",
                                              "64MiB", model=model)


def complete(server, prompt, **extra):
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, **extra}
    r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_chat_through_the_models_template(family_server):
    family, _, server = family_server
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is 2 + 2?"}]
    if family == "mistral":  # its template takes no system message
        messages = messages[1:]
    body = {"messages": messages, "max_tokens": 10, "temperature": 0}
    r = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    choice = out["choices"][0]
    assert choice["finish_reason"] in ("length", "stop")
    assert out["usage"]["prompt_tokens"] > 8  # the template's tokens around the message
    text = choice["message"]["content"]

    streamed = []
    with httpx.stream("POST", server.base_url + "/v1/chat/completions",
                      json={**body, "stream": True}, timeout=120) as s:
        assert s.status_code == 200
        for line in s.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            streamed.append(delta.get("content") or "")
    assert "".join(streamed) == text


def test_concurrent_requests_match_each_alone(family_server):
    _, _, server = family_server
    alone = [complete(server, p, logprobs=1) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: complete(server, p, logprobs=1), PROMPTS))
    for a, t in zip(alone, together):
        assert a["text"] == t["text"]
        assert a["logprobs"]["token_logprobs"] == t["logprobs"]["token_logprobs"]


def test_generate_cli_matches_the_server(family_server):
    _, model, server = family_server
    prompt = PROMPTS[0]
    out = subprocess.run(
        [omnibus_bin(), "generate", "-m", model, "-p", prompt, "-n", "12", "--temp", "0"],
        capture_output=True, text=True, timeout=120, check=True)
    assert complete(server, prompt)["text"] in out.stdout, out.stdout
