#!/usr/bin/env bash
# Is our Hopper GEMM behind cuBLASLt because it spends more of the 700 W cap per product? The probe
# (probe_wgmma_gemm.cu) with POWER_MS: each 7B product shape held ~POWER_MS ms (default 1500) by cuBLASLt's best
# algorithm and by ours, alternately, twice, while nvidia-smi samples the SM clock and board power every 50 ms; per
# phase, the median clock and power over its samples (the first 200 ms skipped), and the product rate. Same clock at
# a lower rate: ours does less per clock; a lower clock at the same power: ours spends more energy per product.
#   bash scripts/device/gemm-power-probe.sh ["-DEPI=3" ...]   one build per variant (default -DEPI=3)
# (on the GPU machine, nvcc alone; logs under $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("-DEPI=3")
i=0
for v in "${variants[@]}"; do
  i=$((i + 1))
  bin=/tmp/probe_power_$i
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc $v -o "$bin" scripts/device/probe_wgmma_gemm.cu -lcublasLt
  echo "== variant: $v"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 > "$out/power-$i.csv" &
  smi=$!
  POWER_MS=${POWER_MS:-1500} "$bin" "${REPS:-20}" "${INPUTS:-random}" > "$out/power-probe-$i.log" || true
  kill $smi; wait $smi 2>/dev/null || true
  grep -v "^phase\|cuBLASLt best" "$out/power-probe-$i.log"
  python3 - "$out/power-$i.csv" "$out/power-probe-$i.log" <<'PY'
import datetime, statistics, sys
samples = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp() * 1e3
        samples.append((t, float(f[1]), float(f[2])))
    except (ValueError, IndexError):
        pass
print(f"{'phase':9} {'shape':12} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>5} {'samples':>7} {'GFLOP/J':>8}")
for line in open(sys.argv[2]):
    if not line.startswith("phase "):
        continue
    _, who, shape, t0, t1, n, tflops = line.split()
    t0, t1, tflops = float(t0), float(t1), float(tflops)
    s = [x for x in samples if t0 + 200 <= x[0] <= t1]
    if not s:
        print(f"{who:9} {shape:12} {tflops:8.1f}  no samples"); continue
    mhz = statistics.median(x[1] for x in s); w = statistics.median(x[2] for x in s)
    print(f"{who:9} {shape:12} {tflops:8.1f} {mhz:7.0f} {w:5.0f} {len(s):7d} {tflops * 1e3 / w:8.1f}")
PY
done
