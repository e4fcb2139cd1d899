#!/usr/bin/env bash
# On the GPU machine, one call: the whole gpu suite (GPU_TESTS, default every test), the 0.5B full step with the fused
# rmsnorm backward against SWIFT_RMSNORM_FUSED_BACKWARD=0 (interleaved, ours only), then the same-call ratios against
# the peer (bench-train.sh 7b-lora 05b-full).
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu rmsnorm test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
for rep in $(seq "${REPS:-2}"); do
  for setting in X=1 SWIFT_RMSNORM_FUSED_BACKWARD=0; do
    echo "0.5b rep $rep $setting: $(env $setting build-gpu/bench/bench_train_step $q05 2>>"$out/rmsnorm.log" | show_bench)"
  done
done
grep -E "^step" "$out/rmsnorm.log" | tr '\n' ' ' | fold -w 200; echo
bash "$(dirname "$0")/bench-train.sh" 7b-lora 05b-full 2>&1 | tail -5
