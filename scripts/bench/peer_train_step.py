#!/usr/bin/env python3
"""The peer of bench_train_step: Hugging Face transformers + PEFT on the same shapes (development only).

Random weights of the architecture in config.json (bf16, sdpa attention), LoRA r=8 alpha=32 on all linear layers
(PEFT keeps the adapters in fp32) with dropout 0.05 (ms-swift's default; --lora-dropout 0 is PEFT's own default, and
bench_train_step's --lora_dropout 0) or full fine-tuning (bf16 parameters), torch's fused AdamW,
random token ids with every token a target, one optimizer step per batch. Prints one JSON line with the same
fields as bench_train_step: tokens/s over the timed steps, peak allocated / reserved GiB, model TFLOP/s
(forward FLOPs x2 for LoRA, x3 for full, counted as bench_train_step counts them).

  python3 scripts/bench/peer_train_step.py --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 \
      --batch 4 [--gradient-checkpointing] [--lora-dropout 0.05] [--steps 6 --warmup 2] [--device cuda|cpu]
  torchrun --nproc_per_node N scripts/bench/peer_train_step.py ...     data parallel

Data parallel (WORLD_SIZE > 1, torchrun's environment): rank r on cuda:LOCAL_RANK (NCCL) or the CPU (gloo), the
model wrapped in DistributedDataParallel as ms-swift's trainer wraps it (gradient buckets of bucket_cap_mb 25,
reduced during the backward; find_unused_parameters False; gradient checkpointing through the model's own switch,
non-reentrant, before wrapping). Weak scaling: every rank runs --seq x --batch on its own random tokens (generator
seed 1 + rank: rank 0 draws what one process draws). A step's time is the slowest rank's (all_reduce MAX); rank 0
alone prints, adding world_size, global and per-GPU tokens/s and the largest peak over ranks (tokens_per_s and
model_tflops stay per GPU), as bench_train_step does. One process prints the fields it always printed.
--device cpu (float32 weights, as bench_train_step on the CPU; peaks are the process's max RSS) is for testing the
script without a GPU.
"""
import argparse
import json
import os
import resource
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
    ap.add_argument("--lora-dropout", type=float, default=0.05)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    if not 0.0 <= args.lora_dropout < 1.0:
        ap.error(f"--lora-dropout {args.lora_dropout}: must be in [0, 1)")
    if args.steps < 1 or args.warmup < 0:
        ap.error(f"--steps {args.steps} --warmup {args.warmup}: need at least one timed step and warmup >= 0")

    from transformers import AutoConfig, AutoModelForCausalLM
    import transformers
    import peft

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device; use --device cpu")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group(backend="nccl" if cuda else "gloo", device_id=device if cuda else None)

    with open(args.config) as fh:
        cfg = AutoConfig.for_model(**json.load(fh))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16 if cuda else torch.float32,
                                                 attn_implementation="sdpa")
    if args.tuner == "lora":
        lcfg = peft.LoraConfig(r=8, lora_alpha=32, lora_dropout=args.lora_dropout, target_modules="all-linear", task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lcfg)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if args.tuner == "lora":
            model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    if world > 1:  # DDP's defaults (bucket_cap_mb 25, overlapped with the backward), as the HF Trainer wraps it
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None,
                                                          find_unused_parameters=False)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    gen = torch.Generator(device=device).manual_seed(1 + rank)
    tokens = args.seq * args.batch
    times = []
    loss_value = float("nan")
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=device, generator=gen)
        if step == args.warmup and cuda:
            torch.cuda.reset_peak_memory_stats()
        synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize()
        times.append(time.perf_counter() - t0)
        loss_value = out.loss.item()
    timed = times[args.warmup:]
    if cuda:
        peak_allocated = torch.cuda.max_memory_allocated() / 2**30
        peak_reserved = torch.cuda.max_memory_reserved() / 2**30
    else:  # the process's peak resident set (ru_maxrss is in KiB on Linux)
        peak_allocated = peak_reserved = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if world > 1:  # a step lasts as long as its slowest rank's; the loss over every rank's tokens
        import torch.distributed as dist
        t = torch.tensor(timed, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        timed = t.tolist()
        peaks = torch.tensor([peak_allocated, peak_reserved], dtype=torch.float64, device=device)
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
        loss = torch.tensor([loss_value], dtype=torch.float64, device=device)
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)  # every rank has the same number of targets: mean of means
        loss_value = loss.item() / world
    step_s = sorted(timed)[len(timed) // 2]
    flops = forward_flops_per_token(cfg, args.seq) * (2 if args.tuner == "lora" else 3) * tokens
    row = {
        "impl": f"transformers {transformers.__version__} + peft {peft.__version__} (torch {torch.__version__})",
        "config": args.config, "tuner": args.tuner, "seq": args.seq, "batch": args.batch,
        "lora_dropout": args.lora_dropout if args.tuner == "lora" else None,
        "gradient_checkpointing": args.gradient_checkpointing, "trainable": trainable,
        "step_s_median": round(step_s, 4), "tokens_per_s": round(tokens / step_s, 1),
        "model_tflops": round(flops / step_s / 1e12, 1),
        "peak_allocated_gib": round(peak_allocated, 2),
        "peak_reserved_gib": round(peak_reserved, 2),
        "last_loss": round(loss_value, 4)}
    if world > 1:
        row.update({"world_size": world, "global_tokens_per_s": round(world * tokens / step_s, 1),
                    "per_gpu_tokens_per_s": round(tokens / step_s, 1),
                    "peak_allocated_gib_max_rank": round(peaks[0].item(), 2),
                    "peak_reserved_gib_max_rank": round(peaks[1].item(), 2),
                    "ddp_bucket_cap_mb": model.bucket_bytes_cap / 2**20, "comm_backend": "nccl" if cuda else "gloo"})
    if rank == 0:
        print(json.dumps(row), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
