"""The kernels' ISA tier (kernels/cpu_features.h) is a speed choice only: a
server capped at OMNIBUS_ISA=avx2 and one at the CPU's best tier give the same
greedy tokens with bitwise the same logprobs, for single requests and for a
concurrent batch (prompts long enough to run the many-token kernels). On a CPU
whose best tier is avx2 both servers run the same kernels and the test still
checks the cap and the reporting.
"""
import concurrent.futures
import subprocess

import httpx

from conftest import ROOT, omnibus_bin

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who " * 6,
    "List three prime numbers:",
    "In 1969, the first humans to walk on the Moon were " * 3,
]


def completions(server):
    def one(prompt):
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 2}
        r = httpx.post(server.base_url + "/v1/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]

    alone = [one(p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(one, PROMPTS))
    return alone, together


def test_tiers_give_identical_outputs(start_server):
    capped = start_server("--max-model-len", "1024", env={"OMNIBUS_ISA": "avx2"})
    best = start_server("--max-model-len", "1024")
    info_capped = httpx.get(capped.base_url + "/get_server_info", timeout=10).json()
    info_best = httpx.get(best.base_url + "/get_server_info", timeout=10).json()
    assert info_capped["isa"] == "avx2"
    print(f"tiers compared: avx2 and {info_best['isa']}")
    assert "kernels at ISA tier avx2" in capped.output()
    a_alone, a_together = completions(capped)
    b_alone, b_together = completions(best)
    for i, prompt in enumerate(PROMPTS):
        assert a_alone[i] == b_alone[i], f"prompt {i}: {a_alone[i][0]!r} vs {b_alone[i][0]!r}"
        assert a_together[i] == b_together[i], f"prompt {i} (batched)"
        assert a_alone[i] == a_together[i], f"prompt {i}: batch invariance"


def test_unknown_tier_is_a_clear_error():
    r = subprocess.run([omnibus_bin(), "bench", "-m", "smollm2-135m", "--pp", "8", "--tg", "1"], cwd=ROOT,
                       env={"OMNIBUS_ISA": "avx1024", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "OMNIBUS_ISA=avx1024: unknown tier (one of scalar, avx2, avx-vnni, avx512, amx)" in r.stderr
