#!/usr/bin/env bash
# On the GPU machine (no package registry there): unpack the Debian packages carried in .device-deps/
# (made by scripts/device/fetch-deps.sh), build with CUDA for Hopper, run the gpu-labelled tests and then
# the CPU suites. Output goes to $OUT/log when OUT is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source scripts/device/env.sh
echo "== machine"; (cat /etc/os-release | head -2; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1) || true
configure_gpu
cmake --build build-gpu -j"$(nproc)"
cd build-gpu
echo "== gpu tests"; ctest --output-on-failure -L gpu
echo "== cpu tests"; ctest --output-on-failure -j8 -LE "gpu|slow" "$@"
