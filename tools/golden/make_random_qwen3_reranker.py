#!/usr/bin/env python3
"""A random-weight Qwen3-Reranker GGUF, for the /v1/rerank and /v1/score tests
of causal rerankers: models/random/qwen3.gguf (tools/golden/make_random_models.py)
turned into a reranker the way llama.cpp's converter turns Qwen3-Reranker
(conversion/qwen.py, Qwen3Model with is_rerank, llama-cpp-python 0.3.36):

  - qwen3.pooling_type = 4 (rank) and classifier output labels ["yes", "no"];
  - tokenizer.chat_template.rerank: the converter's prompt, with {query} and
    {document} (tokenizer.chat_templates lists it);
  - cls.output.weight [n_embd -> 2]: the output head's rows of the tokens
    "yes" and "no", in that order (here dequantized to F32);
  - output.weight dropped (the converter yields only cls.output for an untied
    head); every other tensor and key copied unchanged.

llama.cpp scores such a model as softmax(cls.output . output_norm(last row))[0]:
P("yes"). The file is byte-identical everywhere (its source is).

Usage (scripts/fetch_models.sh runs it; idempotent unless --force):
  .venv/bin/python tools/golden/make_random_qwen3_reranker.py [--src models/random/qwen3.gguf]
      [--out models/random/qwen3-reranker.gguf]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import quants

ROOT = Path(__file__).resolve().parents[2]
RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer "
    "the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n")
SKIP_KEYS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def copy_field(w: gguf.GGUFWriter, key: str, f) -> None:
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = f.types[1]
        if sub == gguf.GGUFValueType.STRING:
            w.add_array(key, [bytes(f.parts[i]).decode("utf-8") for i in f.data])
        else:
            w.add_key_value(key, [f.parts[i][0].item() for i in f.data], t, sub_type=sub)
    elif t == gguf.GGUFValueType.STRING:
        w.add_string(key, bytes(f.parts[f.data[0]]).decode("utf-8"))
    else:
        w.add_key_value(key, f.parts[f.data[0]][0].item(), t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=str(ROOT / "models" / "random" / "qwen3.gguf"))
    ap.add_argument("--out", default=str(ROOT / "models" / "random" / "qwen3-reranker.gguf"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"make_random_qwen3_reranker: {out} present")
        return 0
    r = gguf.GGUFReader(args.src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    assert arch == "qwen3", arch
    tokens = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
              for i in r.fields["tokenizer.ggml.tokens"].data]
    yes, no = tokens.index("yes"), tokens.index("no")
    tensors = {t.name: t for t in r.tensors}
    head = tensors.get("output.weight", tensors["token_embd.weight"])
    rows = quants.dequantize(head.data, head.tensor_type)  # [n_vocab, n_embd]
    cls_out = np.stack([rows[yes], rows[no]]).astype(np.float32)

    tmp = out.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    for key, f in r.fields.items():
        if key not in SKIP_KEYS:
            copy_field(w, key, f)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_classifier_output_labels(["yes", "no"])
    w.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
    for t in r.tensors:
        if t.name == "output.weight":
            continue
        # The reader's data: numpy order, quantized types as their bytes.
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    w.add_tensor("cls.output.weight", cls_out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    print(f"make_random_qwen3_reranker: wrote {out} (yes={yes}, no={no})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
