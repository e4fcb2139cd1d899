#!/usr/bin/env bash
# On the GPU machine (session 26): down's dropout mask drawn in the swiglu's pass (ops::swiglu_drawing_mask,
# elementwise.cu; SWIFT_SWIGLU_DRAWS_MASK, on) so that down's xa pass reads it from the keep-bits cache
# (launch_lora_xa_from_bits) instead of drawing it: the gpu tests of both with the LoRA ops and training, then the 7B
# LoRA step interleaved under AB_SETTINGS and their events profiles.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.SwigluDrawingMask*:OpsCudaElementwise.*:OpsCudaMatmul.Lora*:*CudaTraining*:*Golden*}"
grep -E '^\[  FAILED  \]|Failure' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
# shellcheck disable=SC2086  # AB_SETTINGS: a list of settings
ab_steps "${REPS_AB:-3}" "$b7" ${AB_SETTINGS:-X=1 SWIFT_SWIGLU_DRAWS_MASK=0}
# shellcheck disable=SC2086
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|swiglu|lora_xa" ${AB_SETTINGS:-X=1 SWIFT_SWIGLU_DRAWS_MASK=0}
