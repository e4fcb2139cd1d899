#!/usr/bin/env bash
# On the GPU machine, one call: where the 7B step's idle time falls. SWIFT_PROFILE=events records the device's idle
# time before each outermost op as "(idle before) <op>"; the events profile of the 7B memory free and within 30 GiB,
# their largest idle lines, the host's set-up time (an annotation) and the breakdown. Then the profile gpu tests.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu idle test_gpu bench_train_step
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 3 --warmup 1"
for args in "$q7" "$q7 --recompute_modules layernorm act mlp --recompute_num_layers 15 --offload_embedding"; do
  echo "== events profile: $args"
  SWIFT_PROFILE=events build-gpu/bench/bench_train_step $args 2> "${OUT:-/tmp}/profile.txt" | show_bench
  grep -E '^breakdown per step' "${OUT:-/tmp}/profile.txt" | sed 's/ (SWIFT_PROFILE.*timed steps, / (/'
  grep -F '(host:' "${OUT:-/tmp}/profile.txt" || true
  grep -F '(idle before)' "${OUT:-/tmp}/profile.txt" | python3 -c '
import sys
rows = [(float(l.split()[-4]), l.rstrip()) for l in sys.stdin]  # name calls total ms/call max share
for t, l in sorted(rows, reverse=True)[:14]: print(l)
print("sum of the idle-before lines: %.1f ms" % sum(t for t, _ in rows))'
done
gpu_tests "${GPU_TESTS:-ProfileEvents*}"
