#!/usr/bin/env bash
# On the GPU machine (session 15): Nsight Compute counters of the streamed xa pass (lora_x_mma_stream_kernel drawing
# the mask, bench_lora's 7B q shape): speed of light, occupancy, warp stall reasons, instruction mix, and the SASS of
# the kernel (cuobjdump) with its stall sampling by instruction (SourceCounters) in $OUT. KERNEL overrides the regex.
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu ncu bench_lora
bin=/usr/local/cuda/bin
k=${KERNEL:-lora_x_mma_stream_kernel}
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters --section ComputeWorkloadAnalysis"
timeout 300 "$bin/ncu" -k "regex:$k" --launch-skip 1 --launch-count 1 $sections --print-details all \
  build-gpu/bench/bench_lora --reps 1 > "${OUT:-/tmp}/ncu-stream.txt" 2>&1 || true
grep -E "==ERROR==|==WARNING==" "${OUT:-/tmp}/ncu-stream.txt" | head -5 || true
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Issued Warp|Stall|No Eligible|Executed Ipc" "${OUT:-/tmp}/ncu-stream.txt" | head -40 || true
"$bin/cuobjdump" -sass -fun "$k" build-gpu/bench/bench_lora > "${OUT:-/tmp}/sass.txt" 2>&1 || \
  "$bin/cuobjdump" -sass build-gpu/bench/bench_lora > "${OUT:-/tmp}/sass.txt" 2>&1 || true
wc -l "${OUT:-/tmp}/sass.txt"
