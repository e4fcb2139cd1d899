#!/usr/bin/env bash
# On the GPU machine: Nsight Compute counters of the 7B LoRA x passes (bench_lora's default shape: xa and da through
# lora_x_mma_kernel, the dx term through lora_rank_update_kernel): speed of light, occupancy, warp stall reasons and
# memory workload, a few launches each (ncu-*.txt in $OUT). Needs counter access; prints ncu's refusal otherwise.
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu ncu bench_lora
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section SchedulerStats"
for k in lora_x_mma_kernel lora_rank_update_kernel; do
  timeout 200 "$ncu_bin" -k "regex:$k" --launch-skip 2 --launch-count 3 $sections \
    build-gpu/bench/bench_lora --reps 1 > "${OUT:-/tmp}/ncu-$k.txt" 2>&1 || true
  grep -E "ERR_|==ERROR==|==WARNING==" "${OUT:-/tmp}/ncu-$k.txt" | head -5 || true
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Theoretical Occ|Stall|Issued Warp" "${OUT:-/tmp}/ncu-$k.txt" | head -40 || true
done
