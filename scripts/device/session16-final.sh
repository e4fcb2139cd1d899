#!/usr/bin/env bash
# On the GPU machine, one call for session 16's tree (the rank-term passes on the cp.async ring, lora_ring.cu): the
# whole gpu suite (GPU_TESTS overrides the filter); bench_lora (the "factor in shared memory" configuration is the
# A/B of the B products and the dx term); the 7B step interleaved REPS times (default 3) with the ring and with the
# shared-memory forms (SWIFT_LORA_FACTOR_REGS=0); then bench-train.sh 7b-lora (ours and the peer, same call), the 7B's
# events breakdown, and the 7B within 30 GiB (ours with --recompute_modules layernorm act mlp --recompute_num_layers
# 17, the peer with gradient checkpointing). Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu
# bench_train_step bench_lora). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-*}"
build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench-lora.txt" 2>&1 || true
grep -E "total|^bit-identical|MISMATCH" "${OUT:-/tmp}/bench-lora.txt" || true
q7s="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-3}" "$q7s" X=1 SWIFT_LORA_FACTOR_REGS=0
[ "${SKIP_FINAL:-0}" = 1 ] && exit 0
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
bash scripts/device/bench-train.sh 7b-lora 7b-lora-breakdown \
  ours "$q7 --recompute_modules layernorm act mlp --recompute_num_layers 17" \
  peer "$q7 --gradient-checkpointing" 2>&1 | tail -12
