#!/usr/bin/env bash
# On the GPU machine, one call for session 22's tree (the grouped dx terms, SWIFT_LORA_GROUP_DX): the whole gpu
# suite (GPU_TESTS overrides the filter), then issue 5's LoRA cases, ours and the peer in this one call
# (bench-train.sh): the 7B at 2048 x 4 with memory free (the peer without checkpointing), and within the peer's memory
# the 7B at 2048 x 4, the 7B at one 8k sequence and Llama-3.1-8B at 2048 x 4 (ours with the norms' outputs and
# silu(gate) * up recomputed, the embedding table offloaded and the bottom layers' frozen matrices streamed; the peer
# with gradient checkpointing every layer).
# The 7B's events profile goes to $OUT/breakdown-7b-lora.txt.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
la="--recompute_modules layernorm act --offload_embedding --offload_frozen_layers"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
q8k="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 8192 --batch 1"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora 7b-lora-breakdown \
  ours "$q7 $la 20" peer "$q7 --gradient-checkpointing" \
  ours "$q8k $la 20" ours "$q8k $la 16" peer "$q8k --gradient-checkpointing" \
  ours "$l8 $la 24" peer "$l8 --gradient-checkpointing" 2>&1 | tail -14
