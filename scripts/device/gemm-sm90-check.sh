#!/usr/bin/env bash
# On the GPU machine, one call: our own Hopper GEMM in the product (ops/cuda/gemm_sm90.cu, SWIFT_GEMM_SM90=1; off by
# default). Its gpu tests (OpsCudaGemmSm90.*: against the reference on odd shapes and both B layouts, against cuBLASLt
# on the 7B's shapes with the count of identical bits, what it leaves to cuBLASLt) with the matmul and training ones,
# then the 7B LoRA step interleaved REPS times (default 2) with cuBLASLt and with ours, and the events profile's
# breakdown and product lines of both. Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu
# bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu sm90 test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.*:*CudaTraining*:*Golden*}"
grep '^\[ gemm_sm90 \]' "${OUT:-/tmp}/gpu-suite.log" || true
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_GEMM_SM90=1
events_profiles "--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 3 --warmup 1" \
  '^breakdown per step|frozen_gemm|^linear ' X=1 SWIFT_GEMM_SM90=1
