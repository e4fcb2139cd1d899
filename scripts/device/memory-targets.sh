#!/usr/bin/env bash
# On the GPU machine, one call: the memory-bound targets of issue 5 with the selective recompute (layernorm, act, mlp
# in N layers) and activation offloading (--cpu_offloading_num_layers), swift.cpp's configurations next to the peer's
# gradient-checkpointing runs of the same shapes in the same call. Builds test_gpu + bench_train_step, runs the
# offload and training gpu tests first. Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs and JSON lines go to $OUT (bench-train.*).
#   scripts/device/memory-targets.sh            (SKIP_PEER=1: swift.cpp only)
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu memory-targets test_gpu bench_train_step
build-gpu/tests/test_gpu --gtest_color=no --gtest_filter='CudaOffload*:CudaTrainingDropout*:*CudaTraining.*' \
  > "$out/gpu-suite.log" 2>&1 || true
grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$out/gpu-suite.log"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora"
export SWIFT_OFFLOAD_TRACE=1  # the copies' busy time and rate, per step, in bench-train.log
cases=(
  ours "$q7 --seq 2048 --batch 4 --recompute_modules layernorm,act,mlp --recompute_num_layers 18"
  ours "$q7 --seq 2048 --batch 4 --recompute_modules layernorm,act --cpu_offloading_num_layers 18"
  ours "$q7 --seq 2048 --batch 4 --recompute_modules layernorm,act,mlp --recompute_num_layers 2 --cpu_offloading_num_layers 16"
  ours "$q7 --seq 8192 --batch 1 --recompute_modules layernorm,act,mlp --recompute_num_layers 18"
  ours "$q7 --seq 8192 --batch 1 --recompute_modules layernorm,act --cpu_offloading_num_layers 19"
  ours "$l8 --seq 2048 --batch 4 --recompute_modules layernorm,act,mlp --recompute_num_layers 23"
  ours "$l8 --seq 2048 --batch 4 --recompute_modules layernorm,act --cpu_offloading_num_layers 23"
)
[ "${SKIP_PEER:-0}" = 1 ] || cases+=(7b-lora-gc 7b-lora-8k 8b-lora-gc)
"$(dirname "$0")/bench-train.sh" "${cases[@]}"
grep 'offload trace' "$out/bench-train.log" | tail -12
