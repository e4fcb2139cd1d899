#!/usr/bin/env bash
# On the GPU machine: LoRA's rank-r passes per work shape (bench/bench_lora.cpp), with dropout 0.05 and without.
#   scripts/device/bench-lora.sh [extra bench_lora arguments]
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Output also goes to $OUT/bench-lora.log when OUT is set.
source "$(dirname "$0")/env.sh"
log=${OUT:-/tmp}/bench-lora.log
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  git log --oneline -1 || true
  build_gpu bench-lora bench_lora
  build-gpu/bench/bench_lora --dropout 0.05 "$@"
  build-gpu/bench/bench_lora --dropout 0 "$@"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
