#!/usr/bin/env bash
# On the GPU machine (session 23, the tree of 6112564; ring_plan was removed after it measured neutral: PERFORMANCE
# run 26 call 4): rows per block of the ring passes (lora_ring.cu ring_plan: the rows that fill the last wave of
# resident blocks best) against fixed rows (SWIFT_LORA_RING_ROWS=256, the former fixed size; 224): the gpu tests of
# the LoRA ops, training, goldens, offload and F16 (and the LoRA ops again with 256 fixed: the same bits by
# construction), then the 7B LoRA step interleaved. Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu
# bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
SWIFT_LORA_RING_ROWS=256 build-gpu/tests/test_gpu --gtest_filter='OpsCudaMatmul.Lora*' 2>&1 \
  | grep -E '^\[  (PASSED|FAILED)' | sed 's/^/rows 256: /' || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-2}" "$b7" X=1 SWIFT_LORA_RING_ROWS=256 SWIFT_LORA_RING_ROWS=224
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|dx_lora|b_product|add_lora_residual|swiglu_lora" \
  X=1 SWIFT_LORA_RING_ROWS=256
