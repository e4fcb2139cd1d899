#!/usr/bin/env python3
"""Makes the GGUF fixtures of tests/io/test_gguf.cpp and tests/model/test_real_gguf.cpp.

  tests/fixtures/gguf/dequant_cases.json  random blocks of every supported ggml type and their values as
                                          dequantized by the `gguf` Python package (llama.cpp's gguf-py,
                                          a port of ggml-quants.c's reference dequantization)
  tests/fixtures/gguf/smollm2_weights.json  the SmolLM2-135M-Instruct Q4_1 GGUF as Hugging Face transformers
                                          loads it (dequantized, Q/K un-permuted, float32): config, and per
                                          tensor its shape, float64 sum and sum of squares, per-row sums of
                                          q_proj/k_proj, and sampled values

Needs: pip install gguf; torch and transformers. Run from anywhere:
  python3 scripts/golden/make_gguf_fixtures.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
Every number written is exact: float32 values are written as Python floats (repr round-trips), sums as
float64 accumulated in index order.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")

# type name -> (byte offsets of fp16 scale fields that must hold finite values)
SCALE_FIELDS = {
    "F16": None, "BF16": None, "F32": None,
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}


def dequant_cases():
    import gguf
    from gguf import quants
    rng = np.random.default_rng(20240601)
    cases = []
    for name, fields in SCALE_FIELDS.items():
        qtype = gguf.GGMLQuantizationType[name]
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = 2 if block_elems > 1 else 64
        if name == "F32":
            raw = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8)
        elif name == "F16":
            raw = (rng.standard_normal(n_blocks) * 3).astype(np.float16).view(np.uint8)
        elif name == "BF16":
            vals = (rng.standard_normal(n_blocks) * 3).astype(np.float32)
            raw = (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        else:
            raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
            for b in range(n_blocks):
                for off in fields:
                    scale = np.float16(rng.uniform(-0.5, 0.5) if off == fields[0] else rng.uniform(-0.2, 0.2))
                    raw[b, off:off + 2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
            raw = raw.reshape(-1)
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        values = quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert values.size == n_blocks * block_elems
        cases.append({"type": name, "n": int(values.size), "hex": raw.tobytes().hex(),
                      "values": [float(v) for v in values]})
    return {"source": "gguf-py " + getattr(gguf, "__version__", "?") + " quants.dequantize", "cases": cases}


def weights_fixture(model_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    directory, name = os.path.split(os.path.abspath(model_path))
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    cfg = model.config
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    rng = np.random.default_rng(7)

    def summary(key, row_sums=False, full=False):
        w = sd[key]
        w64 = w.astype(np.float64)
        entry = {"shape": list(w.shape), "sum": float(w64.sum()), "sumsq": float((w64 * w64).sum())}
        if full:
            entry["values"] = [float(v) for v in w.reshape(-1)]
            return entry
        rows = w.shape[0]
        cols = w.shape[1] if w.ndim == 2 else 1
        samples = []
        picks = [(0, 0), (1, 0), (rows - 1, cols - 1)]
        picks += [(int(r), int(c)) for r, c in zip(rng.integers(0, rows, 29), rng.integers(0, cols, 29))]
        for r, c in picks:
            samples.append([r, c, float(w[r, c] if w.ndim == 2 else w[r])])
        entry["samples"] = samples
        if row_sums:
            entry["row_sums"] = [float(s) for s in w64.sum(axis=1)]
        return entry

    tensors = {}
    tensors["model.embed_tokens.weight"] = summary("model.embed_tokens.weight")
    tensors["model.norm.weight"] = summary("model.norm.weight", full=True)
    for layer in (0, 29):
        p = f"model.layers.{layer}."
        for proj in ("q_proj", "k_proj"):
            tensors[p + f"self_attn.{proj}.weight"] = summary(p + f"self_attn.{proj}.weight", row_sums=True)
        for key in ("self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
                    "mlp.up_proj.weight", "mlp.down_proj.weight"):
            tensors[p + key] = summary(p + key)
        for key in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            tensors[p + key] = summary(p + key, full=(layer == 0))
    eos = cfg.eos_token_id
    config = {
        "model_type": cfg.model_type, "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None)),
        "tie_word_embeddings": bool(cfg.tie_word_embeddings), "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos,
    }
    return {"source": f"transformers {__import__('transformers').__version__} AutoModelForCausalLM "
                      f"from_pretrained(gguf_file='{name}', dtype=float32)",
            "weight_count": len(sd), "config": config, "tensors": tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--skip-model", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "dequant_cases.json"), "w") as f:
        json.dump(dequant_cases(), f, separators=(",", ":"))
    if not args.skip_model:
        if not os.path.exists(args.model):
            sys.exit(f"{args.model} is missing: run scripts/fetch-model.sh")
        with open(os.path.join(OUT, "smollm2_weights.json"), "w") as f:
            json.dump(weights_fixture(args.model), f, separators=(",", ":"))
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
