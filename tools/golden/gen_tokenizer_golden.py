#!/usr/bin/env python3
"""Golden token ids from llama.cpp's tokenizer, for src/tokenizer/tokenizer_test.cc.

Writes tests/golden/tokenizer/<name>.json: for each test string, the ids that
llama.cpp's llama_tokenize() returns with parse_special true and false (and,
for a few, with add_special), plus the vocabulary facts the tests check
(BOS/EOS, EOG set). omnibus must reproduce every id exactly.

How to run (from the repository root; rerunnable, output is deterministic):

    # llama-cpp-python's Python package needs three pure-Python dependencies:
    python3 -m pip install --target /tmp/llama_deps typing_extensions diskcache jinja2
    PYTHONPATH=/work/ref/llama_cpp_python-0.3.36:/tmp/llama_deps \\
    LLAMA_CPP_LIB_PATH=/work/ref/build/bin \\
        python3 tools/golden/gen_tokenizer_golden.py \\
            --model models/smollm2-135m.gguf --out tests/golden/tokenizer/smollm2-135m.json

/work/ref/llama_cpp_python-0.3.36 is the llama-cpp-python source tree and
/work/ref/build/bin holds libllama.so / libggml*.so built from its vendored
llama.cpp (in a checkout with the .ref link: .ref/llama_cpp_python-0.3.36 and
.ref/build/bin). Only the vocabulary is loaded (vocab_only=True), so it takes
seconds.

The Llama 3 and Qwen 2 pre-tokenizers are checked on SmolLM2's vocabulary under
those pre-tokenizers (tools/golden/make_vocab_gguf.py makes the GGUFs):

    for pre in llama-bpe qwen2; do
      ... python3 tools/golden/gen_tokenizer_golden.py \\
            --model models/random/smollm2-vocab-$pre.gguf \\
            --out tests/golden/tokenizer/smollm2-vocab-$pre.json
    done

The output records the GGUF's sha256 ("model_sha256"); the C++ test refuses a
GGUF with another one.

Strings that are not valid UTF-8 cannot be JSON strings; they are stored as
"text_hex" (hex of the raw bytes) instead of "text".
"""
import argparse
import hashlib
import json
import random
import sys

import llama_cpp  # noqa: E402  (needs PYTHONPATH / LLAMA_CPP_LIB_PATH, see above)


