#!/usr/bin/env python3
"""Reference splits of the Llama 3 and Qwen 2 pre-tokenizer regexes, for
src/tokenizer/pre_tokenizer_test.cc (Llama3FamilyGolden).

Draws random strings from a mixed alphabet (ASCII letters, digits and
punctuation; spaces, tabs, \\r, \\n and other Unicode whitespace; apostrophes
and the letters of the contractions in both cases; accented, Cyrillic, Greek,
CJK and Hangul letters; combining marks, ZWJ and emoji; superscripts,
fractions, Roman numerals and digits of other scripts), splits each with
the regexes exactly as llama.cpp's llama-vocab.cpp lists them (its
case-insensitive contractions spelled as [sS] classes), using the `regex`
module from PyPI (the standard `re` has no \\p{L}), and writes
tests/golden/tokenizer/pre_tokenizer_llama3_qwen2.json:

    {"about": ..., "regex": {"llama3": ..., "qwen2": ...}, "seed": ..,
     "cases": [{"text": "...", "llama3": [2, 1, ...], "qwen2": [...]}, ...]}

where each list holds the words' lengths in codepoints. omnibus's hand-written
scanners must split every case the same way.

The alphabet uses only codepoints whose Unicode class (letter, number,
whitespace, other) has not changed since Unicode 6, so that the `regex`
module's Unicode version (newer than the 15.1 of omnibus's and llama.cpp's
tables) cannot make a difference.

How to run (from the repository root; deterministic for a given seed):

    .venv/bin/pip install -r tests/requirements.txt      # regex
    .venv/bin/python tools/golden/gen_pre_tokenizer_golden.py
"""
import argparse
import json
import random
import string
import sys

import regex

CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
REST = r"[^\r\n\p{L}\p{N}]?\p{L}+|%s| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PATTERNS = {
    "llama3": CONTRACTIONS + "|" + REST % r"\p{N}{1,3}",  # LLAMA_VOCAB_PRE_TYPE_LLAMA3
    "qwen2": CONTRACTIONS + "|" + REST % r"\p{N}",        # LLAMA_VOCAB_PRE_TYPE_QWEN2
}


def alphabet():
    """(codepoints, weight) groups; a string draws a group, then one of its members."""
    return [
        (list(string.ascii_letters), 30),
        (list("sStTrReEvVmMlLdD"), 10),
        (list(string.digits), 15),
        (list(string.punctuation), 12),
        (["'"], 10),
        ([" "], 25),
        (["\t", "\n", "\r", "\x0b", "\x0c"], 8),
        (["\u00a0", "\u3000", "\u2009", "\u2028", "\u0085", "\u1680"], 3),
        (list("éèàçñöüßøåÉÀÜſı") + list("приветМИР") + list("αβγΩ"), 8),
        (list("日本語中文字한국어ひらがなカタ"), 6),
        (["\u0301", "\u200d", "\u200b", "\ufe0f", "😀", "👋", "🌍", "€", "→", "✓"], 5),
        (list("²³¹½¼Ⅻⅷ①٣٤٥४२１２"), 6),
    ]


def random_text(rng, groups, weights):
    n = rng.randint(1, 24)
    return "".join(rng.choice(rng.choices(groups, weights)[0]) for _ in range(n))


def split(pattern, text):
    words = regex.findall(pattern, text)
    assert "".join(words) == text, (pattern, text)  # the alternatives cover everything
    return [len(w) for w in words]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/golden/tokenizer/pre_tokenizer_llama3_qwen2.json")
    ap.add_argument("--n", type=int, default=3000, help="random strings")
    ap.add_argument("--seed", type=int, default=20240501)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    groups = [g for g, _ in alphabet()]
    weights = [w for _, w in alphabet()]
    compiled = {k: regex.compile(p) for k, p in PATTERNS.items()}
    cases = []
    for _ in range(args.n):
        text = random_text(rng, groups, weights)
        case = {"text": text}
        for k, p in compiled.items():
            case[k] = split(p, text)
        cases.append(case)

    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write('  "about": "Python regex splits (word lengths in codepoints); '
                'regenerate with tools/golden/gen_pre_tokenizer_golden.py",\n')
        f.write(f'  "regex_module": {json.dumps(regex.__version__)},\n')
        f.write(f'  "seed": {args.seed},\n')
        f.write(f'  "regex": {json.dumps(PATTERNS, ensure_ascii=False)},\n')
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write(f"    {json.dumps(c, ensure_ascii=False)}{sep}\n")
        f.write("  ]\n}\n")
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
