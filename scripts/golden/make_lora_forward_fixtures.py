#!/usr/bin/env python3
"""Golden fixtures for inference with a PEFT LoRA adapter: for some forward golden cases (tests/fixtures/golden),
attach a PEFT LoRA adapter with random A and B (init_lora_weights=False, so B is not zero and the adapter changes
the logits), save it with PEFT's save_pretrained, and record the logits PEFT computes (eval mode, fp32, CPU,
each sequence alone), so that swift.cpp loading the same adapter must give the same logits.

Writes tests/fixtures/golden_lora/<case>/adapter/{adapter_config.json, adapter_model.safetensors} and
tests/fixtures/golden_lora/<case>/expected.safetensors (input_ids, positions, cu_seqlens: as the base case;
logits F32 (T, V)). Run from the repository root: python3 scripts/golden/make_lora_forward_fixtures.py
"""
import json
import os
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "tests", "fixtures", "golden")
OUT = os.path.join(ROOT, "tests", "fixtures", "golden_lora")

CASES = [
    dict(name="llama_gqa_llama3", r=4, alpha=8, rslora=False, targets="all-linear", seed=7),
    dict(name="qwen2_tied_1kv", r=3, alpha=16, rslora=True, targets=["q_proj", "v_proj", "down_proj"], seed=8),
]

import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import save_safetensors  # noqa: E402


def main():
    torch.set_default_dtype(torch.float32)
    for case in CASES:
        torch.manual_seed(case["seed"])
        base_dir = os.path.join(BASE, case["name"])
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
        config = LoraConfig(r=case["r"], lora_alpha=case["alpha"], lora_dropout=0.0, target_modules=case["targets"],
                            use_rslora=case["rslora"], init_lora_weights=False, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
        model.eval()
        expected = load_file(os.path.join(base_dir, "expected.safetensors"))
        ids, cu = expected["input_ids"].long(), expected["cu_seqlens"].tolist()
        rows = []
        with torch.no_grad():
            for b in range(len(cu) - 1):
                seq = ids[cu[b]:cu[b + 1]].unsqueeze(0)
                rows.append(model(input_ids=seq).logits[0])
            base_rows = []
            with model.disable_adapter():
                for b in range(len(cu) - 1):
                    base_rows.append(model(input_ids=ids[cu[b]:cu[b + 1]].unsqueeze(0)).logits[0])
        logits = torch.cat(rows).contiguous()
        changed = (logits - torch.cat(base_rows)).abs().max().item()
        assert changed > 1e-2, f"{case['name']}: the adapter barely changes the logits ({changed})"
        out_dir = os.path.join(OUT, case["name"])
        shutil.rmtree(out_dir, ignore_errors=True)
        adapter_dir = os.path.join(out_dir, "adapter")
        model.save_pretrained(adapter_dir)
        os.remove(os.path.join(adapter_dir, "README.md"))  # PEFT's model card: not needed
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            adapter_config = json.load(f)
        adapter_config["base_model_name_or_path"] = "tests/fixtures/golden/" + case["name"]  # no machine paths
        with open(os.path.join(adapter_dir, "adapter_config.json"), "w") as f:
            json.dump(adapter_config, f, indent=2, sort_keys=True)
            f.write("\n")
        save_safetensors({
            "input_ids": expected["input_ids"], "positions": expected["positions"],
            "cu_seqlens": expected["cu_seqlens"], "logits": logits,
        }, os.path.join(out_dir, "expected.safetensors"), {"case": case["name"], "adapter_changes_logits_by": f"{changed:.4g}",
            "peft": __import__("peft").__version__})
        print(case["name"], "adapter changes logits by", changed)


if __name__ == "__main__":
    main()
