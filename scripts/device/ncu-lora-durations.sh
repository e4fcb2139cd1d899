#!/usr/bin/env bash
# On the GPU machine (session 15): per-launch Nsight Compute durations and DRAM / occupancy figures of the LoRA x and
# dy passes and their reduce kernels (bench_lora, first launches of its default configuration) at the 7B's q shape
# (x 8192 x 3584) and at a down-like shape (x 8192 x 18944: --hidden 18944), with dropout 0.05 and 0. $OUT/ncu-*.txt.
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu ncu bench_lora
bin=/usr/local/cuda/bin
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for shape in "q:--hidden 3584" "wide:--hidden 18944 --kv 512 --inter 512"; do
  for p in 0.05 0; do
    name=${shape%%:*}; args=${shape#*:}
    timeout 240 "$bin/ncu" -k "regex:stream_kernel|sum_splits|reduce|rank_update" --launch-count 90 --metrics "$metrics" \
      build-gpu/bench/bench_lora --reps 1 --layers 1 --dropout "$p" $args > "${OUT:-/tmp}/ncu-$name-$p.txt" 2>&1 || true
    echo "== $name p=$p"
    grep -E "^  [a-z].*\(|gpu__time_duration|dram__throughput|launch__grid_size|warps_active|issue_active" \
      "${OUT:-/tmp}/ncu-$name-$p.txt" | sed -E 's/^  .*::([a-z_]+_kernel[^(]*)\(.*\) (\([0-9, ]+\))x.*/\1 \2/; s/ +/ /g' | \
      paste -d" " - - - - - - > "${OUT:-/tmp}/sum-$name-$p.txt"; awk "!seen[\$1]++" "${OUT:-/tmp}/sum-$name-$p.txt"
  done
done
