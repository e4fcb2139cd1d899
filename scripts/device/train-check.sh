#!/usr/bin/env bash
# On the GPU machine, one call after kernel work: build the gpu tests and the benchmarks, run the whole gpu suite,
# the LoRA pass benchmark (bench/bench_lora.cpp, dropout 0.05) and bench-train.sh's cases (swift.cpp and the peer in
# the same run).
#   scripts/device/train-check.sh [bench-train case ...]     (default: 7b-lora; SKIP_SUITE=1 / SKIP_LORA=1 skip parts,
#                                                             GPU_TESTS='pattern' runs only those gpu tests)
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT (gpu-suite.log, bench-lora.log, bench-train.*).
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
git log --oneline -1 2>/dev/null || true
build_gpu train-check test_gpu bench_lora bench_train_step
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  build-gpu/tests/test_gpu --gtest_color=no --gtest_filter="${GPU_TESTS:-*}" > "$out/gpu-suite.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|^\[  FAILED  \]' "$out/gpu-suite.log" | head -30
fi
if [ "${SKIP_LORA:-0}" != 1 ]; then
  build-gpu/bench/bench_lora --dropout 0.05 > "$out/bench-lora.log" 2>&1 || status=1
  sed -n '/per training step/,$p' "$out/bench-lora.log"
fi
[ $# -gt 0 ] || set -- 7b-lora
"$(dirname "$0")/bench-train.sh" "$@" || status=1
exit $status
