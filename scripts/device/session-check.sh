#!/usr/bin/env bash
# On the GPU machine, one call after changes to the attention / LoRA / training paths: build test_gpu and
# bench_train_step, run the gpu tests of those paths, then bench-train.sh's cases given as arguments (ours / peer
# "ARGS" included). GPU_TESTS overrides the test filter. Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu session-check test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaAttentionCudnn.*:OpsCudaMatmul.*:*CudaTraining*:CudaOffload*}"
[ $# -gt 0 ] && "$(dirname "$0")/bench-train.sh" "$@"
