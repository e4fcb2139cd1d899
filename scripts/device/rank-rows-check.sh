#!/usr/bin/env bash
# On the GPU machine, one call (branch gpu-next-rank-rows, written in session 15, not yet run): the r 8 rank updates
# and swiglu_lora with each lane's factor columns in registers (SWIFT_LORA_FACTOR_REGS, default on) against the
# shared-memory forms, which run 18 call 12 found bound by L1 / shared memory. The LoRA / training / golden gpu tests
# (among them LoraFactorInRegistersIsTheSharedMemoryForm: the same bits); bench_lora (the "factor in shared memory"
# configuration is the A/B for the B products and the dx term); the 7B step interleaved REPS times (default 2) with
# and without; the 7B's events profile ($OUT/profile-7b.txt).
# (The register-loaded form it measured was replaced by the ring of lora_ring.cu: PERFORMANCE run 19, call 1.)
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_lora). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu rows test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*:*Golden*:*Dropout*}"
build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench-lora.txt" 2>&1 || true
grep -E "total|^bit-identical|MISMATCH" "${OUT:-/tmp}/bench-lora.txt" || true
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_LORA_FACTOR_REGS=0
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 > "${OUT:-/tmp}/profile-7b.json" \
  2> "${OUT:-/tmp}/profile-7b.txt" || true
grep -E "^breakdown|^lora_linear|^swiglu|^add_lora" "${OUT:-/tmp}/profile-7b.txt" | cut -c1-300 || true
