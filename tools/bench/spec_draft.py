#!/usr/bin/env python3
"""Draft-model speculation on the shape models (issue "Speculative decoding", engine side).

Runs, alternating A B C D per round, `omnibus generate` on TARGET with:
  none           no speculation
  draft          --draft-model DRAFT (the engine backs off by measured cost)
  draft-forced   --draft-model DRAFT --no-spec-backoff (every step drafts)
  self-forced    --draft-model TARGET --no-spec-backoff (every guess accepted: the upper bound)
then the verification step's cost: `omnibus bench --pp 5 --tg 16` (a step of 1 + 4 tokens
against a one-token step). Prints a markdown table of medians (min-max) and writes it to --out.

  .venv/bin/python tools/bench/spec_draft.py --target models/shapes/llama3.1-8b-Q4_K_M.gguf \\
      --draft models/shapes/llama3.2-1b-Q4_K_M.gguf --rounds 3 --out spec-draft.md

Random-weight shape models: a different model's guesses are almost never right, and the
target drafting for itself is always right, so the two bound what a real draft gives.
"""
import argparse
import re
import statistics
import subprocess
import sys

PROMPT = "one two three four five six seven eight nine ten"


def generate(omnibus, target, extra, n, threads):
    cmd = [omnibus, "generate", "-m", target, "-p", PROMPT, "-n", str(n), "-t", str(threads),
           "--temp", "0", "--ignore-eos"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    m = re.search(r"generated: \d+ tokens in [\d.]+ ms \(([\d.]+) tok/s\)", out)
    s = re.search(r"speculative: (\d+) of (\d+) draft tokens accepted .*?, ([\d.]+) tokens per", out)
    return float(m[1]), (s[1], s[2], s[3]) if s else None


def step_costs(omnibus, target, threads):
    out = subprocess.run([omnibus, "bench", "-m", target, "--pp", "5", "--tg", "16", "-r", "2",
                          "-t", str(threads)], capture_output=True, text=True, check=True).stdout
    pp = float(re.search(r"\| pp5 \| ([\d.]+)", out)[1])
    tg = float(re.search(r"\| tg16 \| ([\d.]+)", out)[1])
    return (5 / pp) / (1 / tg)  # a 5-token step's time over a 1-token step's


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--omnibus", default="build/omnibus")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    modes = {
        "none": [],
        "draft": ["--draft-model", a.draft],
        "draft-forced": ["--draft-model", a.draft, "--no-spec-backoff"],
        "self-forced": ["--draft-model", a.target, "--no-spec-backoff"],
    }
    tps = {k: [] for k in modes}
    spec = {}
    ratios = []
    for r in range(a.rounds):
        for k, extra in modes.items():
            print(f"spec_draft: round {r + 1}/{a.rounds}: {k}", file=sys.stderr)
            t, s = generate(a.omnibus, a.target, extra, a.n, a.threads)
            tps[k].append(t)
            spec[k] = s
        ratios.append(step_costs(a.omnibus, a.target, a.threads))
    base = statistics.median(tps["none"])
    lines = [f"target {a.target}, draft {a.draft}, {a.threads} threads, -n {a.n}, "
             f"{a.rounds} rounds (median, min-max)", "",
             "| mode | tok/s | vs none | accepted / drafted | tokens per verify step |",
             "|---|---|---|---|---|"]
    for k in modes:
        med = statistics.median(tps[k])
        s = spec[k]
        lines.append(f"| {k} | {med:.2f} ({min(tps[k]):.2f}-{max(tps[k]):.2f}) | "
                     f"{med / base:.2f}x | {f'{s[0]} / {s[1]}' if s else ''} | {s[2] if s else ''} |")
    lines += ["", f"verify step of 1 + 4 tokens / one-token step (bench --pp 5 --tg 16): "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
