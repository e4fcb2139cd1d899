#!/usr/bin/env bash
# Nsight Compute counters of our Hopper GEMM (probe_wgmma_gemm.cu) and cuBLASLt's on one 7B product shape (SHAPES,
# default "gate": N = 18,944, K = 3,584), every kernel the probe launches with REPS=1 (cuBLASLt's 8 heuristic
# algorithms three times each, ours three times): duration, SM clock, DRAM and L2 bytes, instructions
# issued. The energy proxies behind "equal with constant operands, behind under the power cap" (run 23): more
# bytes moved or more instructions per product draw more of the 700 W. ncu locks the clocks (base), so durations
# here are not the step's. Variants as wgmma-gemm-probe.sh (default -DEPI=3). Logs under $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
v=${1:--DEPI=3}
# shellcheck disable=SC2086
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc $v -o /tmp/probe_ncu scripts/device/probe_wgmma_gemm.cu -lcublasLt
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum
SHAPES=${SHAPES:-gate} timeout 400 "$ncu_bin" --metrics "$metrics" --csv /tmp/probe_ncu 1 "${INPUTS:-random}" \
  > "$out/ncu-gemm.csv" 2> "$out/ncu-gemm.err" || true
grep -E "==ERROR==|ERR_" "$out/ncu-gemm.err" "$out/ncu-gemm.csv" | head -5 || true
python3 - "$out/ncu-gemm.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("no ncu rows"); sys.exit()
head = rows[0]
ki, mi, vi, ii = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("ID")
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault((r[ii], r[ki][:60]), {})[r[mi]] = r[vi].replace(",", "")
for (i, k), m in per.items():
    f = lambda n: float(m.get(n, "nan"))
    print(f"{i:>3} {k:60} {f('gpu__time_duration.sum') / 1e3:8.1f} us {f('sm__cycles_elapsed.avg.per_second') / 1e6:6.0f} MHz "
          f"DRAM r/w {f('dram__bytes_read.sum') / 1e6:7.1f}/{f('dram__bytes_write.sum') / 1e6:6.1f} MB "
          f"L2 {f('lts__t_bytes.sum') / 1e6:8.1f} MB inst {f('smsp__inst_executed.sum') / 1e6:7.2f} M")
PY
