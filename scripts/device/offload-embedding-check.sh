#!/usr/bin/env bash
# On the GPU machine, one call: --offload_embedding (the frozen embedding table in mapped host memory). The training /
# golden / embedding gpu tests (CudaTrainingDropout.OffloadedEmbeddingGivesTheSameBits among them); the 7B with
# memory free, with and without (the lookup's cost over the host link), interleaved REPS times (default 2); within
# 30 GiB: l,a,mlp 17 without, and 17 / 15 with (the table's GiB buys two layers' MLP recompute); the events profile's
# embedding line with the table offloaded. Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu
# bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu offload test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaTraining*:*Golden*:*Embedding*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
m="--recompute_modules layernorm act mlp --recompute_num_layers"
for rep in $(seq "${REPS:-2}"); do
  for a in "" "--offload_embedding"; do
    echo "free ${a:-(device table)}: $(build-gpu/bench/bench_train_step $q7 $a 2>>"${OUT:-/tmp}/ab.log" | show_bench)"
  done
  for a in "17" "17 --offload_embedding" "15 --offload_embedding" "16 --offload_embedding"; do
    echo "30 GiB, l,a,mlp $a: $(build-gpu/bench/bench_train_step $q7 $m $a 2>>"${OUT:-/tmp}/ab.log" | show_bench)"
  done
done
echo "== events, --offload_embedding"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q7/--steps 5 --warmup 2/--steps 3 --warmup 1} --offload_embedding \
  2>&1 >/dev/null | grep -E "^breakdown|^embedding" | cut -c1-200 || true
