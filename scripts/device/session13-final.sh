#!/usr/bin/env bash
# On the GPU machine, one call for session 13's tree: the whole gpu suite (GPU_TESTS overrides the filter), then
# bench-train.sh 05b-full 7b-lora (ours and the peer, same call) and the 0.5B once more (ours) after the peer, then
# one interleaved pair of the 0.5B against SWIFT_CUDNN_ATTENTION_BWD=nondeterministic (what determinism costs), then
# the 0.5B's events profile (its breakdown and the per-op rows of rmsnorm and grad_norm; $OUT/profile-05b.txt).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
bash scripts/device/bench-train.sh 05b-full 7b-lora ours "$q05" 2>&1 | tail -10
ab_steps 1 "$q05 --steps 5 --warmup 2" X=1 SWIFT_CUDNN_ATTENTION_BWD=nondeterministic
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 --steps 3 --warmup 2 > "${OUT:-/tmp}/profile-05b.json" \
  2> "${OUT:-/tmp}/profile-05b.txt" || true
grep -E "^breakdown|^(rmsnorm|grad_norm|adamw)" "${OUT:-/tmp}/profile-05b.txt" | cut -c1-200 || true
