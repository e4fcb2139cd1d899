#!/usr/bin/env python3
"""The peer of bench_train_step: Hugging Face transformers + PEFT on the same shapes (development only).

Random weights of the architecture in config.json (bf16, sdpa attention), LoRA r=8 alpha=32 dropout 0.05 on all
linear layers (PEFT keeps the adapters in fp32) or full fine-tuning (bf16 parameters), torch's fused AdamW,
random token ids with every token a target, one optimizer step per batch. Prints one JSON line with the same
fields as bench_train_step: tokens/s over the timed steps, peak allocated / reserved GiB, model TFLOP/s
(forward FLOPs x2 for LoRA, x3 for full, counted as bench_train_step counts them).

  python3 scripts/bench/peer_train_step.py --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 \
      --batch 4 [--gradient-checkpointing] [--steps 6 --warmup 2]
"""
import argparse
import json
import time

import torch


def forward_flops_per_token(cfg, seq):
    c, f, hq, hkv = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or c // hq
    per_layer = 2 * (c * hq * d + 2 * c * hkv * d + hq * d * c + 3 * c * f)  # q, k, v, o, gate, up, down
    attention = 2 * seq * hq * d  # causal: QK^T and PV over seq/2 keys on average, 2 FLOPs per multiply-add
    return cfg.num_hidden_layers * (per_layer + attention) + 2 * c * cfg.vocab_size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--tuner", choices=["lora", "full"], default="lora")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoModelForCausalLM
    import transformers
    import peft

    with open(args.config) as fh:
        cfg = AutoConfig.for_model(**json.load(fh))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    if args.tuner == "lora":
        lcfg = peft.LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lcfg)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if args.tuner == "lora":
            model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)

    gen = torch.Generator(device="cuda").manual_seed(1)
    tokens = args.seq * args.batch
    times = []
    loss_value = float("nan")
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda", generator=gen)
        if step == args.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        loss_value = out.loss.item()
    timed = times[args.warmup:]
    step_s = sorted(timed)[len(timed) // 2]
    flops = forward_flops_per_token(cfg, args.seq) * (2 if args.tuner == "lora" else 3) * tokens
    print(json.dumps({
        "impl": f"transformers {transformers.__version__} + peft {peft.__version__} (torch {torch.__version__})",
        "config": args.config, "tuner": args.tuner, "seq": args.seq, "batch": args.batch,
        "gradient_checkpointing": args.gradient_checkpointing, "trainable": trainable,
        "step_s_median": round(step_s, 4), "tokens_per_s": round(tokens / step_s, 1),
        "model_tflops": round(flops / step_s / 1e12, 1),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
        "last_loss": round(loss_value, 4)}), flush=True)


if __name__ == "__main__":
    main()
