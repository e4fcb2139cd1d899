#!/usr/bin/env bash
# On the GPU machine, one call for the autotune record (SWIFT_GEMM_AUTOTUNE with ops/gemm_choice_cache): build, the
# cuBLASLt / training gpu tests, then per model (0.5B full 2048 x 8, 7B LoRA 2048 x 4; ours only, one machine):
# plain, then SWIFT_GEMM_AUTOTUNE=1 three times on a fresh record ($OUT/gemm-autotune.json): the first process times
# and records, the next two read the record. The three autotuned losses must be equal (the same algorithms), and their
# speed against plain is the A/B for turning the switch on by default. The 7B steps alternate ~0.482 / ~0.508 s
# (run 11): nvidia-smi samples SM clock and power every 100 ms meanwhile ($OUT/clocks.csv) and the step times are
# printed, to tell the GPU's power management from our code.
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu gpu-next test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*}"
record="$out/gemm-autotune.json"
rm -f "$record"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab() {  # label env... -- args...
  local label=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo -n "$label: "
  env "${envs[@]}" build-gpu/bench/bench_train_step "$@" 2>>"$out/gpu-next-bench.log" | show_bench
}
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv -lms 100 > "$out/clocks.csv" 2>/dev/null &
smi=$!
for model in q05 q7; do
  args=${!model}
  ab "$model plain" SWIFT_GEMM_AUTOTUNE=0 -- $args
  ab "$model autotune, timing and recording" SWIFT_GEMM_AUTOTUNE=1 SWIFT_GEMM_AUTOTUNE_CACHE="$record" -- $args
  ab "$model autotune, from the record" SWIFT_GEMM_AUTOTUNE=1 SWIFT_GEMM_AUTOTUNE_CACHE="$record" -- $args
  ab "$model autotune, from the record again" SWIFT_GEMM_AUTOTUNE=1 SWIFT_GEMM_AUTOTUNE_CACHE="$record" -- $args
done
kill "$smi" 2>/dev/null || true
grep -E "^step" "$out/gpu-next-bench.log" | tr '\n' ' ' | fold -w 200; echo
python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print({d: len(p) for d, p in r['devices'].items()})" "$record"
