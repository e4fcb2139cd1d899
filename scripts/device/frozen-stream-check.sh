#!/usr/bin/env bash
# On the GPU machine, one call: frozen-weight streaming (--offload_frozen_layers N: the bottom N layers' base matrices
# wait in host memory between their forward and backward; model/frozen_stream.cpp). The gpu tests of the offloaders
# and training, then the 7B LoRA step at 2048 x 4 within 30 GiB: the configuration of run 23 (the MLP recomputed in
# 15 layers) against streamed layers buying back MLPs, each once (FROZEN_CASES overrides the list: "label|args"
# entries separated by ';'), the best one's events profile and copy trace, and the peer with gradient checkpointing
# in the same call (PEER=0 skips it). Carry .device-deps and .device-prebuilt. Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu frozen test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaOffload.*:*CudaTraining*:*Golden*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
la="--recompute_modules layernorm act"
lam="--recompute_modules layernorm act mlp --recompute_num_layers"
cases=${FROZEN_CASES:-"l,a,mlp 15 (run 23)|$lam 15 --offload_embedding;\
l,a + frozen 20|$la --offload_embedding --offload_frozen_layers 20;\
l,a + frozen 20, ahead 4|$la --offload_embedding --offload_frozen_layers 20 SWIFT_FROZEN_AHEAD=4;\
l,a,mlp 2 + frozen 18|$lam 2 --offload_embedding --offload_frozen_layers 18;\
l,a,mlp 5 + frozen 15|$lam 5 --offload_embedding --offload_frozen_layers 15"}
IFS=';' read -ra list <<< "$cases"
for entry in "${list[@]}"; do
  label=${entry%%|*}; args=${entry#*|}
  envs=$(echo "$args" | grep -oE '[A-Z_]+=[^ ]+' | tr '\n' ' ' || true)
  args=$(echo "$args" | sed -E 's/[A-Z_]+=[^ ]+//g')
  echo "$label: $(env $envs build-gpu/bench/bench_train_step $q7 $args 2>>"${OUT:-/tmp}/frozen.log" | show_bench)"
done
best=${FROZEN_PROFILE:-"$la --offload_embedding --offload_frozen_layers 20"}
echo "== events profile + copy trace: $best"
SWIFT_PROFILE=events SWIFT_OFFLOAD_TRACE=1 build-gpu/bench/bench_train_step \
  --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 3 --warmup 1 $best \
  2> "${OUT:-/tmp}/profile-frozen.txt" | show_bench
grep -E '^breakdown per step|^offload trace|^\(idle before\)' "${OUT:-/tmp}/profile-frozen.txt" | head -14
if [ "${PEER:-1}" = 1 ]; then
  bash scripts/device/bench-train.sh peer "--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --gradient-checkpointing" 2>&1 | tail -4
fi
