#!/usr/bin/env bash
# On the GPU machine, one short call (session 16): SWIFT_LORA_DX_FIRST (lora_linear_backward without accumulate_dx
# writes the dx term first, the input gradient through the frozen weight then adds onto it in cuBLASLt's epilogue).
# The LoRA forward/backward gpu test (it checks that order against the CPU reference), then the 7B step interleaved
# REPS times (default 2) with and without. Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu
# bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu dxfirst test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.LoraLinearForwardAndBackward:OpsCudaMatmul.LoraKeepBitsCacheIsTheMask}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_LORA_DX_FIRST=1
