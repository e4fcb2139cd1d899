#!/usr/bin/env bash
# On the GPU machine, one call (session 16): the r 8 rank updates and swiglu_lora with the factor in registers and the
# rows streamed through a per-warp cp.async ring (lora_rank_ring_kernel, lora_swiglu_ring_kernel; default on) against
# the shared-memory forms (SWIFT_LORA_FACTOR_REGS=0). The LoRA / training / golden gpu tests (among them
# LoraFactorInRegistersIsTheSharedMemoryForm: the same bits); bench_lora at rows per block 256 (default), 128 and 512
# (SWIFT_LORA_RING_ROWS); the 7B step interleaved REPS times (default 2) with and without; the 7B's events profile
# ($OUT/profile-7b.txt). Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu ring test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*:*Golden*:*Dropout*}"
for rows in 256 128 512; do
  SWIFT_LORA_RING_ROWS=$rows build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench-lora-$rows.txt" 2>&1 || true
  echo "== ring rows $rows"
  grep -E "total|^bit-identical|MISMATCH" "${OUT:-/tmp}/bench-lora-$rows.txt" | grep -E "default|shared|keep-bits|bit-|MISM" || true
done
grep -E "^(default|factor in shared memory|keep-bits cache) " "${OUT:-/tmp}/bench-lora-256.txt" | grep -v total || true
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_LORA_FACTOR_REGS=0
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 > "${OUT:-/tmp}/profile-7b.json" \
  2> "${OUT:-/tmp}/profile-7b.txt" || true
grep -E "^breakdown|^lora_linear|^swiglu|^add_lora" "${OUT:-/tmp}/profile-7b.txt" | cut -c1-300 || true
