"""Sliding-window KV on the real Gemma 3 270M (window 512, 15 of 18 layers):
perplexity at ctx 512, 2048 and 4096 is bitwise that of --no-sliding-window-kv
(every layer keeping every token): the mean NLL to the last bit, and at ctx
512 the logits file byte for byte (4096's is 1 GiB); and through the
server a prefix-cache hit on a prompt far longer than the window answers with
the same tokens and log-probabilities as a server without either feature."""
import filecmp
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from conftest import omnibus_bin

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("OMNIBUS_MODELS_DIR", ROOT / "models"))
GEMMA = "gemma3-270m"

pytestmark = pytest.mark.skipif(not (MODELS / f"{GEMMA}.gguf").exists(),
                                reason=f"{GEMMA} not installed (scripts/fetch_models.sh)")


def perplexity(ctx, chunks, *flags):
    """The exact mean NLL line of `omnibus perplexity`."""
    r = subprocess.run([omnibus_bin(), "perplexity", "-m", GEMMA, "-f", str(ROOT / "tests/data/perplexity.txt"),
                        "-c", str(ctx), "--chunks", str(chunks), "-t", "2", *flags],
                       capture_output=True, text=True, timeout=600, check=True)
    m = re.search(r"^perplexity: mean NLL .* \(exactly (\S+)\) over (\d+) tokens$", r.stderr, re.M)
    assert m, r.stderr[-2000:]
    return m.group(1), int(m.group(2))


@pytest.mark.parametrize("ctx,chunks,dtype", [(512, 2, "f16"), (2048, 1, "f16"), (4096, 1, "f16"),
                                               (2048, 1, "kivi2")])
def test_perplexity_bitwise_equal(ctx, chunks, dtype):
    hybrid = perplexity(ctx, chunks, "--kv-cache-dtype", dtype)
    assert hybrid[1] == chunks * (ctx // 2 - 1)  # the second half of each chunk is scored
    assert hybrid == perplexity(ctx, chunks, "--kv-cache-dtype", dtype, "--no-sliding-window-kv")


def test_perplexity_logits_bytewise_equal(tmp_path):
    files = []
    for flags in ((), ("--no-sliding-window-kv",)):
        files.append(tmp_path / f"logits-{len(flags)}.bin")
        perplexity(512, 1, "--kl-divergence-base-out", str(files[-1]), *flags)
    assert files[0].stat().st_size > 256 * 262144  # every scored token's logits
    assert filecmp.cmp(files[0], files[1], shallow=False)


def complete(base_url, prompt):
    body = {"model": GEMMA, "prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 2}
    r = httpx.post(base_url + "/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    return r.json()


def test_prefix_hit_past_the_window_answers_as_without_it(start_server):
    hybrid = start_server("--kv-cache-memory", "256MiB", "--max-model-len", "4096", model=GEMMA)
    assert "sliding-window KV: 6 layer groups of 3 layers (window 512)" in hybrid.output()
    plain = start_server("--kv-cache-memory", "256MiB", "--max-model-len", "4096", "--no-sliding-window-kv",
                         "--no-prefix-caching", model=GEMMA)
    assert "sliding-window KV" not in plain.output()
    for server, groups in ((hybrid, 6), (plain, 1)):
        info = httpx.get(server.base_url + "/get_server_info", timeout=10).json()
        assert info["kv_cache"]["layer_groups"] == groups
    # About 1500 tokens: the sliding layers let go of most of the prompt.
    system = "You are a careful assistant who answers in one short sentence. " * 120
    prompt = system + "Question: which planet is closest to the sun?"
    want = complete(plain.base_url, prompt)
    first = complete(hybrid.base_url, prompt)
    # A second prompt sharing the system part hits the cache (full blocks) and
    # reads the sliding layers' window blocks kept for it.
    other = system + "Question: what colour is the sky?"
    second = complete(hybrid.base_url, prompt)
    other_hybrid = complete(hybrid.base_url, other)
    other_plain = complete(plain.base_url, other)
    assert want["usage"]["prompt_tokens"] > 1024
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= want["usage"]["prompt_tokens"] - 16, second["usage"]
    assert other_hybrid["usage"]["prompt_tokens_details"]["cached_tokens"] > 1024
    for got, ref in ((first, want), (second, want), (other_hybrid, other_plain)):
        assert got["choices"][0]["text"] == ref["choices"][0]["text"]
        assert got["choices"][0]["logprobs"] == ref["choices"][0]["logprobs"]
