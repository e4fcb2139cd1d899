#!/usr/bin/env bash
# Sourced by the device scripts: unpacks the Debian packages carried in .device-deps/ (scripts/device/fetch-deps.sh)
# into /tmp/swift-deps and configures build-gpu (CUDA on, Hopper sm_90a, Ninja). Idempotent within one machine.
# Also defines, for the scripts that source it (logs under ${OUT:-/tmp}):
#   build_gpu NAME TARGET...   builds the targets in build-gpu (log NAME-build.log; its tail and exit 1 on failure)
#   gpu_tests FILTER           test_gpu with that gtest filter (log gpu-suite.log), prints the summary lines
#   show_bench                 one bench_train_step / peer JSON line on stdin -> "tokens/s GiB loss"
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
deps=/tmp/swift-deps
if [ ! -f "$deps/.unpacked" ]; then
  mkdir -p "$deps"
  for f in .device-deps/*.deb; do dpkg -x "$f" "$deps"; done
  touch "$deps/.unpacked"
fi
lib="$deps/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib/openblas-pthread:$lib:${LD_LIBRARY_PATH:-}"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps/usr" \
  -DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so" -DGTest_DIR="$lib/cmake/GTest" \
  -Dfmt_DIR="$lib/cmake/fmt" -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" > /tmp/cmake-configure.log \
  || { cat /tmp/cmake-configure.log; exit 1; }
show_bench() {
  python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("%.0f tokens/s %.2f GiB loss %.4f" % (r["tokens_per_s"], r["peak_allocated_gib"], r["last_loss"]))'
}
build_gpu() {
  local log="${OUT:-/tmp}/$1-build.log"; shift
  cmake --build build-gpu -j"$(nproc)" --target "$@" > "$log" 2>&1 || { tail -40 "$log"; exit 1; }
}
gpu_tests() {
  build-gpu/tests/test_gpu --gtest_color=no --gtest_filter="$1" > "${OUT:-/tmp}/gpu-suite.log" 2>&1 || true
  grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|^\[  FAILED  \]' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
}
