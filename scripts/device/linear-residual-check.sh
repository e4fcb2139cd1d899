#!/usr/bin/env bash
# On the GPU machine, one call for ops::linear_residual (o's and down's products read the residual as cuBLASLt's C
# instead of accumulating onto a copy of it): the matmul and training gpu tests, then the 0.5B full step with and
# without it (SWIFT_LINEAR_RESIDUAL=0), interleaved (ours only).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu residual test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 3 "$q05" X=1 SWIFT_LINEAR_RESIDUAL=0
