#!/usr/bin/env bash
# On the GPU machine, one call: the xa and da passes of a layer's q, k, v (and of gate, up) in one launch over their
# shared input (ops::lora_xa_shared / lora_linear_backward_shared; SWIFT_LORA_SHARED_X=0 for the A/B). The LoRA /
# training / golden gpu tests (OpsCudaMatmul.LoraSharedXPassesAreTheSingleOps: the same bits as the single ops), then
# the 7B interleaved REPS times (default 2) with and without, and the events profile's LoRA lines of both.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu sharedx test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaTraining*:*Golden*:OpsCudaMatmul.Lora*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_LORA_SHARED_X=0
for setting in X=1 SWIFT_LORA_SHARED_X=0; do
  echo "== events profile, $setting"
  env $setting SWIFT_PROFILE=events build-gpu/bench/bench_train_step --config bench/configs/qwen2.5-7b.json \
    --tuner lora --seq 2048 --batch 4 --steps 3 --warmup 1 2> "${OUT:-/tmp}/profile-$setting.txt" | show_bench
  grep -E '^breakdown per step|lora_(xa|linear)' "${OUT:-/tmp}/profile-$setting.txt" | head -16
done
