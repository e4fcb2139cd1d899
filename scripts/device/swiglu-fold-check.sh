#!/usr/bin/env bash
# On the GPU machine, one call: build, the gpu tests of the swiglu-folded LoRA B products (op bits, LoRA, training
# against transformers, offload), then interleaved A/Bs on one machine, twice: the MLP's B products added in the
# swiglu's pass (default) against SWIFT_LORA_FOLD_SWIGLU=0 (in lora_linear), ours only (the losses must agree), and
# the per-op device times of both (SWIFT_PROFILE=events).
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu fold test_gpu bench_train_step
gpu_tests 'OpsCudaMatmul.*Swiglu*:OpsCudaMatmul.Lora*:OpsCudaElementwise.*Swiglu*:*CudaTraining*:CudaOffload*'
ours() { build-gpu/bench/bench_train_step "$@" --steps 5 --warmup 2 2>>"$out/fold-bench.log" | show_bench; }
q7="--config bench/configs/qwen2.5-7b.json --tuner lora"
la="--recompute_modules layernorm act mlp"
for rep in 1 2; do
  for fold in 1 0; do
    export SWIFT_LORA_FOLD_SWIGLU=$fold
    echo "fold=$fold 7b 2048x4 ($rep): $(ours $q7 --seq 2048 --batch 4)"
    echo "fold=$fold 7b 2048x4 l,a,mlp 17 ($rep): $(ours $q7 --seq 2048 --batch 4 $la --recompute_num_layers 17)"
  done
done
for fold in 1 0; do
  echo "fold=$fold, ms per step of 3 (SWIFT_PROFILE=events):"
  SWIFT_LORA_FOLD_SWIGLU=$fold SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 --seq 2048 --batch 4 --steps 3 \
    --warmup 2 2>&1 >/dev/null | grep -E "^breakdown per step|^swiglu|b_product" | cut -c1-150
done
