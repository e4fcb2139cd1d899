#!/usr/bin/env bash
# On the GPU machine: LoRA's input-gradient term in our Hopper GEMM's epilogue (SWIFT_LORA_DX_SM90=1: o and down,
# the linears whose backward runs alone) against cuBLASLt's product and the term's pass: the gpu tests of the GEMM,
# the LoRA ops and training (with it on), then the 7B LoRA step interleaved both ways and the fused form's events profile.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
SWIFT_LORA_DX_SM90=1 gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.Lora*:*CudaTraining*}"
grep '^\[ gemm_sm90 \] LoRA' "${OUT:-/tmp}/gpu-suite.log" || true
b7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
ab_steps "${REPS_AB:-2}" "$b7" X=1 SWIFT_LORA_DX_SM90=1
events_profiles "$b7 --steps 3 --warmup 1" "breakdown|dx_lora|frozen_gemm" SWIFT_LORA_DX_SM90=1 X=1
