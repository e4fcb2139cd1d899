#!/usr/bin/env bash
# On the GPU machine: build bench_train_step, then time swift.cpp and the peer (transformers + PEFT,
# scripts/bench/peer_train_step.py) on the same shapes, one after the other in this one call, and print a table.
#   scripts/device/bench-train.sh [case ...]      cases: 7b-lora 7b-lora-gc 7b-lora-8k 8b-lora-gc 05b-full (default: all),
#                                                 7b-lora-gc-keep N, 8b-lora-gc-keep N, 7b-lora-8k-keep N: checkpointing
#                                                 that recomputes only the first N layers (the peer recomputes all),
#                                                 7b-lora-profile (ours only, per-op table, ops bracketed by syncs),
#                                                 7b-lora-breakdown (ours only, SWIFT_PROFILE=events: per-op device
#                                                 time from CUDA events, no syncs; the step split into gemm, attention,
#                                                 loss, elementwise, optimizer, communication, other, idle; its JSON
#                                                 line with "breakdown_ms" goes to $OUT/breakdown-7b-lora.json),
#                                                 7b-lora-mlp, 7b-lora-gc-keep-mlp N: the selective MLP recompute
#                                                 (--recompute_modules mlp: the kept layers recompute their MLP
#                                                 intermediates; the peer's figures are 7b-lora's / 7b-lora-gc's),
#                                                 ours "ARGS": bench_train_step with these arguments (ours only),
#                                                 peer "ARGS": peer_train_step.py with these arguments
# Carry .device-deps (and .device-prebuilt: prebuild.sh). JSON lines go to $OUT/bench-train.jsonl, logs to $OUT/bench-train.log.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu bench bench_train_step
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(7b-lora 7b-lora-gc 05b-full 7b-lora-8k 8b-lora-gc)
run_case() {  # name config tuner seq batch [--gradient_checkpointing [--recompute_num_layers N]]
  local name=$1 config=$2 tuner=$3 seq=$4 batch=$5 gc=${6:-} keep=${7:-}
  local peer_gc=""; [ -n "$gc" ] && peer_gc=--gradient-checkpointing
  echo "== $name: swift.cpp" >&2
  build-gpu/bench/bench_train_step --config "$config" --tuner "$tuner" --seq "$seq" --batch "$batch" $gc $keep \
    --steps 5 --warmup 2 2>>"$out/bench-train.log" | sed "s/^{/{\"case\": \"$name\", /" | tee -a "$out/bench-train.jsonl" \
    || echo "{\"case\": \"$name\", \"impl\": \"swift.cpp\", \"error\": true}" | tee -a "$out/bench-train.jsonl"
  [ -n "$keep" ] && return 0  # the peer recomputes every layer: its figure is the matching *-gc case's
  echo "== $name: peer" >&2
  PYTHONUNBUFFERED=1 python3 scripts/bench/peer_train_step.py --config "$config" --tuner "$tuner" --seq "$seq" \
    --batch "$batch" $peer_gc --steps 5 --warmup 2 2>>"$out/bench-train.log" | sed "s/^{/{\"case\": \"$name\", /" \
    | tee -a "$out/bench-train.jsonl" || true
}
custom=0
for ((i = 0; i < ${#cases[@]}; i++)); do
  c=${cases[i]}
  recompute=""
  case $c in  # these take the next word as their argument (N, or the arguments of ours / peer)
    *-keep|*-keep-mlp|ours|peer) recompute=${cases[i + 1]:-}; i=$((i + 1)) ;;
  esac
  case $c in
    7b-lora-gc-keep) run_case "$c" bench/configs/qwen2.5-7b.json lora 2048 4 --gradient_checkpointing "--recompute_num_layers $recompute" ;;
    8b-lora-gc-keep) run_case "$c" bench/configs/llama-3.1-8b.json lora 2048 4 --gradient_checkpointing "--recompute_num_layers $recompute" ;;
    7b-lora-8k-keep) run_case "$c" bench/configs/qwen2.5-7b.json lora 8192 1 --gradient_checkpointing "--recompute_num_layers $recompute" ;;
    7b-lora) run_case "$c" bench/configs/qwen2.5-7b.json lora 2048 4 ;;
    7b-lora-mlp) run_case "$c" bench/configs/qwen2.5-7b.json lora 2048 4 "" "--recompute_modules mlp" ;;
    7b-lora-gc-keep-mlp) run_case "$c" bench/configs/qwen2.5-7b.json lora 2048 4 --gradient_checkpointing \
      "--recompute_num_layers $recompute --recompute_modules mlp" ;;
    ours|peer)  # one configuration by its arguments: "$recompute" holds them
      custom=$((custom + 1))
      echo "== $c-$custom: $recompute" >&2
      if [ "$c" = ours ]; then
        build-gpu/bench/bench_train_step $recompute --steps 5 --warmup 2 2>>"$out/bench-train.log"
      else
        PYTHONUNBUFFERED=1 python3 scripts/bench/peer_train_step.py $recompute --steps 5 --warmup 2 2>>"$out/bench-train.log"
      fi | sed "s|^{|{\"case\": \"$c-$custom\", \"args\": \"$recompute\", |" | tee -a "$out/bench-train.jsonl" \
        || echo "{\"case\": \"$c-$custom\", \"error\": true}" | tee -a "$out/bench-train.jsonl" ;;
    7b-lora-gc) run_case "$c" bench/configs/qwen2.5-7b.json lora 2048 4 --gradient_checkpointing ;;
    7b-lora-8k) run_case "$c" bench/configs/qwen2.5-7b.json lora 8192 1 --gradient_checkpointing ;;
    8b-lora-gc) run_case "$c" bench/configs/llama-3.1-8b.json lora 2048 4 --gradient_checkpointing ;;
    05b-full) run_case "$c" bench/configs/qwen2.5-0.5b.json full 2048 8 ;;
    7b-lora-profile)  # swift.cpp only, SWIFT_PROFILE=1: per-op device time (ops bracketed by synchronisations)
      echo "== $c: swift.cpp, per-op profile" >&2
      SWIFT_PROFILE=1 build-gpu/bench/bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 \
        --batch 4 --steps 3 --warmup 1 > /dev/null 2> "$out/profile-7b-lora.txt" || true
      tail -45 "$out/profile-7b-lora.txt" ;;
    7b-lora-breakdown)  # swift.cpp only, SWIFT_PROFILE=events: device time per op and per category, idle included
      echo "== $c: swift.cpp, step breakdown (CUDA events)" >&2
      SWIFT_PROFILE=events build-gpu/bench/bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora \
        --seq 2048 --batch 4 --steps 3 --warmup 1 > "$out/breakdown-7b-lora.json" 2> "$out/breakdown-7b-lora.txt" || true
      cat "$out/breakdown-7b-lora.json"
      grep '^breakdown per step' "$out/breakdown-7b-lora.txt"
      tail -45 "$out/breakdown-7b-lora.txt" ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
[ -f "$out/bench-train.jsonl" ] || exit 0
python3 - "$out/bench-train.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'case':12} {'impl':10} {'tokens/s':>10} {'TFLOP/s':>8} {'peak GiB':>9} {'step s':>8} {'loss':>8}")
for r in rows:
    impl = "swift.cpp" if r.get("impl") == "swift.cpp" else "peer"
    if r.get("error"):
        print(f"{r['case']:12} {impl:10} failed"); continue
    print(f"{r['case']:12} {impl:10} {r['tokens_per_s']:>10.0f} {r['model_tflops']:>8.1f} "
          f"{r['peak_allocated_gib']:>9.2f} {r['step_s_median']:>8.3f} {r['last_loss']:>8.3f}")
PY
