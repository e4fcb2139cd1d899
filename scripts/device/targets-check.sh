#!/usr/bin/env bash
# On the GPU machine, one call: issue 5's memory-bound targets, swift.cpp and the peer (transformers + PEFT, gradient
# checkpointing) on the same machine, ours first (the cheap rows, and the 0.5B full step's SWIFT_PROFILE=events
# breakdown into $OUT/breakdown-05b.txt), then each peer row. Prints one line per row.
#   bash scripts/device/targets-check.sh
# Env: N8K (mlp layers recomputed at 8k, default 13), N8B (Llama-8B, default "23 20 18"), N7B (7B 2048 x 4 within
# 30 GiB, default 17), BREAKDOWN=0 skips the profile. Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu targets bench_train_step
ours() { build-gpu/bench/bench_train_step "$@" --steps 5 --warmup 2 2>>"$out/targets.log" | tee -a "$out/targets.jsonl" | show_bench; }
peer() {
  PYTHONUNBUFFERED=1 python3 scripts/bench/peer_train_step.py "$@" --steps 5 --warmup 2 2>>"$out/targets.log" \
    | tee -a "$out/targets.jsonl" | show_bench
}
q7="--config bench/configs/qwen2.5-7b.json --tuner lora"
l8="--config bench/configs/llama-3.1-8b.json --tuner lora"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
la="--recompute_modules layernorm act mlp"
echo "7b 8k l,a,mlp ${N8K:=13}: $(ours $q7 --seq 8192 --batch 1 $la --recompute_num_layers $N8K)"
for n in ${N8B:=23 20 18}; do echo "8b 2048x4 l,a,mlp $n: $(ours $l8 --seq 2048 --batch 4 $la --recompute_num_layers $n)"; done
echo "7b 2048x4 l,a,mlp ${N7B:=17}: $(ours $q7 --seq 2048 --batch 4 $la --recompute_num_layers $N7B)"
echo "0.5b full: $(ours $q05)"
echo "0.5b full SWIFT_GEMM_AUTOTUNE=0: $(SWIFT_GEMM_AUTOTUNE=0 ours $q05)"
[ "${BREAKDOWN:-1}" = 0 ] || SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q05 --steps 3 --warmup 2 > "$out/breakdown-05b.json" \
  2> "$out/breakdown-05b.txt" || true
grep '^breakdown per step' "$out/breakdown-05b.txt" || true
echo "peer 0.5b full: $(peer $q05)"
echo "peer 8b 2048x4 gc: $(peer $l8 --seq 2048 --batch 4 --gradient-checkpointing)"
echo "peer 7b 2048x4 gc: $(peer $q7 --seq 2048 --batch 4 --gradient-checkpointing)"
echo "peer 7b 8k gc: $(peer $q7 --seq 8192 --batch 1 --gradient-checkpointing)"
