#!/usr/bin/env bash
# On the GPU machine, one call after changes to the attention / LoRA / training paths: build test_gpu and
# bench_train_step, run the gpu tests of those paths, then bench-train.sh's cases given as arguments (ours / peer
# "ARGS" included). GPU_TESTS overrides the test filter. Carry .device-deps. Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
cmake --build build-gpu -j"$(nproc)" --target test_gpu bench_train_step > "$out/session-check-build.log" 2>&1 \
  || { tail -40 "$out/session-check-build.log"; exit 1; }
build-gpu/tests/test_gpu --gtest_color=no \
  --gtest_filter="${GPU_TESTS:-OpsCudaAttentionCudnn.*:OpsCudaMatmul.*:*CudaTraining*:CudaOffload*}" \
  > "$out/gpu-suite.log" 2>&1 || true
grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|^\[  FAILED  \]' "$out/gpu-suite.log" | head -20
[ $# -gt 0 ] && "$(dirname "$0")/bench-train.sh" "$@"
