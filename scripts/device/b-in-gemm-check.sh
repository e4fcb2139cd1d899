#!/usr/bin/env bash
# On the GPU machine: LoRA's B product inside the frozen product (our Hopper GEMM with a tail k-block of bf16 pieces,
# lora_tail.cu; gate / up then feed a plain swiglu, o / down a plain residual add; on by default) against
# SWIFT_LORA_B_IN_GEMM=0 (cuBLASLt's product, then the folded swiglu / residual passes): the GEMM, LoRA, DoRA,
# training, golden, offload and F16 gpu tests (the default, then the training ones with it off), then the 7B LoRA
# step interleaved both ways, memory free and within 30 GiB (N = 20), and the default's events profile.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
grep -E '^\[  FAILED  \]|Failure|worst' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
SWIFT_LORA_B_IN_GEMM=0 build-gpu/tests/test_gpu --gtest_filter='*CudaTraining*:*Golden*:CudaOffload.*' 2>&1 \
  | grep -E '^\[  (PASSED|FAILED)|Failure' | head -20 | sed 's/^/B in GEMM off: /' || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-3}" "$b7" X=1 SWIFT_LORA_B_IN_GEMM=0
AB_LABEL="30 GiB" ab_steps 1 "$b7 --recompute_modules layernorm act --offload_embedding --offload_frozen_layers 20" \
  X=1 SWIFT_LORA_B_IN_GEMM=0
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|frozen_gemm|swiglu|add|b_product|xa " X=1
