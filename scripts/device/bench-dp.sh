#!/usr/bin/env bash
# On a machine with N >= 2 GPUs: data-parallel scaling of a training step (weak scaling: the per-GPU shape stays,
# the global batch grows N-fold), swift.cpp (`NPROC_PER_NODE=N bench_train_step`: NCCL, gradient buckets reduced
# during the backward, as `swift sft` does) and the peer (`torchrun --nproc_per_node N peer_train_step.py`:
# transformers + PEFT under DistributedDataParallel) on 1 GPU and on N GPUs, all in this one call. Prints a table:
# tokens/s (global), per-GPU tokens/s, scaling efficiency = N-GPU tokens/s / (N x 1-GPU tokens/s), ours / peer.
#   scripts/device/bench-dp.sh [case ...]    cases: 7b-lora (Qwen2.5-7B LoRA, 2048 x 4 per GPU), 05b-full
#                                            (Qwen2.5-0.5B full, 2048 x 8 per GPU), 7b-lora-gc (7b-lora with gradient
#                                            checkpointing); default: 7b-lora 05b-full
#   env: NGPUS (default: every GPU nvidia-smi lists), STEPS (4) and WARMUP (2) per run, ZERO (0|1|2: ours only,
#        --zero; the peer's DDP has no ZeRO), BUILD=0 to skip the build, RUN_TIMEOUT (s per run, default 300).
# Carry .device-deps; run on the nvidia-h200-x2 kind (x4 / x8 the same way). JSON lines go to $OUT/bench-dp.jsonl,
# logs to $OUT/bench-dp.log (every rank's log of ours under $OUT/dist-logs/). NCCL_NVLS_ENABLE=0 as dp-check.sh.
source "$(dirname "$0")/env.sh"
set +e
export NCCL_NVLS_ENABLE=0
out=${OUT:-/tmp}
jsonl=$out/bench-dp.jsonl log=$out/bench-dp.log
: > "$jsonl"
if [ "${BUILD:-1}" != 0 ]; then
  build_gpu bench-dp bench_train_step
  echo "built bench_train_step at ${SECONDS}s" >&2
fi
ngpus=${NGPUS:-$(nvidia-smi -L | wc -l)}
[ "$ngpus" -ge 2 ] || { echo "bench-dp.sh: $ngpus GPU(s) visible; data-parallel scaling needs at least 2 (NGPUS)" >&2; exit 2; }
steps=${STEPS:-4} warmup=${WARMUP:-2} zero=${ZERO:-0} limit=${RUN_TIMEOUT:-300}
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(7b-lora 05b-full)

# run_one case impl world config tuner seq batch gc: appends one JSON line (or an error row) to $jsonl.
run_one() {
  local name=$1 impl=$2 world=$3 config=$4 tuner=$5 seq=$6 batch=$7 gc=$8 line rc
  local shape=(--config "$config" --tuner "$tuner" --seq "$seq" --batch "$batch" --steps "$steps" --warmup "$warmup")
  echo "== $name: $impl on $world GPU(s) (${SECONDS}s)" | tee -a "$log" >&2
  if [ "$impl" = swift.cpp ]; then
    local ours=(build-gpu/bench/bench_train_step "${shape[@]}" --zero "$zero" ${gc:+--gradient_checkpointing})
    if [ "$world" = 1 ]; then
      line=$(timeout "$limit" "${ours[@]}" 2>>"$log")
    else
      line=$(NPROC_PER_NODE=$world SWIFT_DIST_LOG_DIR=$out/dist-logs timeout "$limit" "${ours[@]}" 2>>"$log")
    fi
  else
    local peer=(scripts/bench/peer_train_step.py "${shape[@]}" ${gc:+--gradient-checkpointing})
    if [ "$world" = 1 ]; then
      line=$(PYTHONUNBUFFERED=1 timeout "$limit" python3 "${peer[@]}" 2>>"$log")
    else
      line=$(PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 timeout "$limit" torchrun --standalone --nproc_per_node "$world" \
             "${peer[@]}" 2>>"$log")
    fi
  fi
  rc=$?
  line=$(printf '%s\n' "$line" | grep '^{' | tail -1)
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    echo "   failed (exit $rc); tail of $log:" >&2; tail -5 "$log" >&2
    line="{\"impl\": \"$impl\", \"error\": true}"
  fi
  printf '%s\n' "$line" | sed "s/^{/{\"case\": \"$name\", \"world\": $world, /" | tee -a "$jsonl"
}

for c in "${cases[@]}"; do
  case $c in
    7b-lora) args=(bench/configs/qwen2.5-7b.json lora 2048 4 "") ;;
    7b-lora-gc) args=(bench/configs/qwen2.5-7b.json lora 2048 4 gc) ;;
    05b-full) args=(bench/configs/qwen2.5-0.5b.json full 2048 8 "") ;;
    *) echo "bench-dp.sh: unknown case '$c' (7b-lora, 7b-lora-gc, 05b-full)" >&2; exit 2 ;;
  esac
  for impl in swift.cpp peer; do
    for world in 1 "$ngpus"; do run_one "$c" "$impl" "$world" "${args[@]}"; done
  done
done
echo "done at ${SECONDS}s" >&2

python3 - "$jsonl" "$ngpus" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n = int(sys.argv[2])
def impl(r): return "swift.cpp" if r.get("impl") == "swift.cpp" else "peer"
def global_tps(r): return r.get("global_tokens_per_s", r.get("tokens_per_s"))
by = {(r["case"], impl(r), r["world"]): r for r in rows}
print(f"{'case':11} {'impl':9} {'GPUs':>4} {'tokens/s':>10} {'per GPU':>9} {'scaling':>8} {'vs peer':>8} "
      f"{'peak GiB':>9} {'step s':>7} {'loss':>7}")
for (case, who, world), r in by.items():
    if r.get("error"):
        print(f"{case:11} {who:9} {world:>4} failed"); continue
    one = by.get((case, who, 1), {})
    scaling = (f"{global_tps(r) / (world * one['tokens_per_s']):.1%}"
               if world > 1 and not one.get("error") and one.get("tokens_per_s") else "")
    peer = by.get((case, "peer", world), {})
    ratio = (f"{global_tps(r) / global_tps(peer):.2f}x"
             if who == "swift.cpp" and peer and not peer.get("error") else "")
    peak = r.get("peak_allocated_gib_max_rank", r["peak_allocated_gib"])
    print(f"{case:11} {who:9} {world:>4} {global_tps(r):>10.0f} {r['tokens_per_s']:>9.0f} {scaling:>8} {ratio:>8} "
          f"{peak:>9.2f} {r['step_s_median']:>7.3f} {r['last_loss']:>7.3f}")
print(f"scaling: {n}-GPU tokens/s / ({n} x 1-GPU tokens/s); peak: the largest over ranks; per GPU: tokens/s of one "
      "rank (the step time is the slowest rank's)")
PY
