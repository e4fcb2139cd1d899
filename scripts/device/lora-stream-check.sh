#!/usr/bin/env bash
# On the GPU machine, one call (session 15): LoRA's tensor-core passes (xa, da, the dy pass) staged through shared
# memory by cp.async, and the rank update (dx term, B products) reading y through a cp.async ring. The LoRA / training
# / golden gpu tests (GPU_TESTS overrides the filter); bench_lora at the 7B's shapes (dropout 0.05: every
# configuration, among them "update unstaged" and the keep-bits cache); the 7B 2048 x 4 LoRA step REPS times (default
# 2); then the 7B's events profile ($OUT/profile-7b.txt; PROFILE=0 skips it). Calls 1-7 of run 18 ran it with the
# SWIFT_LORA_STREAM switch (the register forms, since removed) as the step's A/B.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_lora). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu stream test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.Lora*:*CudaTraining*:*Golden*}"
build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench-lora.txt" 2>&1 || true
grep -E "total|^bit-identical|MISMATCH" "${OUT:-/tmp}/bench-lora.txt" || true
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1
if [ "${PROFILE:-1}" != 0 ]; then
  SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 > "${OUT:-/tmp}/profile-7b.json" \
    2> "${OUT:-/tmp}/profile-7b.txt" || true
  grep -E "^breakdown|^lora_linear|^swiglu|^add_lora" "${OUT:-/tmp}/profile-7b.txt" | cut -c1-300 || true
fi
