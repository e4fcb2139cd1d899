#!/usr/bin/env bash
# On the GPU machine: the MLP's down backward through the swiglu (ops::lora_linear_swiglu_backward: down's dx term
# added in the swiglu backward's pass, lora_ring.cu launch_lora_swiglu_backward) against the term's pass then
# swiglu_backward (SWIFT_LORA_SWIGLU_BWD=0): the gpu tests of the LoRA ops (and session 22's corrected fused-term GEMM
# test), training, goldens, offload and F16, then the 7B LoRA step interleaved both ways and their events profiles.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:OpsCudaGemmSm90.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
grep -E '^\[  FAILED  \]|Failure|dgate|dup' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-3}" "$b7" SWIFT_LORA_SWIGLU_BWD=1 SWIFT_LORA_SWIGLU_BWD=0
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|dx_lora|swiglu_backward|lora_linear_swiglu" \
  SWIFT_LORA_SWIGLU_BWD=1 SWIFT_LORA_SWIGLU_BWD=0
