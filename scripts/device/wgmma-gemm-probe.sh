#!/usr/bin/env bash
# Our own Hopper GEMM (scripts/device/probe_wgmma_gemm.cu: TMA + wgmma, warp-specialised, persistent) against
# cuBLASLt on the 7B's forward product shapes; nvcc alone, no product code.
#   bash scripts/device/wgmma-gemm-probe.sh ["-DSTAGES=4 -DGROUP_M=16 -DCLUSTER=2 -DEPI=1" ...]   one build per variant
#   REPS=N (default 20), INPUTS=const (operands 1/64 everywhere instead of random: the power draw's part)
# (on the GPU machine; log under $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=("")
i=0
for v in "${variants[@]}"; do
  i=$((i + 1))
  bin=/tmp/probe_wgmma_$i
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc $v -o "$bin" scripts/device/probe_wgmma_gemm.cu -lcublasLt
  echo "== variant: ${v:-default}" | tee -a "$out/wgmma-gemm-probe.log"
  "$bin" "${REPS:-20}" "${INPUTS:-random}" | tee -a "$out/wgmma-gemm-probe.log" || true
done
