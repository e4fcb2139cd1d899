#!/usr/bin/env bash
# On the GPU machine, one call (session 12): gpu tests (GPU_TESTS, default the rope / rmsnorm / elementwise /
# training / golden / matmul ones); the 0.5B full step with packed q/k/v's rope and v copy in one launch (rope_qkv,
# default) against SWIFT_ROPE_QKV=0 (three launches), interleaved REPS (default 3) times; then the 0.5B events
# profile ($OUT/profile-05b.txt: rope_qkv's and rmsnorm_backward's time per call).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu ropeqkv test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*Rope*:*Rmsnorm*:*RmsNorm*:*Elementwise*:*Training*:*Golden*:*Matmul*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps "${REPS:-3}" "$q05" X=1 SWIFT_ROPE_QKV=0
SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q05/--steps 5/--steps 3} > "${OUT:-/tmp}/profile-05b.json" \
  2> "${OUT:-/tmp}/profile-05b.txt" || true
grep -E "breakdown|rope|rmsnorm|copy_columns|grad_norm" "${OUT:-/tmp}/profile-05b.txt" | head -12 || true
