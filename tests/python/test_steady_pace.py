"""--max-itl-ms (docs/performance.md, "Steady pace"): a server that paces prompt chunks while
sequences decode answers exactly what the plain session server answers (greedy), and a long
prompt still completes when the target is below any step's time (prompts keep at least one token
a step). The pace itself is measured by tools/bench/steady_pace.py, not asserted here (timing).
"""
import concurrent.futures
import subprocess

import httpx

from conftest import omnibus_bin

FLAGS = ("--max-num-seqs", "64", "--kv-cache-memory", "128MiB", "--max-model-len", "2048")
LONG = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(60))


def complete(server, prompt, max_tokens):
    r = httpx.post(server.base_url + "/v1/completions", timeout=300,
                   json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                         "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"], r.json()["usage"]


def test_paced_server_answers_as_the_plain_one(start_server, server):
    paced = start_server(*FLAGS, "--max-itl-ms", "0.5")
    jobs = [(f"Story {i}: once upon a time", 48) for i in range(3)] + [(LONG, 8)]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        # The streams first, so the long prompt arrives while they decode.
        streams = [pool.submit(complete, paced, p, n) for p, n in jobs[:3]]
        long = pool.submit(complete, paced, *jobs[3])
        got = [f.result() for f in streams] + [long.result()]
    assert got[3][1]["prompt_tokens"] > 500  # a prompt of many chunks
    for (prompt, n), (text, _) in zip(jobs, got):
        assert text == complete(server, prompt, n)[0], prompt[:40]


def test_max_itl_ms_must_not_be_negative():
    r = subprocess.run([omnibus_bin(), "serve", "--max-itl-ms", "-1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "--max-itl-ms" in r.stderr
