#!/usr/bin/env python3
"""Golden fixtures: tiny random decoder-only models made with Hugging Face transformers' own classes, and the
logits transformers computes for them (fp32, CPU, eager attention).

For every case in CASES this writes tests/fixtures/golden/<case>/:
  config.json, generation_config.json, model.safetensors   exactly as `save_pretrained` writes them
  expected.safetensors                                     what the C++ test compares against:
      input_ids  I32 (T)      the packed batch: 2-3 sequences of different odd lengths, concatenated
      positions  I32 (T)      0..len-1 per sequence
      cu_seqlens I32 (B+1)    cumulative sequence lengths, starting at 0
      logits     F32 (T, V)   each sequence run ALONE through transformers (batch 1, freshly loaded model),
                              rows concatenated: a packed forward must equal the sequences run separately.
    and __metadata__ (strings): case, description, versions, sequence lengths, and the measured errors below.

The reference is computed from the model reloaded from the saved directory (so it is exactly what is on
disk: bf16 weights are upcast to fp32 on load, the config goes through its JSON round-trip).

Checks made while generating (the script fails if one does not hold):
  - sdpa attention agrees with eager (max abs difference recorded);
  - fp32 vs fp64 of the same weights (the rounding noise of fp32 itself; recorded, it sizes C++ tolerances);
  - the feature a case is about is exercised: turning it off (rope scaling, sliding window, biases, ...)
    changes the logits by far more than fp32 noise;
  - logits are not near-uniform (their standard deviation per row is well above 0.1).

Run from the repository root:  python3 scripts/golden/make_tiny_models.py   (see scripts/golden/README.md)
"""

import argparse
import copy
import gc
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "golden")

ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}

