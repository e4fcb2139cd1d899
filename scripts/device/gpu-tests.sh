#!/usr/bin/env bash
# On the GPU machine: build only the gpu test binary and run it, optionally filtered.
#   scripts/device/gpu-tests.sh ['GTest filter, e.g. OpsCuda*Attention*']
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Output also goes to $OUT/gpu-tests.log when OUT is set.
source "$(dirname "$0")/env.sh"
filter=${1:-*}
log=${OUT:-/tmp}/gpu-tests.log
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  build_gpu gpu-tests test_gpu
  build-gpu/tests/test_gpu --gtest_filter="$filter" --gtest_color=no
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
