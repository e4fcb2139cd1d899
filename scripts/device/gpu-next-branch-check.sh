#!/usr/bin/env bash
# On the GPU machine, one call for branch gpu-next's two changes: the LoRA backward's dy pass on tensor cores
# (SWIFT_LORA_DY_FUSED) and o's / down's B products added with the residual (SWIFT_LORA_FOLD_RESIDUAL). Build (or the
# carried prebuilt binaries), the cuBLASLt / LoRA / training gpu tests, the 7B step's per-op profile, then the 7B
# 2048 x 4 step interleaved twice: both on, dy pass off, residual fold off (ours only, one machine; SM clock and
# power sampled every 100 ms into $OUT/clocks.csv, every step time printed).
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu gpu-next test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*}"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
echo "== profile (both on)"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $args --steps 3 --warmup 2 2> "$out/profile-7b.txt" | show_bench
grep -E "^(lora_linear_backward\.(dy|g|db)|lora_linear\.b_product|add_lora_residual|lora_linear) " "$out/profile-7b.txt" || true
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 \
  > "$out/clocks.csv" 2>/dev/null &
smi=$!
for rep in $(seq "${REPS:-2}"); do
  for setting in "X=1" "SWIFT_LORA_DY_FUSED=0" "SWIFT_LORA_FOLD_RESIDUAL=0"; do
    echo -n "rep $rep $setting: "
    env "$setting" build-gpu/bench/bench_train_step $args --steps 5 --warmup 2 2>> "$out/ab.log" | show_bench
  done
done
kill "$smi" 2>/dev/null || true
grep -E "^step" "$out/ab.log" | tr '\n' ' ' | fold -w 200; echo
