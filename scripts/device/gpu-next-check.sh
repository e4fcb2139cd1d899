#!/usr/bin/env bash
# On the GPU machine, one call for branch gpu-next: build, the gpu tests its changes touch (rmsnorm, cuBLASLt
# products with SWIFT_GEMM_AUTOTUNE, LoRA, training), the rmsnorm op timing, then A/Bs on one machine (ours only):
# 7B LoRA 2048 x 4 plain / SWIFT_LORA_B_FIRST=1 / SWIFT_GEMM_AUTOTUNE=1, 0.5B full plain / SWIFT_GEMM_AUTOTUNE=1.
# Carry .device-deps. Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu gpu-next test_gpu bench_train_step
gpu_tests 'OpsCudaElementwise.*:OpsCudaMatmul.*:*CudaTraining*'
SWIFT_GPU_BENCH=1 build-gpu/tests/test_gpu --gtest_filter='*BenchRmsnorm*' 2>&1 | grep '^rmsnorm'
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab() {  # label env... -- args...
  local label=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" build-gpu/bench/bench_train_step "$@" 2>>"$out/gpu-next-bench.log" \
    | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(f\"$label: {r['tokens_per_s']:.0f} tokens/s, {r['peak_allocated_gib']:.2f} GiB, loss {r['last_loss']:.4f}\")"
}
for rep in 1 2; do  # twice, interleaved: the spread between repeats is the noise floor of the A/B
  ab "7b plain ($rep)" X=1 -- $q7
  ab "7b SWIFT_LORA_B_FIRST=1 ($rep)" SWIFT_LORA_B_FIRST=1 -- $q7
  ab "7b SWIFT_GEMM_AUTOTUNE=1 ($rep)" SWIFT_GEMM_AUTOTUNE=1 -- $q7
  ab "0.5b plain ($rep)" X=1 -- $q05
  ab "0.5b SWIFT_GEMM_AUTOTUNE=1 ($rep)" SWIFT_GEMM_AUTOTUNE=1 -- $q05
done
