#!/usr/bin/env bash
# On the GPU machine, one call for the LoRA backward's dy pass (g = dy b and db += scale dy^T xa in one read of dy,
# lora.cu launch_lora_dy): build, the LoRA / DoRA / training gpu tests, the 7B step's per-op profile with the pass,
# then the 7B 2048 x 4 step interleaved with and without it (SWIFT_LORA_DY_FUSED=0: two cuBLASLt products), REPS
# times (default 2).
# Carry .device-deps. Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu lora-dy test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:OpsCudaDora*:*CudaTraining*}"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
echo "== profile (fused)"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $args --steps 3 --warmup 2 2> "$out/profile-7b.txt" | show_bench
grep -E "lora_linear_backward\.(dy|g|db) " "$out/profile-7b.txt" || true
for rep in $(seq "${REPS:-2}"); do
  for fused in 1 0; do
    echo -n "rep $rep SWIFT_LORA_DY_FUSED=$fused: "
    SWIFT_LORA_DY_FUSED=$fused build-gpu/bench/bench_train_step $args --steps 5 --warmup 2 2>> "$out/ab.log" | show_bench
  done
done
