#!/usr/bin/env bash
# On the GPU machine: cuDNN attention forward / backward at the 0.5B and 7B training shapes with their grouped
# key/value heads and with as many key/value heads as query heads (what a backward over repeated K/V would run),
# to see whether the grouped backward's dK/dV accumulation is what makes it slow (bench_attention, ours only).
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_attention). Output: JSON lines.
source "$(dirname "$0")/env.sh"
build_gpu gqa bench_attention
for shape in "--seqs 8 --len 2048 --hq 14 --hkv 2 --d 64" "--seqs 8 --len 2048 --hq 14 --hkv 14 --d 64" \
             "--seqs 4 --len 2048 --hq 28 --hkv 4 --d 128" "--seqs 4 --len 2048 --hq 28 --hkv 28 --d 128"; do
  echo "== $shape"
  build-gpu/bench/bench_attention $shape --reps 10
done
