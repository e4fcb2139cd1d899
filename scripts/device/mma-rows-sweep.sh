#!/usr/bin/env bash
# On the GPU machine: the tensor-core LoRA passes (xa, da, dy) at several rows per block (SWIFT_LORA_MMA_ROWS), bench_lora's
# default and keep-bits cache rows for each, then the 7B step at the best ones. Carry .device-deps and .device-prebuilt
# (prebuild.sh bench_lora bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu mmarows bench_lora bench_train_step
for rows in ${ROWS:-0 128 384 512 768}; do
  echo "== SWIFT_LORA_MMA_ROWS=$rows"
  SWIFT_LORA_MMA_ROWS=$rows build-gpu/bench/bench_lora --dropout 0.05 | grep -E '^keep-bits cache|^default|^bit-identical'
done
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
[ -z "${STEP_ROWS:-}" ] || ab_steps "${REPS:-2}" "$q7" $STEP_ROWS
