"""`omnibus generate --chat`: a scripted two-turn terminal chat.

The user lines are piped into stdin; each answer is rendered through the
model's chat template, streamed to stdout (one line per answer here) and
ends at the model's end-of-generation token; timings go to stderr, one line
per turn. Skipped when the model file is missing.
"""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def omnibus_bin():
    return os.environ.get("OMNIBUS_BIN", str(ROOT / "build" / "omnibus"))


def model_present(name):
    dirs = [os.environ.get("OMNIBUS_MODELS_DIR", ""), str(ROOT / "models")]
    return any(d and (pathlib.Path(d) / f"{name}.gguf").exists() for d in dirs)


def chat(model, lines, *extra, n_predict=64):
    cmd = [omnibus_bin(), "generate", "-m", model, "--chat", "--temp", "0", "-n", str(n_predict), *extra]
    return subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600,
                          cwd=ROOT)


@pytest.mark.skipif(not model_present("smollm2-135m"), reason="models/smollm2-135m.gguf not found")
def test_smollm2_two_turn_chat_answers_and_keeps_the_conversation():
    r = chat("smollm2-135m", ["Hello!", "What is the capital of France?"],
             "--system", "You are a helpful assistant.")
    assert r.returncode == 0, r.stderr
    turns = [line for line in r.stderr.splitlines() if line.startswith("[prompt:")]
    assert len(turns) == 2, r.stderr
    # Both answers ended at the end-of-turn token, not at the length limit.
    assert all("stopped by end of generation token" in t for t in turns), r.stderr
    # The second turn reused the first turn's tokens from the KV cache.
    assert "(0 cached)" in turns[0] and "(0 cached)" not in turns[1], turns
    answers = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(answers) == 2, r.stdout
    assert "Paris" in answers[1], r.stdout
    # Special tokens of the template never leak into the printed answers.
    assert "<|im_start|>" not in r.stdout and "<|im_end|>" not in r.stdout


@pytest.mark.skipif(not model_present("smollm2-135m"), reason="models/smollm2-135m.gguf not found")
def test_first_message_from_prompt_flag_and_custom_template(tmp_path):
    template = tmp_path / "echo.jinja"
    # A template that shows the model a plain-text transcript.
    template.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant:{% endif %}")
    r = chat("smollm2-135m", [], "-p", "Say hi.", "--chat-template-file", str(template), n_predict=4)
    assert r.returncode == 0, r.stderr
    assert sum(1 for line in r.stderr.splitlines() if line.startswith("[prompt:")) == 1, r.stderr


@pytest.mark.skipif(not model_present("smollm2-135m"), reason="models/smollm2-135m.gguf not found")
def test_bad_template_is_a_clear_error(tmp_path):
    template = tmp_path / "bad.jinja"
    template.write_text("{% for m in messages %}{{ m.content }")
    r = chat("smollm2-135m", ["hi"], "--chat-template-file", str(template))
    assert r.returncode != 0
    assert "chat template line 1" in r.stderr, r.stderr


@pytest.mark.skipif(not model_present("gemma3-270m"), reason="models/gemma3-270m.gguf not found")
def test_gemma3_chat_runs_two_turns_with_the_builtin_template():
    # The bundled Gemma-3-270M GGUF ships no chat template: omnibus falls back
    # to Gemma's. (Its answers are not checked for content: this GGUF gives
    # incoherent chat answers under llama.cpp too.)
    r = chat("gemma3-270m", ["Hello!", "What is the capital of France?"], n_predict=16)
    assert r.returncode == 0, r.stderr
    assert sum(1 for line in r.stderr.splitlines() if line.startswith("[prompt:")) == 2, r.stderr
    assert "<start_of_turn>" not in r.stdout
