#!/usr/bin/env bash
# The README's test command: builds (if needed) and runs every CTest label except gpu.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${SWIFT_BUILD_DIR:-$root/build}"
[ -f "$build/CMakeCache.txt" ] || "$root/scripts/setup.sh"
cmake --build "$build" -j"$(nproc)"
[ -s "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] || "$root/scripts/fetch-model.sh"
cd "$build" && ctest --output-on-failure -j"$(nproc)" -LE gpu "$@"
