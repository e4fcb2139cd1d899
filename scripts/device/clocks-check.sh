#!/usr/bin/env bash
# On the GPU machine, one call: the GPU's clocks and power while the 7B LoRA step runs (2048 x 4, memory free), ours
# and then the peer (transformers + PEFT, no checkpointing), each with nvidia-smi sampling every 100 ms: the median and
# the 10th / 90th percentiles of the SM clock and the board power over each run's samples, and the share of samples
# with the software power cap active. The device's name, power limit and maximum clocks first. Carry .device-deps and
# .device-prebuilt. Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu clocks bench_train_step
nvidia-smi --query-gpu=name,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,temperature.gpu --format=csv
cap=clocks_event_reasons.sw_power_cap
nvidia-smi --query-gpu=$cap --format=csv > /dev/null 2>&1 || cap=clocks_throttle_reasons.sw_power_cap
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 10 --warmup 2"
sampled() {  # label command...
  local label=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw,utilization.gpu,$cap,temperature.gpu \
    --format=csv,noheader,nounits -lms 100 > "$out/clocks-$label.csv" &
  local smi=$!
  "$@" 2>>"$out/clocks.log" | tee "$out/clocks-$label.json" | show_bench | sed "s/^/$label: /"
  kill $smi; wait $smi 2>/dev/null || true
  python3 - "$out/clocks-$label.csv" "$label" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        rows.append((float(f[0]), float(f[1]), float(f[2]), f[3], float(f[4])))
    except (ValueError, IndexError):
        pass
busy = [r for r in rows if r[2] >= 90]  # samples while the GPU computes (utilisation >= 90%)
if not busy:
    print(sys.argv[2], "no busy samples"); sys.exit()
def q(v, p): v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
sm = [r[0] for r in busy]; pw = [r[1] for r in busy]
capped = sum(1 for r in busy if r[3].lower().startswith("active")) / len(busy)
print(f"{sys.argv[2]}: {len(busy)} busy samples of {len(rows)}: SM clock median {q(sm, .5):.0f} MHz "
      f"(p10 {q(sm, .1):.0f}, p90 {q(sm, .9):.0f}); power median {q(pw, .5):.0f} W (p10 {q(pw, .1):.0f}, "
      f"p90 {q(pw, .9):.0f}); sw power cap active in {100 * capped:.0f}%; temperature max {max(r[4] for r in busy):.0f} C")
PY
}
sampled ours build-gpu/bench/bench_train_step $q7
sampled peer env PYTHONUNBUFFERED=1 python3 scripts/bench/peer_train_step.py $q7
