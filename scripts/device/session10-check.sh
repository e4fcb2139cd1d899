#!/usr/bin/env bash
# On the GPU machine, one call for branch gpu-next at a058b65 (main's review refactor of lora.cu plus the mask drawn
# before xa; SWIFT_LORA_PREDRAW_MASK exists on that branch only, so on main both settings run the same code):
# the whole gpu suite; the 7B LoRA step at dropout 0.05 interleaved with and without SWIFT_LORA_PREDRAW_MASK (ours
# only, profile of xa first); the 0.5B full step against the peer (bench-train.sh 05b-full); the 0.5B step's
# breakdown from CUDA events (SWIFT_PROFILE=events).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu s10 test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --lora_dropout 0.05"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 --steps 3 --warmup 2 2> "$out/profile-7b.txt" | show_bench
grep -E "^lora_linear(_backward)?\.(xa|da|dx_lora|dy|keep_bits) |^breakdown" "$out/profile-7b.txt" || true
ab_steps 2 "$q7 --steps 5 --warmup 2" X=1 SWIFT_LORA_PREDRAW_MASK=0
bash scripts/device/bench-train.sh 05b-full
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 --steps 3 --warmup 2 2> "$out/profile-05b.txt" | show_bench
grep '^breakdown' "$out/profile-05b.txt"; tail -45 "$out/profile-05b.txt"
