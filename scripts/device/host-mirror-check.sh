#!/usr/bin/env bash
# On the GPU machine, one call for the host mirrors of cu_seqlens and the labels (ops.h HostMirror: attention and the
# loss read the host copies instead of draining the stream with a read-back, 49 times per 0.5B step): the gpu suite
# (GPU_TESTS, default every test), then the 0.5B full step and the 7B LoRA step with and without
# (SWIFT_HOST_MIRRORS=0), interleaved (ours only).
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu mirror test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
for model in q05 q05 q7; do
  for setting in X=1 SWIFT_HOST_MIRRORS=0; do
    echo "$model $setting: $(env $setting build-gpu/bench/bench_train_step ${!model} 2>>"$out/mirror.log" | show_bench)"
  done
done
