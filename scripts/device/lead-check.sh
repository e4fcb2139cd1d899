#!/usr/bin/env bash
# On the GPU machine: the LoRA / DoRA / training GPU tests, a per-op profile of the 7B LoRA step, and our step alone
# for the block-recompute cases (quick checks between full bench-train.sh runs).   Carry .device-deps (and .device-prebuilt: prebuild.sh).
set -uo pipefail
bash "$(dirname "$0")/gpu-tests.sh" '*Lora*:*Dora*:*CudaTraining*:*CrossEntropy*' 2>&1 | grep -E "^\[  |error|FAIL|Error" | tail -12
source "$(dirname "$0")/env.sh"
build_gpu lead bench_train_step
echo "== profile"
SWIFT_PROFILE=1 build-gpu/bench/bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 \
  --batch 4 --steps 3 --warmup 1 2>&1 >/dev/null | grep -E "lora|step [0-9]|attention|cross"
for n in "$@"; do
  echo "== 7B LoRA 2048x4, checkpointing, recompute $n layers"
  build-gpu/bench/bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 \
    --gradient_checkpointing --recompute_num_layers "$n" --steps 3 --warmup 1 2>/dev/null
done
