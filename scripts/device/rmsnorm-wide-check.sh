#!/usr/bin/env bash
# On the GPU machine, one call: RMSNorm over hidden-state rows (1024 < C <= 4096) with two warps per row
# (rmsnorm.cu rmsnorm_wide_kernel / rmsnorm_dx_wide_kernel) against a block per row (SWIFT_RMSNORM_NARROW=0). The
# element-wise / training / golden gpu tests, the opt-in rmsnorm timing (16,384 x 896 and x 3,584), then the 7B
# interleaved REPS times (default 2). Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu rmswide test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaElementwise.*:*CudaTraining*:*Golden*}"
SWIFT_GPU_BENCH=1 build-gpu/tests/test_gpu --gtest_filter='*BenchRmsnormBackward*' 2>&1 | grep '^rmsnorm'
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_RMSNORM_NARROW=0
