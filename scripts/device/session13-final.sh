#!/usr/bin/env bash
# On the GPU machine, one call for session 13's tree: the whole gpu suite (GPU_TESTS overrides the filter), then
# bench-train.sh 05b-full 7b-lora (ours and the peer, same call) and the 0.5B once more (ours) after the peer, then
# one interleaved pair of the 0.5B against SWIFT_CUDNN_ATTENTION_BWD=nondeterministic (what determinism costs).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
bash scripts/device/bench-train.sh 05b-full 7b-lora ours "$q05" 2>&1 | tail -10
ab_steps 1 "$q05 --steps 5 --warmup 2" X=1 SWIFT_CUDNN_ATTENTION_BWD=nondeterministic
