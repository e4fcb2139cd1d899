#!/usr/bin/env bash
# Does a memory-bound pass run for free beside a frozen GEMM? (scripts/device/probe_sm_carve.cu; no product code.)
#   bash scripts/device/sm-carve-probe.sh        (on the GPU machine; log under $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp}
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_sm_carve scripts/device/probe_sm_carve.cu -lcublasLt
/tmp/probe_sm_carve | tee "$out/sm-carve-probe.log"