def hand_written():
    s = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        "\t",
        "\t\t  \t",
        " \n \n",
        "Hello",
        "Hello world",
        " Hello world",
        "Hello world ",
        "   leading spaces",
        "trailing spaces   ",
        "  both  ",
        "Hello, world! How are you today?",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX",
        "tHe QuIcK bRoWn",
        "I'm sure it's fine, they're here, we've done it, I'll go, he'd say, don't.",
        "I'M SURE IT'S FINE, THEY'RE HERE",
        "'s 't 're 've 'm 'll 'd",
        "''''",
        "rock 'n' roll",
        "O'Neil's book",
        "a's'b't're",
        "It’s a curly apostrophe’s test",
        "12345",
        "1234567890123456789012345678901234567890",
        "3.14159265358979",
        "-42 +17 1e10 0x1F 0b1010 1_000_000",
        "Version 2.0.1-rc3 released on 2024-01-15 at 12:34:56.",
        "Call 555-123-4567 or +1 (800) 555-0199",
        "$1,234.56 and €99,99 and ¥1000 and £5",
        "100% of 50 is 50; 1/3 ≈ 0.333",
        "x² + y² = z²; ½ ¼ ¾; Ⅻ ⅷ; ① ② ③",
        "٣٤٥ ١٢ (Arabic-Indic digits) and ४२ (Devanagari)",
        "café résumé naïve façade coöperate",
        "Ünïcödé ÀÉÎÕÜ àéîõü ß Æ Ø Å",
        "Crème brûlée à la mode",
        "Cafe\u0301 (combining acute) vs caf\u00e9",
        "Zürich, Kraków, Reykjavík, São Paulo, Malmö",
        "Привет, мир! Как дела?",
        "Γειά σου Κόσμε",
        "שלום עולם",
        "مرحبا بالعالم",
        "नमस्ते दुनिया",
        "สวัสดีชาวโลก",
        "こんにちは世界",
        "カタカナとひらがなと漢字",
        "你好，世界！",
        "我爱自然语言处理。",
        "안녕하세요 세계",
        "中文English混合text日本語",
        "Ελληνικά and Русский and 日本語 in one line",
        "😀",
        "😀😃😄😁",
        "Hello 👋 world 🌍!",
        "👨‍👩‍👧‍👦",
        "👩🏽‍💻 coding",
        "🏳️‍🌈 flag",
        "🇺🇸🇬🇧🇯🇵",
        "❤️ ✨ ☕ ⚡",
        "emoji at end 🎉",
        "🤖🤖🤖 robots",
        "a\u200db (zero width joiner) a\u200bb (zero width space)",
        "non\u00a0breaking\u00a0space",
        "ideographic\u3000space",
        "line\u2028separator and para\u2029separator",
        "en\u2002space em\u2003space thin\u2009space",
        "\u0085next line",
        "soft\u00adhyphen",
        "\u00a0\u00a0leading nbsp",
        "def foo(x):\n    return x + 1\n",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
        "if (a && b || !c) { x <<= 2; y >>= 3; z ^= ~w; }",
        "const f = (a, b) => a ?? b;  // nullish",
        "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
        "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
        "```python\nprint('hi')\n```",
        "    four spaces\n        eight spaces\n\ttab",
        "a  b   c    d     e",
        "a\tb\t\tc",
        "a\nb\n\nc\n\n\nd",
        "a \n b \n\n c",
        "line1\r\nline2\r\n",
        "trailing newline\n",
        "\n\nleading newlines",
        "https://example.com/path?query=1&b=2#frag",
        "user@example.com",
        "C:\\Users\\name\\file.txt",
        "/usr/local/bin/python3 --version",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "!!!???...,,,;;;:::",
        "...",
        "—–-",
        "«quoted» „German“ “English” ‘single’",
        "¿Qué? ¡Sí!",
        "@#$%^&*()_+-=[]{}|;':\",./<>?`~",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "text<|im_end|>text",
        "<|im_start|><|im_end|><|im_start|>",
        " <|im_start|> spaced <|im_end|> ",
        "<|im_start|assistant",
        "<|im_start|><|im_start|>user",
        "<repo_name>omnibus<file_sep>main.cc<filename>x",
        "<reponame>foo<gh_stars>10",
        "<jupyter_start><jupyter_code>print(1)<jupyter_output>1<empty_output>",
        "<issue_start>bug<issue_comment>fix<issue_closed>",
        "<|endoftext|><|endoftext|>",
        "<|im_end",
        "im_end|>",
        "<s> </s> <unk> [INST] <<SYS>>",
        "<|",
        "|>",
        "A",
        "a",
        "0",
        "é",
        "中",
        "ab",
        "Supercalifragilisticexpialidocious",
        "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "abababababababababababababababababababab",
        "The the THE tHE",
        "Mr. Smith went to Washington, D.C., in 1999.",
        "e.g. i.e. etc. vs. a.m. p.m.",
        "2023年10月15日",
        "価格は1,980円です",
        "Ünïcode 123 and more 456",
        "tab\there",
        "mixed\t \t\n \n\tindent",
        "   \n   ",
        "a\u00a0\u00a0 b",
        "end with space ",
        "end with two spaces  ",
        "end with tab\t",
        "multiple\n\n\n\nnewlines",
        "𝕳𝖊𝖑𝖑𝖔 𝔀𝓸𝓻𝓵𝓭",
        "𠀀𠀁 (CJK Ext B) 𫝀 (Ext D)",
        "\U0002EBF0\U0002EBF1 (CJK Ext I, Unicode 15.1) \U00031350 (Ext H)",
        "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
        "ﬁ ﬂ ligatures",
        "Ω Å K (compatibility chars)",
        "\x00null\x01ctrl\x1fchars\x7f",
        "bell\x07 and escape\x1b[0m",
        "\ufeffBOM at start",
        "\ue000 private use \U000f0000",
        "\U0010ffff max codepoint",
        "The year 1984 and 2001: A Space Odyssey",
        "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "base64: SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0Lg==",
        "math: ∀x∈ℝ, ∃y: x²+y²≥0 ∧ ¬(x<0) → ∑ᵢ∫f(x)dx",
        "arrows ← ↑ → ↓ ↔ ⇒ ⇔",
        "box ─│┌┐└┘├┤┬┴┼ ░▒▓█",
        "Hello\u3000世界\u3000!",
    ]
    prose = (
        "Large language models are trained on vast corpora of text. During "
        "inference, a tokenizer converts the user's prompt into integer ids; the "
        "model then predicts one token at a time. Efficient serving systems batch "
        "many requests together, share key-value caches between prompts with a "
        "common prefix, and stream tokens back to clients as soon as they are "
        "generated. In 2023, PagedAttention (vLLM) showed that managing the cache "
        "in fixed-size blocks reduces waste to under 4%. "
    )
    s.append(prose)
    s.append(prose * 6)
    s.append(("def f_%d(x):\n    return x * %d  # comment\n\n" * 1) * 1)
    s.append("".join("def f_%d(x):\n    return x * %d  # comment\n\n" % (i, i * 7) for i in range(30)))
    s.append(" ".join(str(i * 7919) for i in range(200)))
    s.append("日本語のテキストと English words と数字123が混ざっています。" * 5)
    return s


