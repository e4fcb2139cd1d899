#!/usr/bin/env bash
# On the GPU machine, one call (session 16): bench_lora's rank-term passes (b, dx; swiglu_lora runs in the 7B step only)
# for each ring shape (SWIFT_LORA_RING_SHAPE: rows per item x buffers per warp [x blocks per SM]) at 256 and 512 rows
# per block (SWIFT_LORA_RING_ROWS), keep-bits cache configuration; then the 7B step for each shape at 256 rows.
# (SWIFT_LORA_RING_SHAPE and SWIFT_LORA_RING_ROWS existed on commit 7ac9ef5 only: PERFORMANCE run 19, call 3.)
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu sweep test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.Lora*}"
for shape in 4x4 4x6 8x4 2x8 8x3 4x4x3; do
  for rows in 256 512; do
    f="${OUT:-/tmp}/bench-lora-$shape-$rows.txt"
    SWIFT_LORA_RING_SHAPE=$shape SWIFT_LORA_RING_ROWS=$rows build-gpu/bench/bench_lora --dropout 0.05 > "$f" 2>&1 || true
    echo "$shape $rows: $(grep -E "^keep-bits cache +total" "$f" | cut -c24-) $(grep -c MISMATCH "$f") mismatches"
  done
done
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-1}" "$q7" X=1 SWIFT_LORA_RING_SHAPE=4x6 SWIFT_LORA_RING_SHAPE=8x4 SWIFT_LORA_RING_SHAPE=2x8 \
  SWIFT_LORA_RING_SHAPE=4x4x3 SWIFT_LORA_RING_ROWS=512 SWIFT_LORA_FACTOR_REGS=0
