#!/usr/bin/env bash
# On the GPU machine (session 25): the GEMM, LoRA, DoRA, training, golden, offload and F16 gpu tests on this session's
# tree (the dy pass moved to lora_dy.cu, swiglu_backward_lora_dy off by default), its fused form's tests with it on,
# then ours and the peer on the 7B LoRA step, memory free, in one call. Carry .device-deps and .device-prebuilt
# (prebuild.sh test_gpu bench_train_step). Logs under $OUT.
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaGemmSm90.*:OpsCudaMatmul.*:OpsCudaDora.*:*CudaTraining*:*Golden*:CudaOffload.*:CudaF16Training.*}"
grep -E '^\[  FAILED  \]|Failure' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
cp "${OUT:-/tmp}/gpu-suite.log" "${OUT:-/tmp}/gpu-suite-default.log"
SWIFT_LORA_SWIGLU_DY=1 gpu_tests "OpsCudaMatmul.SwigluBackwardLoraDy*:*CudaTraining*"
bash scripts/device/bench-train.sh 7b-lora 2>&1 | tail -4
