#!/usr/bin/env bash
# On the GPU machine: the grouped dx terms of lora_linear_backward_shared (one pass over dx for a layer's q, k, v and
# its gate, up; lora_ring.cu launch_lora_rank_update_group) against one pass per job (SWIFT_LORA_GROUP_DX=0): the gpu
# tests of the LoRA ops, training, goldens and offload, then the 7B LoRA step interleaved both ways and their events
# profiles. Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-3}" "$b7" SWIFT_LORA_GROUP_DX=1 SWIFT_LORA_GROUP_DX=0
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|dx_lora|lora_linear_backward_shared " \
  SWIFT_LORA_GROUP_DX=1 SWIFT_LORA_GROUP_DX=0
