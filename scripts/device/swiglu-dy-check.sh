#!/usr/bin/env bash
# On the GPU machine (session 25): gate's and up's dy passes (g = dy b, db) inside the swiglu backward's pass
# (ops::swiglu_backward_lora_dy, lora_dy.cu; SWIFT_LORA_SWIGLU_DY=1, off by default) and the swiglu backward's groups
# with unbranched divisions (SWIFT_SWIGLU_BWD_GROUPS, on): the gpu tests of both with the LoRA ops and training, then
# the 7B LoRA step interleaved under AB_SETTINGS and their events profiles.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.SwigluBackwardLoraDy*:OpsCudaElementwise.*:OpsCudaMatmul.Lora*:*CudaTraining*:OpsCudaGemmSm90.*}"
grep -E '^\[  FAILED  \]|Failure' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
# shellcheck disable=SC2086  # AB_SETTINGS: a list of settings
ab_steps "${REPS_AB:-3}" "$b7" ${AB_SETTINGS:-X=1 SWIFT_SWIGLU_BWD_GROUPS=0 SWIFT_LORA_SWIGLU_DY=1}
# shellcheck disable=SC2086
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|swiglu|lora_linear_backward.dy" ${AB_SETTINGS:-X=1 SWIFT_SWIGLU_BWD_GROUPS=0 SWIFT_LORA_SWIGLU_DY=1}
