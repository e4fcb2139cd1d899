#!/usr/bin/env bash
# On the GPU machine, one call (session 13): the rmsnorm / f16 / training gpu tests (GPU_TESTS overrides the filter);
# the opt-in rmsnorm timing at the 0.5B and 7B widths (narrow and strided kernels, forward and backward); the 0.5B
# full step with the narrow kernels (default: now the forward too) against SWIFT_RMSNORM_NARROW=0 (the strided
# forward and backward), interleaved REPS (default 3) times.
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu rmsnorm test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaElementwise.Rmsnorm*:OpsCudaF16*:*CudaTraining*:*Golden*}"
SWIFT_GPU_BENCH=1 build-gpu/tests/test_gpu --gtest_filter='OpsCudaElementwise.BenchRmsnormBackward' 2>&1 \
  | grep -E "^rmsnorm" || true
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps "${REPS:-3}" "$q05" X=1 SWIFT_RMSNORM_NARROW=0
