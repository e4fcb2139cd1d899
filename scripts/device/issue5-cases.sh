#!/usr/bin/env bash
# On the GPU machine: issue 5's benchmark cases, ours and the peer (transformers + PEFT) one after the other in one
# call, as docs/PERFORMANCE.md's summary table states them:
#   - Qwen2.5-7B LoRA 2048 x 4, memory free: ours as is, the peer without checkpointing;
#   - Qwen2.5-7B LoRA 2048 x 4, one 8k sequence and Llama-3.1-8B LoRA 2048 x 4 within the peer's memory: ours with
#     `--recompute_modules layernorm act --offload_embedding --offload_frozen_layers N` (N = 20, 20, 24), the peer
#     with gradient checkpointing every layer;
#   - Qwen2.5-0.5B full fine-tuning 2048 x 8, both as is;
# then the 7B's step breakdown (events profile). TESTS=1 first runs the whole gpu suite (GPU_TESTS, default '*').
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
#   bash scripts/device/issue5-cases.sh            # the cases (~5 minutes on a warm machine)
#   TESTS=1 CASES=0 bash scripts/device/issue5-cases.sh   # the gpu suite alone
source "$(dirname "$0")/env.sh"
build_gpu issue5 test_gpu bench_train_step
if [ "${TESTS:-0}" = 1 ]; then
  gpu_tests "${GPU_TESTS:-*}"
  grep -E '^\[  FAILED  \]|Failure|tests? (passed|skipped)|PASSED' "${OUT:-/tmp}/gpu-suite.log" | tail -8 || true
fi
[ "${CASES:-1}" = 1 ] || exit 0
la="--recompute_modules layernorm act --offload_embedding --offload_frozen_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
q8k="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 8192 --batch 1"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash "$(dirname "$0")/bench-train.sh" 7b-lora \
  ours "$q7 $la 20" peer "$q7 --gradient-checkpointing" \
  ours "$q8k $la 20" peer "$q8k --gradient-checkpointing" \
  ours "$l8 $la 24" peer "$l8 --gradient-checkpointing" \
  05b-full 7b-lora-breakdown 2>&1 | tail -60
