#!/usr/bin/env bash
# On the GPU machine, one call: rmsnorm's narrow-row kernels (256 <= C <= 1024: warp per row, 16-byte accesses, the
# backward's dx and dweight partials in one pass; SWIFT_RMSNORM_NARROW=0 keeps the strided kernels). The rmsnorm,
# training and golden gpu tests, the op timing at 16,384 x 896 / 3,584 (both kernel sets), the 0.5B full step
# interleaved (ours only), and its SWIFT_PROFILE=events table (profile.log).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu narrow test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*Rmsnorm*:*CudaTraining*:*Golden*}"
SWIFT_GPU_BENCH=1 build-gpu/tests/test_gpu --gtest_filter='*BenchRmsnormBackward*' 2>&1 | grep '^rmsnorm'
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 3 "$q05" X=1 SWIFT_RMSNORM_NARROW=0
SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q05/--steps 5/--steps 3} > /dev/null 2> "${OUT:-/tmp}/profile.log"
grep -E "^ *(rmsnorm|idle|gemm|attention|loss|elementwise|optimizer)" "${OUT:-/tmp}/profile.log" | head -20 || true
