#!/usr/bin/env bash
# On the GPU machine (session 15): Nsight Compute counters of the 7B step's swiglu with the folded B products
# (lora_swiglu_kernel) and the backward's dx term (lora_rank_update_kernel, r 8, not transposed), one launch each,
# from bench_train_step (7B LoRA 2048 x 4, one step): speed of light, occupancy, warp stall reasons, memory workload
# ($OUT/ncu-swiglu.txt, $OUT/ncu-dx.txt). Carry .device-deps and .device-prebuilt (prebuild.sh bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu ncu bench_train_step
bin=/usr/local/cuda/bin
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 1 --warmup 0"
run_ncu() {  # name kernel-regex launches-to-skip
  timeout 200 "$bin/ncu" -k "regex:$2" --launch-skip "$3" --launch-count 1 $sections \
    build-gpu/bench/bench_train_step $args > "${OUT:-/tmp}/ncu-$1.txt" 2>&1 || true
  grep -E "==ERROR==" "${OUT:-/tmp}/ncu-$1.txt" | head -3 || true
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Issued Warp|Stall (Long|Short|Wait|No Inst|Math|LG|MIO|Barrier|Not Sel)|L1/TEX Hit|L2 Hit" \
    "${OUT:-/tmp}/ncu-$1.txt" | head -24 || true
}
echo "== swiglu_lora"; run_ncu swiglu "lora_swiglu_kernel" 3
echo "== dx term (the first backward launch: 140 B products and residual adds come before it)"; run_ncu dx "lora_rank_update_kernel" 140
