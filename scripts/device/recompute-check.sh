#!/usr/bin/env bash
# On the GPU machine, one call (session 16's engine changes, not yet measured on a GPU): the selective MLP recompute
# reusing gate's and up's xa (SWIFT_RECOMPUTE_XA=1: the xa pass again) on the 7B within 30 GiB (l,a,mlp 17), and the
# block recompute without the block's output (SWIFT_RECOMPUTE_OUTPUT=1: made anyway) on the 7B with checkpointing
# every layer, each interleaved REPS times (default 2); then bench-train.sh 7b-lora-gc (ours and the peer, the
# same call). The CudaTraining / golden gpu tests first. Carry .device-deps (and .device-prebuilt: prebuild.sh
# test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu recompute test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaTraining*:*Golden*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
AB_LABEL="30 GiB" ab_steps "${REPS:-2}" "$q7 --recompute_modules layernorm act mlp --recompute_num_layers 17" X=1 \
  SWIFT_RECOMPUTE_XA=1
AB_LABEL="checkpointing" ab_steps "${REPS:-2}" "$q7 --gradient_checkpointing" X=1 SWIFT_RECOMPUTE_OUTPUT=1
bash scripts/device/bench-train.sh 7b-lora-gc 2>&1 | tail -4
