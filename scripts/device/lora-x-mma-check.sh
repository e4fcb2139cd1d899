#!/usr/bin/env bash
# On the GPU machine, one call for the x passes on tensor cores (SWIFT_LORA_X_MMA: xa forward, da backward): the
# cuBLASLt / LoRA / training gpu tests, the 7B step's per-op profile, then the 7B 2048 x 4 LoRA step interleaved with
# and without (dropout 0, then 0.05; ours only, one machine; every step time printed).
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu xmma test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*}"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
echo "== profile"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $args --steps 3 --warmup 2 2> "$out/profile-7b.txt" | show_bench
grep -E "^lora_linear(_backward)?\.(xa|da|dx_lora|dy) " "$out/profile-7b.txt" || true
for dropout in 0 0.05; do
  for rep in $(seq "${REPS:-2}"); do
    for setting in X=1 SWIFT_LORA_X_MMA=0; do
      echo "dropout $dropout rep $rep $setting: $(env $setting build-gpu/bench/bench_train_step $args --lora_dropout $dropout \
        --steps 5 --warmup 2 2>> "$out/ab.log" | show_bench)"
    done
  done
done
grep -E "^step" "$out/ab.log" | tr '\n' ' ' | fold -w 200; echo
