#!/usr/bin/env bash
# On the GPU machine, one call for session 17's tree (the MLP backward's reordered peak, --offload_embedding): the whole
# gpu suite (GPU_TESTS overrides the filter), then the issue's memory-bound cases, ours and the peer in this one call
# (bench-train.sh): the 7B at 2048 x 4 within 30 GiB, the 7B at one 8k sequence and Llama-3.1-8B at 2048 x 4 within
# the peer's memory, each ours with the MLP recomputed in N layers as before and with the embedding table offloaded
# and N lowered by two (the table's GiB), the peer with gradient checkpointing every layer.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
m="--recompute_modules layernorm act mlp --recompute_num_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
q8k="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 8192 --batch 1"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh \
  ours "$q7 $m 17" ours "$q7 $m 15 --offload_embedding" peer "$q7 --gradient-checkpointing" \
  ours "$q8k $m 17" ours "$q8k $m 15 --offload_embedding" peer "$q8k --gradient-checkpointing" \
  ours "$l8 $m 23" ours "$l8 $m 21 --offload_embedding" peer "$l8 --gradient-checkpointing" 2>&1 | tail -12
