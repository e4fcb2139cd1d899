#!/usr/bin/env bash
# On the GPU machine, one call (session 12): the gpu tests (GPU_TESTS, default all); the 0.5B full step with
# TrainableModel::defer_zero_grad (the trainer's default: linear weight gradients written by the next backward)
# against --no_defer_zero_grad, interleaved REPS (default 3) times; then the events breakdown of the 0.5B full and the
# 7B LoRA steps (PROFILE=0 skips it; tables in $OUT/profile-*.txt).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu defer test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
for rep in $(seq "${REPS:-3}"); do
  for extra in "" "--no_defer_zero_grad"; do
    echo "rep $rep ${extra:-deferred zero}: $(build-gpu/bench/bench_train_step $q05 $extra \
      2>>"${OUT:-/tmp}/ab.log" | show_bench)"
  done
done
if [ "${PROFILE:-1}" != 0 ]; then
  q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 3 --warmup 2"
  SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q05/--steps 5/--steps 3} > "${OUT:-/tmp}/profile-05b.json" \
    2> "${OUT:-/tmp}/profile-05b.txt" || true
  SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 > "${OUT:-/tmp}/profile-7b.json" \
    2> "${OUT:-/tmp}/profile-7b.txt" || true
  grep -i "breakdown" "${OUT:-/tmp}"/profile-*.txt | head -4 || true
fi
