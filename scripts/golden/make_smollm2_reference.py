#!/usr/bin/env python3
"""Reference logits of the real model SmolLM2-135M-Instruct (Q4_1 GGUF) computed by Hugging Face transformers.

transformers loads the GGUF itself (it dequantizes every tensor to fp32 and undoes llama.cpp's Q/K row
permutation), and its tokenizer built from the GGUF metadata makes the token ids; the C++ tokenizer is not
involved. Two sequences are run, each alone (batch 1), fp32 on the CPU with eager attention:
  0: the ChatML prompt  "<|im_start|>user\\nWhat is 7 times 8?<|im_end|>\\n<|im_start|>assistant\\n"
  1: the plain text     "The capital of France is"

Writes tests/fixtures/smollm2/reference.safetensors (small, committed):
  input_ids     I32 (T)        both sequences packed       positions  I32 (T)    cu_seqlens I32 (B+1)
  last_logits   F32 (B, V)     full logits at the last position of each sequence
  topk_ids      I32 (T, 20)    top-20 token ids at every position (descending)
  topk_values   F32 (T, 20)    their logits
  subset_ids    I32 (S)        every 61st vocabulary id (0, 61, 122, ...)
  subset_logits F32 (T, S)     logits of those ids at every position
and __metadata__ (strings): prompts, versions, decoded argmax tokens, the fp32-vs-fp64 difference of the
same computation (the size of fp32 rounding noise, which sizes the C++ tolerances), and the HF run time and
peak RSS (for reference only; nothing asserts them).

Run from the repository root after scripts/fetch-model.sh:  python3 scripts/golden/make_smollm2_reference.py
"""

import argparse
import json
import os
import resource
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(ROOT, "models")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2", "reference.safetensors")

PROMPTS = [
    ("chat", "<|im_start|>user\nWhat is 7 times 8?<|im_end|>\n<|im_start|>assistant\n"),
    ("text", "The capital of France is"),
]
TOPK = 20
SUBSET_STRIDE = 61


def save_safetensors(tensors, path, metadata):
    """Writes a safetensors file byte-for-byte deterministically (safetensors' own writer orders the metadata
    map at random, so reruns would differ): header keys sorted, tensors laid out in name order."""
    dtypes = {torch.float32: "F32", torch.int32: "I32", torch.bfloat16: "BF16", torch.float16: "F16"}
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(path + ".tmp", path)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_alone(model, sequences):
    rows = []
    with torch.no_grad():
        for seq in sequences:
            rows.append(model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False).logits[0])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", default=MODELS_DIR)
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--skip-fp64", action="store_true", help="skip the fp64 noise estimate")
    args = parser.parse_args()

    torch.set_default_dtype(torch.float32)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    path = os.path.join(args.models_dir, GGUF_NAME)
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: run scripts/fetch-model.sh first")

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.models_dir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(args.models_dir, gguf_file=GGUF_NAME, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    load_s = time.perf_counter() - t0

    sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for _, text in PROMPTS]
    # <|im_start|> / <|im_end|> must be single special tokens, not spelled out.
    for name in ("<|im_start|>", "<|im_end|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        assert tid in sequences[0], f"{name} (id {tid}) is not a single token of the chat prompt"

    t0 = time.perf_counter()
    ref = run_alone(model, sequences)
    forward_s = time.perf_counter() - t0
    rss = peak_rss_mib()

    # sdpa must agree with eager (same weights; attention implementation only).
    model.set_attn_implementation("sdpa")
    sdpa = run_alone(model, sequences)
    sdpa_err = max(float((r - s).abs().max()) for r, s in zip(ref, sdpa))
    model.set_attn_implementation("eager")

    noise = {}
    if not args.skip_fp64:
        model64 = model.to(torch.float64)
        ref64 = run_alone(model64, sequences)
        noise = {
            "fp32_vs_fp64_max_abs": f"{max(float((r.double() - s).abs().max()) for r, s in zip(ref, ref64)):.3e}",
            "fp32_vs_fp64_rel_l2": f"{max(float((r.double() - s).norm() / s.norm()) for r, s in zip(ref, ref64)):.3e}",
            "fp32_vs_fp64_last_max_abs": f"{max(float((r[-1].double() - s[-1]).abs().max()) for r, s in zip(ref, ref64)):.3e}",
        }
        del model64

    logits = torch.cat(ref, dim=0).float()                            # (T, V)
    vocab = logits.shape[1]
    last = torch.stack([r[-1] for r in ref]).float()                  # (B, V)
    top = torch.topk(logits, TOPK, dim=1)
    subset_ids = torch.arange(0, vocab, SUBSET_STRIDE, dtype=torch.long)
    argmax_last = [int(r[-1].argmax()) for r in ref]

    ids = [t for s in sequences for t in s]
    positions = [p for s in sequences for p in range(len(s))]
    cu = [0]
    for s in sequences:
        cu.append(cu[-1] + len(s))

    metadata = {
        "model": GGUF_NAME,
        "prompts": json.dumps([text for _, text in PROMPTS]),
        "reference": "transformers GGUF loader (dequantized to fp32), fp32 CPU eager attention, each sequence alone",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "argmax_last": json.dumps(argmax_last),
        "argmax_last_text": json.dumps([tokenizer.decode([i]) for i in argmax_last]),
        "sdpa_vs_eager_max_abs": f"{sdpa_err:.3e}",
        "hf_load_seconds": f"{load_s:.2f}",
        "hf_forward_seconds": f"{forward_s:.3f}",
        "hf_peak_rss_mib": f"{rss:.0f}",
        "hf_threads": str(torch.get_num_threads()),
        **noise,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_safetensors({
        "input_ids": torch.tensor(ids, dtype=torch.int32),
        "positions": torch.tensor(positions, dtype=torch.int32),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "last_logits": last.contiguous(),
        "topk_ids": top.indices.to(torch.int32).contiguous(),
        "topk_values": top.values.contiguous(),
        "subset_ids": subset_ids.to(torch.int32),
        "subset_logits": logits[:, subset_ids].contiguous(),
    }, args.out, metadata)
    print(json.dumps(metadata, indent=1))
    print(f"sequences: {[len(s) for s in sequences]}; wrote {args.out} ({os.path.getsize(args.out) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
