#!/usr/bin/env bash
# On the GPU machine, one call for session 11's tree: the whole gpu suite; the 0.5B full step with the gradients
# zeroed right after each update (as the trainer now does) against --zero_grad_first (zeroed at the step's start),
# interleaved; then bench-train.sh 05b-full 7b-lora (ours and the peer, same call). FINAL_AB="..." replaces the
# zero-grad pairs with ab_steps 2 over those settings.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
if [ -n "${FINAL_AB:-}" ]; then
  ab_steps 2 "$q05" $FINAL_AB
else
  for rep in 1 2 3; do
    for extra in "" "--zero_grad_first"; do
      echo "rep $rep ${extra:-zeroed after the update}: $(build-gpu/bench/bench_train_step $q05 $extra \
        2>>"${OUT:-/tmp}/ab.log" | show_bench)"
    done
  done
fi
bash scripts/device/bench-train.sh 05b-full 7b-lora 2>&1 | tail -8
