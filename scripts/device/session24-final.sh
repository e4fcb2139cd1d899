#!/usr/bin/env bash
# On the GPU machine (session 24): the GEMM, LoRA, DoRA, training, golden, offload and F16 gpu tests with this
# session's defaults (o's / down's residual and their dx terms in our Hopper GEMM), then ours and the peer in one call
# on the 7B (memory free, and within 30 GiB against the peer's checkpointing) and Llama-3.1-8B within the peer's
# memory. Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
grep -E '^\[  FAILED  \]|Failure' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
la="--recompute_modules layernorm act --offload_embedding --offload_frozen_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora ours "$q7 $la 20" peer "$q7 --gradient-checkpointing" \
  ours "$l8 $la 24" peer "$l8 --gradient-checkpointing" 2>&1 | tail -10
