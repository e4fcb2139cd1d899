#!/usr/bin/env bash
# On the GPU machine: o's and down's residual read by our Hopper GEMM with their B product's tail
# (ops::lora_linear_residual_from_xa: the residual added to the fp32 sums, one rounding; on by default) against
# SWIFT_LORA_RESIDUAL_IN_GEMM=0 (the product, then a plain add): the GEMM, LoRA, DoRA, training, golden, offload and F16
# gpu tests, then the 7B LoRA step interleaved both ways, memory free and within 30 GiB (N = 20), and the default's
# events profiles. Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
grep -E '^\[  FAILED  \]|Failure|worst' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-3}" "$b7" X=1 SWIFT_LORA_RESIDUAL_IN_GEMM=0
AB_LABEL="30 GiB" ab_steps 1 "$b7 --recompute_modules layernorm act --offload_embedding --offload_frozen_layers 20" \
  X=1 SWIFT_LORA_RESIDUAL_IN_GEMM=0
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|frozen_gemm|^add|residual" X=1 SWIFT_LORA_RESIDUAL_IN_GEMM=0
