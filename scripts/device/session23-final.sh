#!/usr/bin/env bash
# On the GPU machine (session 23): ours and the peer in one call on the 7B (memory free, and within 30 GiB against
# the peer's checkpointing) and Llama-3.1-8B within the peer's memory. Carry .device-deps and .device-prebuilt
# (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
la="--recompute_modules layernorm act --offload_embedding --offload_frozen_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora ours "$q7 $la 20" peer "$q7 --gradient-checkpointing" \
  ours "$l8 $la 24" peer "$l8 --gradient-checkpointing" 2>&1 | tail -10
