#!/usr/bin/env bash
# On the GPU machine, one call (session 16): the ring passes with fewer instructions per row (the mask form a template
# parameter, per-item row pointers, one 8-byte store). The LoRA gpu tests (the bit-equality test among them);
# bench_lora; the 7B step interleaved REPS times (default 2): the default, swiglu_lora at 3 blocks per SM
# (SWIFT_LORA_SWIGLU_BLOCKS=3) and the shared-memory forms (SWIFT_LORA_FACTOR_REGS=0); Nsight Compute at the
# application's own clocks (--clock-control none) of the dx term and swiglu_lora ($OUT/ncu-*.txt).
# (SWIFT_LORA_SWIGLU_BLOCKS existed on commit ab3ac57 only: PERFORMANCE run 19, call 6.)
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_lora).
source "$(dirname "$0")/env.sh"
build_gpu trim test_gpu bench_train_step bench_lora
gpu_tests "${GPU_TESTS:-OpsCudaMatmul.*:*CudaTraining*:*Dropout*}"
build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench-lora.txt" 2>&1 || true
grep -E "total|^bit-identical|MISMATCH" "${OUT:-/tmp}/bench-lora.txt" | grep -E "default|shared|keep-bits|bit-|MISM" || true
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
ab_steps "${REPS:-2}" "$q7" X=1 SWIFT_LORA_SWIGLU_BLOCKS=3 SWIFT_LORA_FACTOR_REGS=0
bin=/usr/local/cuda/bin
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 1 --warmup 0"
run_ncu() {  # name kernel-regex launches-to-skip
  timeout 120 "$bin/ncu" --clock-control none -k "regex:$2" --launch-skip "$3" --launch-count 1 $sections \
    build-gpu/bench/bench_train_step $args > "${OUT:-/tmp}/ncu-$1.txt" 2>&1 || true
  grep -E "SM Frequency|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Warp Cycles Per Issued" \
    "${OUT:-/tmp}/ncu-$1.txt" | head -10 || true
}
echo "== swiglu_lora (ring)"; run_ncu ring-swiglu "lora_swiglu_ring_kernel" 3
echo "== dx term (ring)"; run_ncu ring-dx "lora_rank_ring_kernel" 140
