#!/usr/bin/env bash
# On the GPU machine (no package registry there): unpack the Debian packages carried in .device-deps/
# (made by scripts/device/fetch-deps.sh), build with CUDA for Hopper, run the gpu-labelled tests and then
# the CPU suites. Output goes to $OUT/log when OUT is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
deps=/tmp/swift-deps
mkdir -p "$deps"
for f in .device-deps/*.deb; do dpkg -x "$f" "$deps"; done
lib="$deps/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib/openblas-pthread:$lib:${LD_LIBRARY_PATH:-}"
echo "== machine"; (cat /etc/os-release | head -2; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1) || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so" -DGTest_DIR="$lib/cmake/GTest" \
  -Dfmt_DIR="$lib/cmake/fmt" -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json"
cmake --build build-gpu -j"$(nproc)"
cd build-gpu
echo "== gpu tests"; ctest --output-on-failure -L gpu
echo "== cpu tests"; ctest --output-on-failure -j8 -LE "gpu|slow" "$@"
