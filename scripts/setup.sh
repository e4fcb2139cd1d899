#!/usr/bin/env bash
# Installs every Debian package the build needs (idempotent), then configures and builds swift.cpp into
# build/. CUDA, cuDNN and NCCL are used when the CUDA toolkit is at /usr/local/cuda (not installed here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
packages=(build-essential cmake pkg-config git python3 python3-pip
  libopenblas-dev nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev
  zlib1g-dev libxxhash-dev libcairo2-dev fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
build="${SWIFT_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${SWIFT_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
echo "built: $build/swift"
