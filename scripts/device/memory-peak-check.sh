#!/usr/bin/env bash
# On the GPU machine, one call: where the 7B's peak is within 30 GiB (memory_report's bytes per category at the
# total's peak), after the MLP backward's reordering (d_up over up; h2 and d_h made once act is gone). The CudaTraining
# / golden gpu tests first; then the 7B with the MLP recomputed in N = 17, 15, 14 layers (ours only), each with its
# memory report; then at N = 17 the cross-entropy's logits block at 1024 (default), 512 and 256 MiB
# (SWIFT_CE_WORKSPACE_MB) under SWIFT_PROFILE=events: the loss's time and the peak.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu peak test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaTraining*:*Golden*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
m="--recompute_modules layernorm act mlp --recompute_num_layers"
report() { grep -E "^ *(weights|activations|workspace|total):" "$1" | sed 's/^ */    /'; }
for n in ${LAYERS:-17 15 14}; do
  log="${OUT:-/tmp}/peak-mlp$n.log"
  echo "l,a,mlp $n: $(build-gpu/bench/bench_train_step $q7 $m $n 2>"$log" | show_bench)"
  report "$log"
done
for mb in 1024 512 256; do
  log="${OUT:-/tmp}/peak-ce$mb.log"
  echo "l,a,mlp 17, CE $mb MiB, events: $(SWIFT_CE_WORKSPACE_MB=$mb SWIFT_PROFILE=events build-gpu/bench/bench_train_step \
    $q7 $m 17 2>"$log" | show_bench)"
  grep -E "^breakdown" "$log" | cut -c1-220 || true
  report "$log"
done
