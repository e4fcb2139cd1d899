#!/usr/bin/env bash
# On the GPU machine, one call for session 15's tree: the whole gpu suite (GPU_TESTS overrides the filter), then
# bench-train.sh 7b-lora (ours and the peer, same call), the 7B's events breakdown, and issue 5's 7B within 30 GiB:
# ours with --recompute_modules layernorm act mlp --recompute_num_layers 17, the peer with gradient checkpointing.
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora 7b-lora-breakdown \
  ours "$q7 --recompute_modules layernorm act mlp --recompute_num_layers 17" \
  peer "$q7 --gradient-checkpointing" 2>&1 | tail -12
