#!/usr/bin/env python3
"""Checks that Hugging Face PEFT loads an adapter checkpoint written by our `swift sft` and computes the logits our
`swift forward` computes with it.

  check_peft_loads_ours.py --checkpoint OUT/vN-.../checkpoint-N --model BASE_HF_DIR --swift build/swift [--ids 1,2,3]
      runs `swift forward --model BASE --adapters CKPT --ids ... --logits_out tmp.safetensors`, loads
      PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE, fp32), CKPT) (eval mode, CPU, fp32,
      eager attention), and prints the max abs difference of the logits at every position (and how far the base
      model's logits are, to show the adapter matters). Exit status 1 when the difference exceeds --tol.

  check_peft_loads_ours.py --self_test --swift build/swift --tokenizer DIR --dataset FILE.jsonl [--work DIR]
      builds a tiny random Qwen2 model (HF format, the given tokenizer's vocabulary) in the work directory, runs a
      short `swift sft` for each variant (LoRA; DoRA; DoRA + modules_to_save embed_tokens lm_head), and checks each
      final checkpoint as above. This is what the ctest `golden.peft_loads_ours` runs.

The tolerance (1e-4 max abs, as the forward golden tests) covers fp32 rounding between two implementations of the
same fp32 computation; the adapters moved the logits by ~1e-1 or more (printed as `adapter effect`).
"""

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile


def parse_ids(text):
    return [int(t) for t in text.split(",") if t.strip()]


def run_swift_forward(swift, model_dir, checkpoint, ids, out_path):
    cmd = [swift, "forward", "--model", model_dir, "--ids", ",".join(map(str, ids)), "--logits_out", out_path]
    if checkpoint:
        cmd += ["--adapters", checkpoint]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"swift forward failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    from safetensors.torch import load_file
    return load_file(out_path)["logits"]


def check(swift, model_dir, checkpoint, ids, tol):
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        ours = run_swift_forward(swift, model_dir, checkpoint, ids, os.path.join(tmp, "logits.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        base_logits = base(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
        model = peft.PeftModel.from_pretrained(base, checkpoint)
        model.eval()
        theirs = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    diff = float((ours - theirs).abs().max())
    effect = float((theirs - base_logits).abs().max())
    with open(os.path.join(checkpoint, "adapter_config.json")) as f:
        config = json.load(f)
    kind = "DoRA" if config.get("use_dora") else "LoRA"
    if config.get("modules_to_save"):
        kind += " + modules_to_save " + " ".join(config["modules_to_save"])
    print(f"{checkpoint}: {kind}, {len(ids)} tokens: max abs |swift - PEFT| = {diff:.3e} (tolerance {tol:.0e}); "
          f"adapter effect max abs {effect:.3e}; |logits| max {float(theirs.abs().max()):.3f}")
    return diff <= tol and effect > 100 * tol


def make_tiny_model(out_dir, tokenizer_dir, seed=5):
    """A random Qwen2 model (2 layers, hidden 32, GQA 4/2, untied head) with the tokenizer's vocabulary."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=61, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False, rms_norm_eps=1e-6,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    model.save_pretrained(out_dir, safe_serialization=True)
    for name in os.listdir(tokenizer_dir):
        if name.startswith("tokenizer") or name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
            shutil.copy(os.path.join(tokenizer_dir, name), out_dir)
    return vocab


def self_test(args):
    work = args.work or tempfile.mkdtemp(prefix="peft_loads_ours_")
    model_dir = os.path.join(work, "tiny_qwen2")
    if os.path.isdir(model_dir):
        shutil.rmtree(model_dir)
    vocab = make_tiny_model(model_dir, args.tokenizer)
    rng = random.Random(0)
    ids = parse_ids(args.ids) if args.ids else [rng.randrange(vocab) for _ in range(23)]
    variants = {
        "lora": [],
        "dora": ["--use_dora", "true"],
        "dora_mts": ["--use_dora", "true", "--modules_to_save", "embed_tokens", "lm_head"],
    }
    ok = True
    for name, extra in variants.items():
        out = os.path.join(work, "out_" + name)
        shutil.rmtree(out, ignore_errors=True)
        cmd = [args.swift, "sft", "--model", model_dir, "--dataset", args.dataset, "--tuner_type", "lora",
               "--lora_rank", "4", "--lora_alpha", "8", "--lora_dropout", "0.05", "--learning_rate", "1e-2",
               "--max_steps", "3", "--save_steps", "3", "--max_length", "256", "--logging_steps", "1",
               "--output_dir", out] + extra
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"swift sft ({name}) failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            return False
        checkpoints = sorted(glob.glob(os.path.join(out, "v*", "checkpoint-*")))
        if not checkpoints:
            print(f"swift sft ({name}) wrote no checkpoint under {out}")
            return False
        ok = check(args.swift, model_dir, checkpoints[-1], ids, args.tol) and ok
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swift", required=True, help="the swift executable")
    parser.add_argument("--checkpoint", help="adapter checkpoint written by swift sft")
    parser.add_argument("--model", help="base model (Hugging Face directory)")
    parser.add_argument("--ids", help="comma-separated token ids (default: 23 seeded random ids)")
    parser.add_argument("--tol", type=float, default=1e-4, help="max abs logits difference allowed")
    parser.add_argument("--self_test", action="store_true", help="build a tiny model, run swift sft, check")
    parser.add_argument("--tokenizer", help="--self_test: tokenizer directory (tokenizer.json, tokenizer_config.json)")
    parser.add_argument("--dataset", help="--self_test: training data for swift sft")
    parser.add_argument("--work", help="--self_test: keep the model and runs in this directory")
    args = parser.parse_args()

    try:
        import peft  # noqa: F401
        import torch
        import transformers
    except ImportError as e:  # the ctest treats 77 as "skipped"
        print(f"skipped: {e} (pip install torch transformers peft)")
        sys.exit(77)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    if args.self_test:
        if not (args.tokenizer and args.dataset):
            parser.error("--self_test needs --tokenizer and --dataset")
        ok = self_test(args)
    else:
        if not (args.checkpoint and args.model):
            parser.error("--checkpoint and --model are required (or --self_test)")
        with open(os.path.join(args.model, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        rng = random.Random(0)
        ids = parse_ids(args.ids) if args.ids else [rng.randrange(vocab) for _ in range(23)]
        ok = check(args.swift, args.model, args.checkpoint, ids, args.tol)
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
