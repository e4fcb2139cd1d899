#!/usr/bin/env bash
# On the GPU machine, one call: rope with 16-byte accesses over several tokens per block (SWIFT_ROPE_VEC=0 keeps the
# per-pair kernel) and copy_columns through a 16-byte copy kernel (instead of cudaMemcpy2DAsync). The rope, layout,
# rmsnorm, training and golden gpu tests; the 0.5B full step interleaved (ours only); its SWIFT_PROFILE=events table
# (profile.log: rope_columns and copy_columns per call).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu rope test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*Rope*:*CopyColumns*:*Rmsnorm*:*CudaTraining*:*Golden*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 3 "$q05" X=1 SWIFT_ROPE_VEC=0
SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q05/--steps 5/--steps 3} > /dev/null 2> "${OUT:-/tmp}/profile.log"
grep -E "^(breakdown|rope|copy_columns|rmsnorm)" "${OUT:-/tmp}/profile.log" | head -20 || true
