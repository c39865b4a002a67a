"""Draft-model speculation end to end (`--speculative draft --draft-model`, docs/engine.md,
"Speculative decoding"): a server whose draft model is SmolLM2 itself (every greedy guess
right: the upper bound) answers exactly what the plain session server answers, greedy and
seeded, plain and streamed, with logprobs, n > 1, stop strings and structured output; /metrics
count the draft model's forwards, guesses and time; a draft model whose vocabulary reads
differently is refused at start with a clear error.
"""
import subprocess

import pytest

from conftest import MODEL, ROOT, omnibus_bin
from test_speculative import CASES, FLAGS, REPEAT, assert_same_choices, post, spec_counters


@pytest.fixture(scope="module")
def drafting(start_server):
    # --no-spec-backoff: a draft as dear as its target never pays, and the engine would stop
    # drafting (as it should); here every step drafts, so every case meets a draft.
    return start_server(*FLAGS, "--draft-model", MODEL, "--num-speculative-tokens", "4",
                        "--draft-kv-cache-memory", "64MiB", "--no-spec-backoff")


@pytest.mark.parametrize("path,body", CASES)
def test_answers_equal_the_plain_servers(server, drafting, path, body):
    assert_same_choices(post(drafting, path, body), post(server, path, body))


def test_metrics_count_the_draft_models_work(drafting):
    before = spec_counters(drafting)
    post(drafting, "/v1/completions", {"prompt": REPEAT, "max_tokens": 48, "temperature": 0})
    after = spec_counters(drafting)

    def delta(name):
        return after[name] - before.get(name, 0)
    drafted = delta("omnibus:spec_decode_num_draft_tokens_total")
    accepted = delta("omnibus:spec_decode_num_accepted_tokens_total")
    # The target drafting for itself, greedy: every guess verified is accepted.
    assert drafted > 0 and accepted == drafted
    assert delta("omnibus:spec_decode_draft_model_forwards_total") > 0
    assert delta("omnibus:spec_decode_draft_model_tokens_total") >= drafted
    assert delta("omnibus:spec_decode_draft_model_seconds_total") > 0


def test_a_draft_with_another_vocabulary_is_refused():
    r = subprocess.run([omnibus_bin(), "generate", "-m", MODEL, "--draft-model", "gemma3-270m",
                        "-p", "hi", "-n", "2"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "--draft-model gemma3-270m" in r.stderr and "vocabulary" in r.stderr, r.stderr
    r = subprocess.run([omnibus_bin(), "generate", "-m", MODEL, "--speculative", "draft",
                        "-p", "hi", "-n", "2"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "--draft-model" in r.stderr, r.stderr
