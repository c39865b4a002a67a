"""`omnibus perplexity --kl-divergence-base` against llama.cpp's own logits
(llama-perplexity --kl-divergence-base; tests/golden/kld/, made by
tools/golden/gen_kld_base.sh on models/random/tiny.gguf, a random-weight model
with a 512-token vocabulary so the file is small).

omnibus must be at least as close to llama.cpp's default attention path as
llama.cpp's other path (flash attention off) is; its own logits written with
--kl-divergence-base-out must read back as a base (KL divergence ~0 against
itself) with the header and tokens llama.cpp writes; bad bases and
mismatched runs are refused with the reason.

(The random model's perplexity is ~6e5: many targets sit more than 16 nats
below the top token, where the file format clamps log-probabilities, so
PPL(Q)/PPL(base) reads 1.67 for llama.cpp against itself too; KL divergence
and the same-top rate are the measures here.)
"""
import hashlib
import json
import re
import subprocess

import pytest

from conftest import ROOT, omnibus_bin

GOLDEN = ROOT / "tests/golden/kld"
MODEL = ROOT / "models/random/tiny.gguf"
TEXT = ROOT / "tests/data/perplexity.txt"


@pytest.fixture(scope="module")
def golden():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} not generated (scripts/fetch_models.sh)")
    g = json.loads((GOLDEN / "tiny.json").read_text())
    assert hashlib.sha256(MODEL.read_bytes()).hexdigest() == g["model_sha256"], \
        "models/random/tiny.gguf is not the file the base was made from"
    return g


def perplexity(*args, model=MODEL, check=True):
    out = subprocess.run([omnibus_bin(), "perplexity", "-m", str(model), *map(str, args)],
                         capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def stats(stdout):
    mean = float(re.search(r"^Mean\s+KLD:\s+(-?[0-9.]+)", stdout, re.M).group(1))
    top = float(re.search(r"^Same top p:\s+([0-9.]+)", stdout, re.M).group(1))
    return mean, top


def test_as_close_to_llama_cpp_as_llama_cpp_is_to_itself(golden):
    out = perplexity("-f", TEXT, "--kl-divergence-base", GOLDEN / "tiny.kld")
    assert "tokenization and chunking agree" in out.stderr
    mean, top = stats(out.stdout)
    ref = golden["llama_cpp_flash_attn_off"]
    print(f"omnibus f16 KV: mean KLD {mean}, same top {top}%; llama.cpp flash attention off: "
          f"{ref['mean_kld']}, {ref['same_top_percent']}%")
    assert 0 <= mean < ref["mean_kld"]
    assert top >= ref["same_top_percent"]
    # A 2-bit KV cache moves the distributions measurably further.
    kivi2, _ = stats(perplexity("--kl-divergence-base", GOLDEN / "tiny.kld",
                                "--kv-cache-dtype", "kivi2").stdout)
    assert kivi2 > 2 * mean


def test_own_logits_are_a_base_in_llama_cpps_format(golden, tmp_path):
    mine = tmp_path / "omnibus.kld"
    perplexity("-f", TEXT, "-c", golden["n_ctx"], "--chunks", golden["n_chunks"],
               "--kl-divergence-base-out", mine)
    theirs = (GOLDEN / "tiny.kld").read_bytes()
    ours = mine.read_bytes()
    assert len(ours) == len(theirs)
    header = 8 + 12 + 4 * golden["n_ctx"] * golden["n_chunks"]  # magic, sizes, tokens
    assert ours[:header] == theirs[:header]
    mean, top = stats(perplexity("--kl-divergence-base", mine).stdout)
    assert abs(mean) < 1e-5 and top == 100.0


def test_bad_bases_and_mismatches_are_refused(golden, tmp_path):
    base = (GOLDEN / "tiny.kld").read_bytes()
    truncated = tmp_path / "truncated.kld"
    truncated.write_bytes(base[:-100])
    out = perplexity("--kl-divergence-base", truncated, check=False)
    assert out.returncode == 1 and "bytes, its header needs" in out.stderr
    not_logits = tmp_path / "text.kld"
    not_logits.write_text("hello")
    out = perplexity("--kl-divergence-base", not_logits, check=False)
    assert out.returncode == 1 and "not a llama-perplexity logits file" in out.stderr
    out = perplexity("--kl-divergence-base", GOLDEN / "tiny.kld", "-c", "256", check=False)
    assert out.returncode == 1 and "differs from the base file's context 128" in out.stderr
    other_text = tmp_path / "other.txt"
    other_text.write_text("A different text altogether. " * 400)
    out = perplexity("-f", other_text, "--kl-divergence-base", GOLDEN / "tiny.kld", check=False)
    assert out.returncode == 1 and "tokenization differs from the base file at token" in out.stderr
    other_model = ROOT / "models/random/qwen2.gguf"
    if other_model.exists():
        out = perplexity("--kl-divergence-base", GOLDEN / "tiny.kld", model=other_model,
                         check=False)
        assert out.returncode == 1 and "vocabulary has 512 tokens" in out.stderr
    out = perplexity("--kl-divergence-base-out", tmp_path / "x.kld", check=False)
    assert out.returncode == 1
