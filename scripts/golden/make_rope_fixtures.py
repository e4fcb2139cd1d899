#!/usr/bin/env python3
"""make_rope_fixtures.py — dumps Hugging Face transformers' RoPE inverse frequencies and attention scaling
into tests/fixtures/rope_frequencies.json, the oracle of swift::ops::rope_frequencies and swift::ops::rope.

Invariants:
  - Every number comes from transformers itself (the rope init functions of modeling_rope_utils and
    LlamaRotaryEmbedding / apply_rotary_pos_emb of modeling_llama); nothing here re-implements RoPE.
  - Float values are written as Python floats of the exact fp32 values (round-trip exact in JSON).
  - "dynamic" cases take seq_len as a 0-dim int64 tensor, as LlamaRotaryEmbedding's dynamic update passes
    it at run time (max(position_ids) + 1); transformers then computes the grown base in fp32.
  - "apply" cases run the real rotary module on x (T, H, D) at the given positions; for dynamic types the
    module updates its frequencies from the positions exactly as in a model forward.

Usage: python3 scripts/golden/make_rope_fixtures.py [out.json]   (needs torch and transformers; CPU only)
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "rope_frequencies.json")

# Keys of the rope parameters we pass through, and the defaults the C++ RopeConfig uses when absent.
PARAM_KEYS = ["factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
              "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"]


def make_config(rope_type, head_dim, theta, max_pos, **params):
    rope_parameters = {"rope_type": rope_type, "rope_theta": theta}
    rope_parameters.update(params)
    heads = 2
    return LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads,
                       head_dim=head_dim, max_position_embeddings=max_pos, rope_parameters=rope_parameters,
                       intermediate_size=16, num_hidden_layers=1, vocab_size=16)


def frequencies(config, rope_type, seq_len):
    if rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    if rope_type == "dynamic":
        # The run-time path: seq_len = torch.max(position_ids) + 1 is an int64 tensor.
        return fn(config, None, seq_len=torch.tensor(seq_len, dtype=torch.int64))
    return fn(config, None, seq_len=seq_len)


def f32_list(t):
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


def case_record(name, rope_type, head_dim, theta, max_pos, seq_len, params):
    config = make_config(rope_type, head_dim, theta, max_pos, **params)
    inv_freq, scaling = frequencies(config, rope_type, seq_len)
    record = {"name": name, "rope_type": rope_type, "head_dim": head_dim, "theta": theta,
              "max_position_embeddings": max_pos, "seq_len": seq_len}
    for key in PARAM_KEYS:
        if key in config.rope_parameters and config.rope_parameters[key] is not None:
            value = config.rope_parameters[key]
            record[key] = value if isinstance(value, bool) else float(value)
    record["inv_freq"] = f32_list(inv_freq)
    record["attention_scaling"] = float(torch.tensor(float(scaling), dtype=torch.float32))
    return record


def apply_record(name, rope_type, head_dim, theta, max_pos, params, positions, heads, seed):
    config = make_config(rope_type, head_dim, theta, max_pos, **params)
    rotary = LlamaRotaryEmbedding(config)
    gen = torch.Generator().manual_seed(seed)
    T = len(positions)
    x = torch.randn(T, heads, head_dim, generator=gen, dtype=torch.float32)
    pos = torch.tensor([positions], dtype=torch.int64)
    cos, sin = rotary(x, pos)                               # (1, T, D)
    q = x.transpose(0, 1).unsqueeze(0)                      # (1, H, T, D)
    out, _ = apply_rotary_pos_emb(q, q, cos, sin)           # unsqueeze_dim=1 broadcasts over heads
    out = out.squeeze(0).transpose(0, 1).contiguous()       # (T, H, D)
    record = {"name": name, "rope_type": rope_type, "head_dim": head_dim, "theta": theta,
              "max_position_embeddings": max_pos, "seq_len": max(positions) + 1, "shape": [T, heads, head_dim],
              "positions": positions}
    for key in PARAM_KEYS:
        if key in config.rope_parameters and config.rope_parameters[key] is not None:
            value = config.rope_parameters[key]
            record[key] = value if isinstance(value, bool) else float(value)
    record["inv_freq"] = f32_list(rotary.inv_freq)          # after the module's own (dynamic) update
    record["attention_scaling"] = float(torch.tensor(float(rotary.attention_scaling), dtype=torch.float32))
    record["x"] = f32_list(x)
    record["out"] = f32_list(out)
    return record


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    torch.set_num_threads(1)
    cases = []
    for head_dim, theta in [(12, 10000.0), (24, 1000000.0), (64, 10000.0), (64, 500000.0), (128, 1000000.0),
                            (18, 12345.678)]:
        cases.append(case_record(f"default_d{head_dim}_t{theta:g}", "default", head_dim, theta, 2048, None, {}))
    for head_dim, factor in [(12, 2.0), (24, 4.0), (64, 8.0), (64, 2.5), (24, 3.0)]:
        cases.append(case_record(f"linear_d{head_dim}_f{factor:g}", "linear", head_dim, 10000.0, 2048, None,
                                 {"factor": factor}))
    for head_dim, factor, theta in [(12, 2.0, 10000.0), (24, 4.0, 1000000.0), (64, 8.0, 10000.0),
                                    (64, 3.0, 500000.0)]:
        for seq_len in [100, 2048, 2049, 3000, 8191, 40000]:
            cases.append(case_record(f"dynamic_d{head_dim}_f{factor:g}_s{seq_len}", "dynamic", head_dim, theta,
                                     2048, seq_len, {"factor": factor}))
    yarn_params = [
        (12, {"factor": 2.0, "original_max_position_embeddings": 1024}),
        (24, {"factor": 4.0, "original_max_position_embeddings": 2048}),
        (64, {"factor": 8.0, "original_max_position_embeddings": 4096}),
        (64, {"factor": 4.0, "original_max_position_embeddings": 32768}),  # Qwen2.5 style
        (24, {"factor": 4.0, "original_max_position_embeddings": 2048, "truncate": False}),
        (64, {"factor": 8.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0, "beta_slow": 2.0}),
        (64, {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 0.707,
              "beta_fast": 32.0, "beta_slow": 1.0}),                      # DeepSeek style
        (24, {"factor": 4.0, "original_max_position_embeddings": 2048, "attention_factor": 1.25}),
        (12, {"factor": 2.0, "original_max_position_embeddings": 64, "beta_fast": 2.0, "beta_slow": 2.0}),
    ]
    for i, (head_dim, params) in enumerate(yarn_params):
        cases.append(case_record(f"yarn_{i}_d{head_dim}_f{params['factor']:g}", "yarn", head_dim, 10000.0,
                                 int(params["original_max_position_embeddings"] * params["factor"]), None, params))
    llama3_params = [
        (64, 500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}),
        (128, 500000.0, {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}),       # Llama 3.2 style
        (24, 10000.0, {"factor": 2.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                       "original_max_position_embeddings": 256}),
        (12, 10000.0, {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 3.0,
                       "original_max_position_embeddings": 100}),
    ]
    for i, (head_dim, theta, params) in enumerate(llama3_params):
        cases.append(case_record(f"llama3_{i}_d{head_dim}_f{params['factor']:g}", "llama3", head_dim, theta,
                                 int(params["original_max_position_embeddings"] * params["factor"]), None, params))

    applies = [
        apply_record("apply_default_d12", "default", 12, 10000.0, 2048, {}, [0, 1, 2, 3, 4, 0, 1, 7, 100, 2047],
                     3, 1),
        apply_record("apply_default_d64_far", "default", 64, 1000000.0, 40960, {}, [0, 5, 1000, 4095, 32767, 40000],
                     2, 2),
        apply_record("apply_linear_d24", "linear", 24, 10000.0, 2048, {"factor": 4.0}, [0, 3, 9, 513], 2, 3),
        apply_record("apply_dynamic_d24_grown", "dynamic", 24, 10000.0, 64, {"factor": 2.0},
                     [0, 1, 50, 63, 64, 99, 150], 2, 4),
        apply_record("apply_yarn_d24", "yarn", 24, 10000.0, 4096,
                     {"factor": 4.0, "original_max_position_embeddings": 1024}, [0, 1, 700, 1500, 4095], 2, 5),
        apply_record("apply_llama3_d24", "llama3", 24, 10000.0, 512,
                     {"factor": 2.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                      "original_max_position_embeddings": 256}, [0, 2, 77, 255, 511], 2, 6),
    ]
    data = {"generator": "scripts/golden/make_rope_fixtures.py", "transformers_version": transformers.__version__,
            "torch_version": torch.__version__, "cases": cases, "apply": applies}
    with open(out_path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} frequency cases and {len(applies)} apply cases to {os.path.relpath(out_path)}")


if __name__ == "__main__":
    main()
