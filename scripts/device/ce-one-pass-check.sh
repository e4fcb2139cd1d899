#!/usr/bin/env bash
# On the GPU machine, one call (session 14): the cross-entropy gradient reading each fp32 logits row once
# (SWIFT_CE_ONE_PASS, default on) against the two-pass form (=0). The gpu tests (GPU_TESTS overrides the filter:
# default the cross-entropy / vocabulary-shard / training / golden ones); the row kernels alone on a 0.5B logits
# block; the 7B LM-head timing under both settings; the 0.5B full step interleaved REPS (default 3) times under both;
# with BENCH=1 also bench-train.sh 05b-full 7b-lora (ours and the peer) and the 0.5B once more after the peer; last the
# 0.5B's events profile (its breakdown and the cross-entropy rows; $OUT/profile-05b.txt).
# Carry .device-deps (and .device-prebuilt when prebuilt). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu ce test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaCrossEntropy.*:CudaVocabShard.*:*CudaTraining*:*Golden*}"
grep -E "cross_entropy.*(dhidden|dhead|logp)" "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
SWIFT_GPU_TIMING=1 build-gpu/tests/test_gpu --gtest_filter='OpsCudaCrossEntropy.TimingRowKernels05BBlock' 2>&1 \
  | grep -E "^  |^row kernels" || true
for setting in X=1 SWIFT_CE_ONE_PASS=0; do
  echo "7B LM head, $setting:"
  env $setting SWIFT_GPU_TIMING=1 build-gpu/tests/test_gpu --gtest_filter='OpsCudaCrossEntropy.TimingQwen7BShape' 2>&1 \
    | grep -E "^  (cross_entropy|token)" || true
done
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
ab_steps "${REPS:-3}" "$q05 --steps 5 --warmup 2" X=1 SWIFT_CE_ONE_PASS=0
if [ "${BENCH:-0}" = 1 ]; then
  bash scripts/device/bench-train.sh 05b-full 7b-lora ours "$q05" 2>&1 | tail -10
fi
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 --steps 5 --warmup 2 > "${OUT:-/tmp}/profile-05b.json" \
  2> "${OUT:-/tmp}/profile-05b.txt" || true
grep -E "^breakdown|^cross_entropy" "${OUT:-/tmp}/profile-05b.txt" | cut -c1-400 || true
