#!/usr/bin/env bash
# On the GPU machine, one call for session 14's tree: the whole gpu suite (GPU_TESTS overrides the filter), then
# bench-train.sh 05b-full 7b-lora (ours and the peer, same call), the 7B's events breakdown (7b-lora-breakdown) and the
# 0.5B once more (ours) after the peer, then the 0.5B's events profile (its breakdown and the rows of the
# cross-entropy, swiglu, rmsnorm and optimizer ops; $OUT/profile-05b.txt).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
bash scripts/device/bench-train.sh 05b-full 7b-lora 7b-lora-breakdown ours "$q05" 2>&1 | tail -12
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 --steps 5 --warmup 2 > "${OUT:-/tmp}/profile-05b.json" \
  2> "${OUT:-/tmp}/profile-05b.txt" || true
grep -E "^breakdown|^(cross_entropy|swiglu|rmsnorm|adamw|grad_norm)" "${OUT:-/tmp}/profile-05b.txt" | cut -c1-300 || true
