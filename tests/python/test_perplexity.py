"""`omnibus perplexity` against llama.cpp's llama-perplexity on the same GGUF
and text (golden value: tests/golden/perplexity/<model>.json, made by
tools/golden/gen_perplexity_ref.sh). Acceptance: within 1% for the bundled
models; within 0.5% for the random-weight model of each architecture family
(models/random/, tools/golden/make_random_models.py), whose perplexity is
huge (about 1e8: random weights predict confidently and wrongly) but whose
log, the mean NLL, is what both engines compute token by token."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OMNIBUS = os.environ.get("OMNIBUS_BIN", str(ROOT / "build" / "omnibus"))
MODELS = Path(os.environ.get("OMNIBUS_MODELS_DIR", ROOT / "models"))


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_perplexity_within_one_percent_of_llama_cpp(name):
    golden_path = ROOT / "tests/golden/perplexity" / f"{name}.json"
    if not golden_path.exists():
        pytest.skip(f"no golden perplexity for {name}")
    if not (MODELS / f"{name}.gguf").exists():
        pytest.skip(f"{name} not installed (scripts/fetch_models.sh)")
    run_and_compare(name, name, golden_path, 0.01)


FAMILIES = ["llama3", "mistral", "qwen2", "qwen3", "qwen3moe", "phi3"]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_perplexity_within_half_a_percent_of_llama_cpp(family):
    model = MODELS / "random" / f"{family}.gguf"
    if not model.exists():
        pytest.skip(f"{model} not generated (scripts/fetch_models.sh)")
    run_and_compare(f"random-{family}", str(model),
                    ROOT / "tests/golden/perplexity" / f"random-{family}.json", 0.005)


def run_and_compare(name, model, golden_path, tolerance):
    golden = json.loads(golden_path.read_text())
    out = subprocess.run(
        [OMNIBUS, "perplexity", "-m", model, "-f", str(ROOT / golden["text"]),
         "--ctx-size", str(golden["ctx_size"]), "--threads", "2"],
        capture_output=True, text=True, timeout=900, check=True)
    m = re.search(r"^perplexity: ([0-9.]+)$", out.stdout, re.M)
    assert m, out.stdout + out.stderr
    ours, ref = float(m.group(1)), golden["perplexity"]
    print(f"{name}: omnibus {ours:.4f} vs llama-perplexity {ref:.4f} ({(ours / ref - 1) * 100:+.2f}%)")
    assert abs(ours / ref - 1) < tolerance
