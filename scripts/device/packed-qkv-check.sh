#!/usr/bin/env bash
# On the GPU machine, one call for branch gpu-next: packed q/k/v (full fine-tuning: one product for q, k and v, one
# input- and one weight-gradient product; SWIFT_PACKED_QKV=0 keeps three) and AdamW writing the product copies
# (SWIFT_ADAMW_PRODUCTS=0: the next forward casts them): the whole gpu suite (the training and golden cases run both
# on CUDA by default), then the 0.5B full step with both, without packing, and without AdamW's copies, interleaved
# (ours only).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu packed test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 3 "$q05" X=1 SWIFT_PACKED_QKV=0 SWIFT_ADAMW_PRODUCTS=0