# Every case: odd vocab / intermediate sizes, head_dim not a power of two, 2-3 layers, 2-3 sequences of
# different odd lengths. `ablate` returns config overrides that switch the case's feature off; the script
# requires the logits to change when they are applied (so the fixture really exercises the feature).
CASES = [
    dict(
        name="llama_gqa_llama3",
        description="llama, GQA 4 query / 2 kv heads, head_dim 12, llama3 rope scaling (all three wavelength "
                    "bands hit), untied LM head",
        arch="llama", seed=1001, seq_lens=[13, 5, 19],
        config=dict(vocab_size=101, hidden_size=48, intermediate_size=67, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                    tie_word_embeddings=False,
                    rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                         high_freq_factor=4.0, original_max_position_embeddings=64)),
        ablate=dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    ),
    dict(
        name="llama_mha_tied_linear_bias",
        description="llama, MHA 3 heads, explicit head_dim 20 (3*20 != hidden 45), tied embeddings, linear rope "
                    "scaling 2.5, attention_bias (q,k,v,o) and mlp_bias",
        arch="llama", seed=1002, seq_lens=[9, 15, 7],
        config=dict(vocab_size=97, hidden_size=45, intermediate_size=51, num_hidden_layers=2,
                    num_attention_heads=3, num_key_value_heads=3, head_dim=20, max_position_embeddings=128,
                    rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                    rope_parameters=dict(rope_type="linear", rope_theta=500.0, factor=2.5)),
        ablate=dict(rope_parameters=dict(rope_type="default", rope_theta=500.0)),
    ),
    dict(
        name="llama_yarn",
        description="llama, GQA 4/2, explicit head_dim 20, yarn rope (factor 4, original 64, theta 100 so the "
                    "correction ramp covers dims 0..6 of 10), derived attention factor 0.1*ln(4)+1",
        arch="llama", seed=1003, seq_lens=[11, 17, 3],
        config=dict(vocab_size=103, hidden_size=40, intermediate_size=53, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=20, max_position_embeddings=256,
                    rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0,
                                         original_max_position_embeddings=64)),
        ablate=dict(rope_parameters=dict(rope_type="default", rope_theta=100.0)),
    ),
    dict(
        name="llama_dynamic",
        description="llama, MQA 3/1 heads, head_dim 12, dynamic NTK rope factor 2 with max_position_embeddings "
                    "16: the 23-token sequence exceeds it (its frequencies are rescaled with seq_len = 23), the "
                    "others do not (plain rope)",
        arch="llama", seed=1004, seq_lens=[7, 23, 13],
        config=dict(vocab_size=107, hidden_size=36, intermediate_size=59, num_hidden_layers=2,
                    num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=16, rms_norm_eps=1e-6,
                    tie_word_embeddings=False,
                    rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
        ablate=dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        # Only the long sequence may change when dynamic scaling is switched off.
        ablate_changes=[False, True, False],
    ),
    dict(
        name="qwen2_tied_1kv",
        description="qwen2, 3 query heads / 1 kv head, head_dim 12, q/k/v bias (no o bias), tied embeddings",
        arch="qwen2", seed=1005, seq_lens=[15, 7, 11],
        config=dict(vocab_size=113, hidden_size=36, intermediate_size=61, num_hidden_layers=2,
                    num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=128, rms_norm_eps=1e-6,
                    tie_word_embeddings=True, rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        ablate="zero_biases",
    ),
    dict(
        name="qwen3_qknorm",
        description="qwen3, GQA 4/2, explicit head_dim 14 (4*14 != hidden 44), q/k RMSNorm per head, untied, "
                    "3 layers",
        arch="qwen3", seed=1006, seq_lens=[9, 13, 5],
        config=dict(vocab_size=109, hidden_size=44, intermediate_size=47, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=14, max_position_embeddings=128,
                    rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        ablate="unit_qk_norms",
    ),
    dict(
        name="mistral_sliding_window",
        description="mistral, GQA 4/2, head_dim 12, sliding_window 5 (each query sees itself and the 4 previous "
                    "keys) while the longest sequence has 21 tokens",
        arch="mistral", seed=1007, seq_lens=[21, 9, 3],
        config=dict(vocab_size=99, hidden_size=48, intermediate_size=55, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                    tie_word_embeddings=False, sliding_window=5,
                    rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        ablate=dict(sliding_window=None),
        # Sequences of <= 5 tokens cannot see the window.
        ablate_changes=[True, True, False],
    ),
    dict(
        name="qwen2_bf16",
        description="qwen2, GQA 4/2, head_dim 12, untied, weights stored in bfloat16 (reference: the bf16 "
                    "weights upcast to fp32, computed in fp32)",
        arch="qwen2", seed=1008, seq_lens=[11, 19],
        config=dict(vocab_size=127, hidden_size=48, intermediate_size=59, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-6,
                    tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        storage_dtype=torch.bfloat16,
        ablate="zero_biases",
    ),
]

INIT_STD = 0.15  # weights ~ N(0, 0.15): logits spread well away from uniform with hidden 36-48


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


def randomise(model, seed):
    """Deterministic random parameters: matrices N(0, INIT_STD), norm weights U(0.5, 1.5), biases N(0, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "norm" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))


def load(model_dir, dtype=torch.float32, attn="eager", overrides=None):
    config = transformers.AutoConfig.from_pretrained(model_dir)
    for key, value in (overrides or {}).items():
        setattr(config, key, copy.deepcopy(value))
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=config, dtype=dtype, attn_implementation=attn)
    model.eval()
    return model


def run_alone(model_dir, sequences, dtype=torch.float32, attn="eager", overrides=None, mutate=None):
    """Logits of each sequence run alone (batch 1, positions 0..n-1), each on a freshly loaded model so that no
    state (dynamic rope's cached frequencies) carries over from one sequence to the next."""
    rows = []
    for seq in sequences:
        model = load(model_dir, dtype, attn, overrides)
        if mutate is not None:
            mutate(model)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([seq], dtype=torch.long), use_cache=False)
        rows.append(out.logits[0].to(torch.float64))
        del model
    gc.collect()
    return rows


def zero_biases(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()


def unit_qk_norms(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "q_norm" in name or "k_norm" in name:
                p.fill_(1.0)


def max_abs(a, b):
    return float((a - b).abs().max())


def make_case(case, out_root):
    name = case["name"]
    cfg_cls, model_cls = ARCHS[case["arch"]]
    torch.manual_seed(case["seed"])
    config = cfg_cls(**copy.deepcopy(case["config"]))
    model = model_cls(config).to(torch.float32)
    randomise(model, case["seed"])
    storage_dtype = case.get("storage_dtype", torch.float32)
    model = model.to(storage_dtype)

    case_dir = os.path.join(out_root, name)
    if os.path.isdir(case_dir):
        shutil.rmtree(case_dir)
    model.save_pretrained(case_dir, safe_serialization=True)
    del model

    gen = torch.Generator().manual_seed(case["seed"] + 7)
    vocab = case["config"]["vocab_size"]
    sequences = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in case["seq_lens"]]

    ref = run_alone(case_dir, sequences)                       # fp32, eager: the reference
    sdpa = run_alone(case_dir, sequences, attn="sdpa")
    fp64 = run_alone(case_dir, sequences, dtype=torch.float64)

    sdpa_err = max(max_abs(r, s) for r, s in zip(ref, sdpa))
    fp64_err = max(max_abs(r, s) for r, s in zip(ref, fp64))
    fp64_rel = max(float((r - s).norm() / s.norm()) for r, s in zip(ref, fp64))
    assert sdpa_err < 1e-4, f"{name}: sdpa and eager disagree by {sdpa_err}"
    assert fp64_rel < 1e-5, f"{name}: fp32 and fp64 disagree by rel {fp64_rel}"

    # The case's feature must matter.
    ablate = case.get("ablate")
    if isinstance(ablate, dict):
        off = run_alone(case_dir, sequences, overrides=ablate)
    else:
        off = run_alone(case_dir, sequences, mutate={"zero_biases": zero_biases, "unit_qk_norms": unit_qk_norms}[ablate])
    changes = case.get("ablate_changes", [True] * len(sequences))
    ablate_diffs = [max_abs(r, o) for r, o in zip(ref, off)]
    for i, (diff, must_change) in enumerate(zip(ablate_diffs, changes)):
        if must_change:
            assert diff > 1e-2, f"{name}: sequence {i} does not exercise the feature (diff {diff})"
        else:
            assert diff < 1e-5, f"{name}: sequence {i} should be unaffected by the feature (diff {diff})"

    logits = torch.cat(ref, dim=0).to(torch.float32)
    row_std = float(logits.std(dim=1).min())
    assert row_std > 0.1, f"{name}: logits near uniform (min row std {row_std})"

    ids = [t for seq in sequences for t in seq]
    positions = [p for seq in sequences for p in range(len(seq))]
    cu = [0]
    for seq in sequences:
        cu.append(cu[-1] + len(seq))
    metadata = {
        "case": name,
        "description": case["description"],
        "arch": case["arch"],
        "storage_dtype": str(storage_dtype).replace("torch.", ""),
        "seq_lens": json.dumps(case["seq_lens"]),
        "reference": "transformers fp32 CPU eager attention, each sequence alone (batch 1, fresh model)",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "sdpa_vs_eager_max_abs": f"{sdpa_err:.3e}",
        "fp32_vs_fp64_max_abs": f"{fp64_err:.3e}",
        "fp32_vs_fp64_rel_l2": f"{fp64_rel:.3e}",
        "feature_off_max_abs": json.dumps([float(f"{d:.4g}") for d in ablate_diffs]),
        "logits_abs_max": f"{float(logits.abs().max()):.4g}",
        "logits_min_row_std": f"{row_std:.4g}",
    }
    save_safetensors({
        "input_ids": torch.tensor(ids, dtype=torch.int32),
        "positions": torch.tensor(positions, dtype=torch.int32),
        "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
        "logits": logits.contiguous(),
    }, os.path.join(case_dir, "expected.safetensors"), metadata)

    size = sum(os.path.getsize(os.path.join(case_dir, f)) for f in os.listdir(case_dir))
    print(f"{name:28s} T={len(ids):3d} V={vocab:3d} |logits|max={metadata['logits_abs_max']:>6s} "
          f"sdpa={sdpa_err:.1e} fp64={fp64_err:.1e} (rel {fp64_rel:.1e}) feature_off={metadata['feature_off_max_abs']} "
          f"{size / 1024:.0f} KiB")
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=OUT_DIR, help="output root (default: tests/fixtures/golden)")
    parser.add_argument("--only", nargs="*", help="case names to (re)generate; default all")
    args = parser.parse_args()

    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # reproducible summation order
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for case in CASES:
        if args.only and case["name"] not in args.only:
            continue
        total += make_case(case, args.out)
    print(f"total {total / 1024:.0f} KiB in {args.out}")


if __name__ == "__main__":
    main()
