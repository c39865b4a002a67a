"""`omnibus generate` and /v1/completions are one implementation: the same
prompt, seed, temperature, stop strings, min_tokens, n and logprobs give the
same completions, finish reasons and logprobs, because generate submits its
request to the same Engine and turns the events into text with the server's
ChoiceOutput (cli/engine_request.h)."""
import json
import subprocess

import httpx

from conftest import MODEL, ROOT, omnibus_bin

PROMPT = "Once upon a time, in a small village by the sea,"


def generate(tmp_path, *args):
    out = tmp_path / "generate.json"
    cmd = [omnibus_bin(), "generate", "-m", MODEL, "-t", "2", "-p", PROMPT, "--json", str(out)] + list(args)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text()), p


def complete(base_url, **fields):
    r = httpx.post(base_url + "/v1/completions", json={"model": MODEL, "prompt": PROMPT, **fields}, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


def test_generate_matches_the_api_for_n_completions_with_stop_and_min_tokens(base_url, tmp_path):
    fields = dict(max_tokens=40, temperature=0.9, seed=1234, stop=[".", "\n\n"], min_tokens=4, n=3, logprobs=2)
    api = complete(base_url, **fields)
    cli, p = generate(tmp_path, "-n", "40", "--temp", "0.9", "--seed", "1234", "--stop", ".", "--stop", "\\n\\n",
                      "--min-tokens", "4", "--num-completions", "3", "--logprobs", "2")
    assert len(api["choices"]) == len(cli["choices"]) == 3
    for a, c in zip(api["choices"], cli["choices"]):
        assert c["text"] == a["text"], (c["text"], a["text"])
        assert c["finish_reason"] == a["finish_reason"]
        assert c["logprobs"] == a["logprobs"]
    for k in ("prompt_tokens", "completion_tokens"):  # cached_tokens depend on the server's earlier requests
        assert cli["usage"][k] == api["usage"][k], (cli["usage"], api["usage"])
    # The seeds differ per completion (seed + i), and a stop string ended at least one.
    assert len({c["text"] for c in api["choices"]}) > 1, api
    assert "stop" in [c["finish_reason"] for c in api["choices"]], api
    # Printed: each completion after the prompt, the stop strings never.
    for i, c in enumerate(cli["choices"]):
        assert f"--- completion {i + 1} of 3 ---\n{PROMPT}{c['text']}\n" in p.stdout, p.stdout


def test_generate_greedy_stream_matches_the_api(base_url, tmp_path):
    api = complete(base_url, max_tokens=24, temperature=0)
    cli, p = generate(tmp_path, "-n", "24", "--temp", "0")
    assert cli["choices"][0]["text"] == api["choices"][0]["text"]
    assert p.stdout == PROMPT + api["choices"][0]["text"] + "\n"
