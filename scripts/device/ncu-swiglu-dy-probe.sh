#!/usr/bin/env bash
# On the GPU machine (session 25): Nsight Compute counters of the swiglu backward's passes on the gpu test's shapes
# (OpsCudaMatmul.SwigluBackwardLoraDy*, up to 2048 x 18944): the fused lora_swiglu_dy_kernel (SWIFT_LORA_SWIGLU_DY=1)
# against the swiglu backward's map_kernel and the dy pass's lora_dy_mma_kernel: duration, DRAM throughput, occupancy,
# issue and stalls (ncu-*.txt in $OUT). Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu).
source "$(dirname "$0")/env.sh"
build_gpu t test_gpu
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats"
for k in lora_swiglu_dy_kernel map_kernel lora_dy_mma_kernel; do
  SWIFT_SWIGLU_BWD_GROUPS=0 timeout 200 "$ncu_bin" -k "regex:$k" --launch-count 40 $sections \
    build-gpu/tests/test_gpu --gtest_filter='OpsCudaMatmul.SwigluBackwardLoraDy*' > "${OUT:-/tmp}/ncu-$k.txt" 2>&1 || true
  grep -E "ERR_|==ERROR==" "${OUT:-/tmp}/ncu-$k.txt" | head -5 || true
  # the largest launches: the 2048 x 18944 case
  python3 - "${OUT:-/tmp}/ncu-$k.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.split(r"\n  (?=\S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", text)
rows = []
for b in blocks:
    dur = re.search(r"Duration\s+(\S+)\s+([\d.,]+)", b)
    if not dur: continue
    unit, v = dur.group(1), float(dur.group(2).replace(",", ""))
    us = v / 1000 if unit == "ns" else (v * 1000 if unit == "ms" else v)
    get = lambda name: (re.search(name + r"\s+\S+\s+([\d.,]+)", b) or [None, "?"])[1]
    rows.append((us, b.split("\n")[0][:60], get("DRAM Throughput"), get("Achieved Occupancy"), get("Issue Slots Busy"),
                 get("Warp Cycles Per Issued Instruction"), get("Registers Per Thread")))
for r in sorted(rows, reverse=True)[:3]:
    print("%9.1f us | %s | dram %s%% occ %s%% issue %s%% cyc/inst %s regs %s" % r)
PY
done