# Chat-format and special-token strings of the Gemma family (--extra-strings gemma3).
GEMMA3_STRINGS = [
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>",
    "<eos>",
    "<pad>",
    "<unk>",
    "<mask>",
    "[multimodal]",
    "<start_of_image>",
    "<end_of_image>",
    "<unused0><unused17>",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n",
    " <start_of_turn> spaced <end_of_turn> ",
    "text<end_of_turn>text",
    "<start_of_turn",
    "end_of_turn>",
    "<start_of_turn><start_of_turn>model",
    "\u2581already\u2581escaped \u2581marker",
    "\u2581",
    "<0x41> <0xFF> literal byte-token text",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    " " * 40 + "x",
    "\t" * 35 + "y",
    "a  b\n\nc\t\td   e",
]


def random_strings(n, seed=1234):
    rng = random.Random(seed)
    pool = (
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") * 3
        + list("0123456789") * 2
        + [" "] * 12 + ["\t", "\n", "\n\n", "\r\n", "  ", "   "]
        + list("'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`")
        + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S"]
        + list("éèàçñöüßøåÉÀ") + list("привет") + list("日本語中文한국어")
        + ["😀", "👋", "🌍", "👨‍👩‍👧", "❤️", "🇫🇷", "\u200d", "\u0301", "\u00a0", "\u3000", "²", "½", "٣", "Ⅻ"]
        + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "|>"]
        + ["the", " the", "ing", "tion", " and", "hello", "world"]
    )
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) for _ in range(k)))
    return out


def invalid_utf8():
    return [
        b"\xff",
        b"abc\x80def",
        b"\xc3",  # truncated 2-byte sequence
        b"caf\xc3",  # truncated at end
        b"\xe6\x97",  # truncated 3-byte sequence
        b"\xf0\x9f\x98",  # truncated emoji
        b"\xc0\x80 overlong NUL",
        b"\xed\xa0\x80 surrogate",
        b"mixed \xfe\xff valid \xe2\x82\xac",
        # Not here: F5..F7 lead bytes (codepoints above U+10FFFF) make llama.cpp
        # throw std::invalid_argument and abort; omnibus reads them as U+FFFD.
    ]


# Chat-format strings of the families omnibus runs (--extra-strings families):
# Llama 3 headers, Mistral [INST], Phi-3 turns, Qwen's ChatML with tools and
# thinking. A special token a vocabulary lacks is plain text there, which is a
# case too.
FAMILY_STRINGS = [
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|start_header_id|>ipython<|end_header_id|>\n\n{\"result\": 4}<|eom_id|><|python_tag|>",
    "<s>[INST] What is 2+2? [/INST] 4</s>[INST] And 3+3? [/INST]",
    "<s> [INST]x[/INST]  </s>",
    "<|system|>\nBe brief.<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n",
    "<|user|> spaced  <|end|>  \n <|assistant|>",
    "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nLet me see.\n</think>\n\n"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
    "<think></think><tool_call></tool_call> <|endoftext|>",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/smollm2-135m.gguf")
    ap.add_argument("--out", default="tests/golden/tokenizer/smollm2-135m.json")
    ap.add_argument("--n-random", type=int, default=60, help="random strings to add")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the random strings")
    ap.add_argument("--extra-strings", choices=["gemma3", "families"], default=None,
                    help="add a model family's special/chat strings to the hand-written ones")
    ap.add_argument("--extra-files", nargs="*", default=[],
                    help="also use these files' contents as test strings (for one-off stress "
                         "runs; point the test at the output with OMNIBUS_TOKENIZER_GOLDEN)")
    args = ap.parse_args()

    llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    strings = hand_written()
    if args.extra_strings == "gemma3":
        strings += GEMMA3_STRINGS
    elif args.extra_strings == "families":
        strings += FAMILY_STRINGS
    texts = [t.encode("utf-8") for t in strings + random_strings(args.n_random, args.seed)]
    texts += invalid_utf8()
    for path in args.extra_files:
        with open(path, "rb") as f:
            texts.append(f.read())

    cases = []
    for i, raw in enumerate(texts):
        case = {}
        try:
            case["text"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            case["text_hex"] = raw.hex()
        case["special"] = llm.tokenize(raw, add_bos=False, special=True)
        case["plain"] = llm.tokenize(raw, add_bos=False, special=False)
        if i % 10 == 0:
            case["add_special"] = llm.tokenize(raw, add_bos=True, special=True)
        cases.append(case)

    h = hashlib.sha256()
    with open(args.model, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    golden = {
        "about": "llama.cpp tokenizer output; regenerate with tools/golden/gen_tokenizer_golden.py",
        "model": args.model.split("/")[-1],
        "model_sha256": h.hexdigest(),
        "llama_cpp_python": getattr(llama_cpp, "__version__", "?"),
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        "eog_ids": [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)],
        "control_ids": [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_control(vocab, t)],
        "cases": cases,
    }
    # One case per line keeps the file small and its diffs readable.
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in golden.items():
            if k != "cases":
                f.write(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write('  "cases": [\n')
        for i, c in enumerate(cases):
            sep = "," if i + 1 < len(cases) else ""
            f.write(f"    {json.dumps(c, ensure_ascii=False)}{sep}\n")
        f.write("  ]\n}\n")
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
