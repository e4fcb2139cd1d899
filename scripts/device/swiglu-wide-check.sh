#!/usr/bin/env bash
# On the GPU machine, one call (session 14): element-wise maps (add, swiglu, swiglu_backward) on 16-bit tensors in
# groups of 8 elements (16-byte accesses) where every operand is 16-byte aligned. The element-wise / F16 / training /
# golden gpu tests (GPU_TESTS overrides the filter); the opt-in swiglu timing (groups of 8 against groups of 4 on
# views 4 elements in) at the 0.5B's and the 7B's MLP shapes; the 0.5B full step twice; its events profile (the
# breakdown and the swiglu rows; $OUT/profile-05b.txt).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu swiglu test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaElementwise.*:OpsCudaF16*:*CudaTraining*:*Golden*}"
SWIFT_GPU_BENCH=1 build-gpu/tests/test_gpu --gtest_filter='OpsCudaElementwise.BenchSwiglu' 2>&1 | grep -E "^swiglu" || true
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 2 "$q05" X=1
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 > "${OUT:-/tmp}/profile-05b.json" \
  2> "${OUT:-/tmp}/profile-05b.txt" || true
grep -E "^breakdown|^swiglu|^add" "${OUT:-/tmp}/profile-05b.txt" | cut -c1-300 || true
