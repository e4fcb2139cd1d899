#!/usr/bin/env python3
"""Hugging Face tokenizers' side of scripts/bench/bench_tokenizer.sh: encode_batch throughput on GSM8K train.

Invariants: the same rows and text as bench/bench_tokenizer.cpp (question + "\\n" + answer), add_special_tokens
False; the thread count comes from the environment (TOKENIZERS_PARALLELISM=false: one thread; true with
RAYON_NUM_THREADS=N: N threads); the first pass on the freshly loaded tokenizer (cold: empty BPE cache) and the
best of --reps after it; the last line is "RESULT name=... rows=... tokens=... load_s=... cold_s=... t_s=...",
and --ids_out writes one row of ids per line.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../golden"))


def load(args):
    if args.gpt2:
        from make_tokenizer_corpus import gpt2_reference  # the gpt2 hub tokenizer.json, assembled
        return gpt2_reference(*args.gpt2)
    if args.tokenizer.endswith(".gguf"):
        from transformers import AutoTokenizer
        d, f = os.path.split(args.tokenizer)
        return AutoTokenizer.from_pretrained(d, gguf_file=f).backend_tokenizer
    from tokenizers import Tokenizer
    path = args.tokenizer
    return Tokenizer.from_file(os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--tokenizer")
    ap.add_argument("--gpt2", nargs=2, metavar=("ENCODER_JSON", "VOCAB_BPE"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ids_out")
    args = ap.parse_args()
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    texts = [r["question"] + "\n" + r["answer"] for r in rows]
    import tokenizers  # noqa: F401  (imports are not load time)
    if args.gpt2 or args.tokenizer.endswith(".gguf"):
        import make_tokenizer_corpus  # noqa: F401
        import transformers  # noqa: F401
    t0 = time.perf_counter()
    tok = load(args)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    enc = tok.encode_batch(texts, add_special_tokens=False)  # cold, and the warm-up
    cold_s = time.perf_counter() - t0
    best = 1e30
    for _ in range(args.reps):
        t0 = time.perf_counter()
        enc = tok.encode_batch(texts, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    tokens = sum(len(e.ids) for e in enc)
    if args.ids_out:
        with open(args.ids_out, "w") as f:
            for e in enc:
                f.write(" ".join(map(str, e.ids)) + "\n")
    print(f"RESULT name={args.name} rows={len(texts)} tokens={tokens} load_s={load_s:.4f} cold_s={cold_s:.5f} t_s={best:.5f}")


if __name__ == "__main__":
    main()
