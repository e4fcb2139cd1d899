#!/usr/bin/env bash
# On the GPU machine, one call for branch gpu-next2: build, the gpu tests its change touches (AdamW with the clip
# folded in: AdamWConfig::grad_scale, bit for bit against the CPU; training against transformers), then an interleaved
# A/B on one machine, twice: the 0.5B full step with the clip folded into AdamW (default) against --clip_in_place (the
# losses must agree). Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu next2 test_gpu bench_train_step
gpu_tests 'OpsCudaElementwise.AdamW*:OpsCudaElementwise.GradNorm*:*CudaTraining*'
ours() { build-gpu/bench/bench_train_step "$@" --steps 5 --warmup 2 2>>"$out/next2-bench.log" | show_bench; }
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
for rep in 1 2; do
  echo "0.5b folded ($rep): $(ours $q05)"
  echo "0.5b --clip_in_place ($rep): $(ours $q05 --clip_in_place)"
done
