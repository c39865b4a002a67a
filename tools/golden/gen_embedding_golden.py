#!/usr/bin/env python3
"""Golden token ids and embeddings from the reference llama.cpp for all-MiniLM-L6-v2.

Writes tests/golden/embeddings/all-minilm-l6-v2.json: 200 sentences (the
sentences of tests/data/perplexity.txt, then hand-written cases for the
WordPiece rules: accents, case, punctuation, symbols, CJK, digits, emoji,
control characters, long words), each with

  ids        llama.cpp's llama_tokenize(add_special=True, parse_special=True)
             ([CLS] ... [SEP]), through llama-cpp-python's bindings
  embedding  llama-embedding's mean-pooled, L2-normalised vector (--pooling
             mean --embd-normalize 2, one sequence per sentence)

and the GGUF's sha256. src/tokenizer/wordpiece_tokenizer_test.cc checks the
ids, tests/python/test_embeddings.py the vectors (cosine >= 0.9999).

It also writes tests/golden/embeddings/random-qwen3-{last,mean,cls}.json:
llama-embedding's vectors (--pooling last / mean / cls, not normalised) of the
random-weight Qwen 3 (models/random/qwen3.gguf) for the first 16 sentences,
which the same test compares with omnibus serve --task embed --pooling ...
--no-normalize (`--only qwen3-pooling` writes only these three); and
tests/golden/embeddings/random-bert-reranker.json: llama-embedding --pooling rank
scores (query TAB document, formed [CLS] query [SEP] document [SEP]) of the
random-weight cross-encoder models/random/bert-reranker.gguf
(tools/golden/make_random_bert_reranker.py) for RERANK_QUERIES x documents,
which /v1/score and /v1/rerank must reproduce; and
tests/golden/embeddings/random-qwen3-reranker.json: the same pairs scored by the
random-weight Qwen3-Reranker models/random/qwen3-reranker.gguf
(tools/golden/make_random_qwen3_reranker.py): llama-embedding --pooling rank,
which forms each pair with the GGUF's rerank template and scores the softmax
of cls.output over the last token's row (P("yes")). `--only qwen3-reranker`
writes only that file.

How to run (from the repository root, after scripts/build_llama_cpp.sh and
scripts/fetch_models.sh all-minilm-l6-v2; deterministic):

    python3 -m pip install --target /tmp/llama_deps -r tools/requirements-ref.txt
    PYTHONPATH=.ref/llama_cpp_python-0.3.36:/tmp/llama_deps LLAMA_CPP_LIB_PATH=.ref/build/bin \\
        .venv/bin/python tools/golden/gen_embedding_golden.py
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEP = "<#omnibus-sep#>"

HAND = [
    "Café naïve résumé: façade, coöperate, jalapeño.",
    "ÉCOLE NORMALE SUPÉRIEURE à Paris",
    "Ünïcödé äccents strïpped: Ångström, Øresund, Łódź.",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!!!",
    "What's up? Isn't it great -- or not... (maybe) [probably] {surely}",
    "Prices rose 3.5% to $1,234.56 on 2024-01-15 at 10:30am.",
    "email@example.com https://example.org/path?query=1&x=2#frag",
    "a+b=c; x<y>z; ^caret `backtick` |pipe| ~tilde~ _under_score_",
    "我想在apple工作1314151天～",
    "日本語のテキストとEnglish mixed together.",
    "한국어 문장도 있습니다.",
    "Русский текст: привет, мир!",
    "Ελληνικά: Καλημέρα κόσμε.",
    "עברית וערבית: مرحبا بالعالم",
    "Emoji 🚀 rocket, 😀 smile, 🦙 llama, ✅ check.",
    "Tabs\tand\nnewlines\r\nand   multiple    spaces.",
    "Control\u0007chars\u0000and\u200bzero\u200dwidth\ufeffmarks.",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "unbelievably misunderstanding reconfiguration internationalization",
    "1234567890 12 345 6789 3.14159 2.71828 1e-10 0x1F",
    "Numbers like 1st, 2nd, 3rd, 4th and 100th.",
    "C++ and C# and F# and Objective-C are languages.",
    "The U.S.A. and U.K. signed the N.A.T.O. treaty.",
    "Don't, won't, can't, shouldn't, y'all, o'clock.",
    "“Curly quotes” and ‘single ones’ and «guillemets».",
    "Em—dash and en–dash and ellipsis… and bullet • point.",
    "Math: ∑ x² ≤ ∞, √2 ≈ 1.414, π r², ∂f/∂x.",
    "Currency: € 10, £ 20, ¥ 30, ₹ 40, ₿ 50.",
    "Weird spacing\u00a0non-breaking\u2003em-space\u3000ideographic.",
    "Machine learning models embed sentences into vectors.",
    "Retrieval augmented generation needs good embeddings.",
    "How do I reset my password?",
    "The cat sat on the mat.",
    "A man is playing a guitar.",
    "Berlin is the capital of Germany.",
    "Python is a popular programming language.",
    "I love eating pizza with extra cheese.",
    "The weather today is sunny and warm.",
    "Photosynthesis converts light energy into chemical energy.",
    "[CLS] literal special tokens [SEP] inside [MASK] text [UNK].",
    "x",
    "?",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "ALL CAPS SENTENCE WITH NO PUNCTUATION",
    "mIxEd CaSe WoRdS aRe LoWeRcAsEd",
    "hyphen-ated well-known state-of-the-art long-term",
    "Slashes/and\\backslashes and_underscores",
    "Repeated!!! punctuation??? everywhere... ,,,;;;",
    "Dr. Smith went to Washington D.C. on Jan. 5th.",
]


RERANK_QUERIES = ["What is the capital of France?", "How do plants make energy?",
                  "Who wrote Alice in Wonderland?"]


def rerank_documents():
    return ["Paris is the capital and largest city of France.", "The Eiffel Tower is in Paris.",
            "Photosynthesis converts light energy into chemical energy.", "Plants need water and sunlight.",
            "Lewis Carroll wrote Alice's Adventures in Wonderland.", "The cat sat on the mat."]


def corpus_sentences():
    text = (ROOT / "tests" / "data" / "perplexity.txt").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", text)
    out = []
    for s in re.split(r"(?<=[.!?])\s+", text):
        s = s.strip()
        if 20 <= len(s) <= 400 and s not in out:
            out.append(s)
    return out


def sentences(n=200):
    hand = HAND
    corpus = corpus_sentences()[: n - len(hand)]
    return corpus + hand


def bindings_embedding(model, texts, pooling, normalize):
    """The same vectors through libllama directly (llama-cpp-python's bindings),
    one sequence per decode, tokenized as llama-embedding does
    (common_tokenize(add_special=true, parse_special=true), "q\tr" pairs
    formed as its rank mode forms them): for when llama-embedding is not built.
    normalize: 2 (L2) or -1 (none)."""
    import llama_cpp  # noqa: E402
    types = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
             "rank": llama_cpp.LLAMA_POOLING_TYPE_RANK}
    llm = llama_cpp.Llama(model_path=model, embedding=True, pooling_type=types[pooling], n_ctx=4096,
                          n_batch=4096, n_ubatch=4096, n_threads=2, verbose=False)
    eos = llm.token_eos()
    out = []
    for t in texts:
        if pooling == "rank":
            q, d = t.split("\t")
            sep = llm.detokenize([eos], special=True).decode() if llama_cpp.llama_vocab_get_add_eos(
                llm._model.vocab) else ""
            t = q + sep + d
        tokens = llm.tokenize(t.encode("utf-8"), add_bos=True, special=True)
        llm._batch.reset()
        llm._ctx.kv_cache_clear()
        llm._batch.add_sequence(tokens, 0, False)
        llm._ctx.decode(llm._batch)
        ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)
        v = list(ptr[:1 if pooling == "rank" else llm.n_embd()])
        if normalize == 2:
            n = sum(x * x for x in v) ** 0.5
            v = [x / n for x in v] if n > 0 else v
        out.append(v)
    return out


USED = []  # which path made the vectors, for the files' "reference"


def llama_embedding(bin_dir, model, texts, pooling, normalize):
    if not os.path.exists(os.path.join(bin_dir, "llama-embedding")):
        print("llama-embedding not built: using libllama through the bindings", file=sys.stderr)
        USED.append("libllama via llama-cpp-python's bindings (llama-embedding's tokenization and pooling)")
        return bindings_embedding(model, texts, pooling, normalize)
    USED.append("llama-embedding")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(SEP.join(texts))
        prompt_file = f.name
    cmd = [os.path.join(bin_dir, "llama-embedding"), "-m", model, "-f", prompt_file,
           "--embd-separator", SEP, "--embd-output-format", "json", "--pooling", pooling,
           "--embd-normalize", str(normalize), "-c", "4096", "-b", "4096", "-ub", "512", "-t", "2",
           "--no-warmup", "-ngl", "0"]
    env = {**os.environ, "LD_LIBRARY_PATH": bin_dir}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    os.unlink(prompt_file)
    if pooling == "rank":
        # llama-embedding prints n_embd values of each row though a reranker's
        # has n_cls_out (1): the rest is uninitialised memory, sometimes not even
        # valid JSON numbers. The score is the first value.
        scores = re.findall(r'"embedding": \[([^,\]]+)', out)
        assert len(scores) == len(texts), (len(scores), len(texts))
        return [[float(x)] for x in scores]
    data = json.loads(out[out.index("{"):])["data"]
    assert len(data) == len(texts), (len(data), len(texts))
    return [d["embedding"] for d in data]


def compact_json(obj):
    """One line per case: small diffs, a readable file."""
    head = {k: v for k, v in obj.items() if k != "cases"}
    lines = [json.dumps(c, ensure_ascii=False) for c in obj["cases"]]
    return json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "all-minilm-l6-v2.gguf"))
    ap.add_argument("--bin", default=str(ROOT / ".ref" / "build" / "bin"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "embeddings" / "all-minilm-l6-v2.json"))
    ap.add_argument("--only", choices=["all", "qwen3-reranker", "qwen3-pooling"], default="all")
    args = ap.parse_args()
    if args.only == "qwen3-reranker":
        return write_rerank_golden(args, "qwen3-reranker")
    if args.only == "qwen3-pooling":
        return write_qwen3_pooled_golden(args)
    sents = sentences()
    assert len(sents) == 200, len(sents)
    assert not any(SEP in s for s in sents)

    import llama_cpp  # noqa: E402  (PYTHONPATH / LLAMA_CPP_LIB_PATH, see above)
    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    ids = [llm.tokenize(s.encode("utf-8"), add_bos=True, special=True) for s in sents]

    vectors = llama_embedding(args.bin, args.model, sents, "mean", 2)
    sha = hashlib.sha256(Path(args.model).read_bytes()).hexdigest()
    cases = [{"text": s, "ids": i, "embedding": [round(x, 6) for x in v]}
             for s, i, v in zip(sents, ids, vectors)]
    Path(args.out).write_text(compact_json({"model": "all-minilm-l6-v2.gguf", "model_sha256": sha,
                                          "reference": f"llama.cpp (llama-cpp-python 0.3.36): {USED[-1]}, "
                                                       "pooling mean, normalize 2",
                                          "cases": cases}), encoding="utf-8")
    print(f"wrote {args.out}: {len(cases)} sentences")

    write_qwen3_pooled_golden(args)
    write_rerank_golden(args, "bert-reranker")
    write_rerank_golden(args, "qwen3-reranker")


def write_qwen3_pooled_golden(args):
    """random-qwen3-{last,mean,cls}.json: llama-embedding's vectors (not normalised) of the
    random-weight Qwen 3 for the first 16 sentences, pooled each way."""
    qwen3 = str(ROOT / "models" / "random" / "qwen3.gguf")
    texts = sentences()[:16]
    for pooling in ("last", "mean", "cls"):
        vecs = llama_embedding(args.bin, qwen3, texts, pooling, -1)
        out = Path(args.out).with_name(f"random-qwen3-{pooling}.json")
        out.write_text(compact_json({"model": "random/qwen3.gguf",
                                   "model_sha256": hashlib.sha256(Path(qwen3).read_bytes()).hexdigest(),
                                   "reference": f"{USED[-1]}, pooling {pooling}, not normalised",
                                   "cases": [{"text": t, "embedding": [float(f"{x:.7g}") for x in v]}
                                             for t, v in zip(texts, vecs)]}))
        print(f"wrote {out}")


def write_rerank_golden(args, name):
    """random-<name>.json: llama-embedding --pooling rank scores of models/random/<name>.gguf
    for RERANK_QUERIES x rerank_documents()."""
    reranker = str(ROOT / "models" / "random" / f"{name}.gguf")
    pairs = [(q, d) for q in RERANK_QUERIES for d in rerank_documents()]
    scores = llama_embedding(args.bin, reranker, [f"{q}\t{d}" for q, d in pairs], "rank", -1)
    out = Path(args.out).with_name(f"random-{name}.json")
    out.write_text(compact_json({"model": f"random/{name}.gguf",
                               "model_sha256": hashlib.sha256(Path(reranker).read_bytes()).hexdigest(),
                               "reference": f"{USED[-1]}, pooling rank, not normalised",
                               "cases": [{"query": q, "document": d, "score": float(f"{v[0]:.7g}")}
                                         for (q, d), v in zip(pairs, scores)]}))
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
