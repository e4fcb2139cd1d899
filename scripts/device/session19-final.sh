#!/usr/bin/env bash
# On the GPU machine, one call for session 19's tree (attention no longer drains the stream to check cu_seqlens;
# idle time per op in the events profile):
# the whole gpu suite (GPU_TESTS overrides the filter), then issue 5's LoRA cases, ours and the peer in this one call
# (bench-train.sh): the 7B at 2048 x 4 with memory free (the peer without checkpointing), and within the peer's memory
# the 7B at 2048 x 4, the 7B at one 8k sequence and Llama-3.1-8B at 2048 x 4 (ours with the embedding table offloaded
# and the MLP recomputed in N layers, the peer with gradient checkpointing every layer).
# The 7B's events profile (with the idle time before each op) goes to $OUT/breakdown-7b-lora.txt.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
m="--recompute_modules layernorm act mlp --recompute_num_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
q8k="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 8192 --batch 1"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora 7b-lora-breakdown \
  ours "$q7 $m 15 --offload_embedding" peer "$q7 --gradient-checkpointing" \
  ours "$q8k $m 15 --offload_embedding" peer "$q8k --gradient-checkpointing" \
  ours "$l8 $m 21 --offload_embedding" peer "$l8 --gradient-checkpointing" 2>&1 | tail -14
