#!/usr/bin/env bash
# Here (with Debian's registry): download the .deb packages the build needs into .device-deps/ (ignored by
# git through .git/info/exclude), to be carried to the GPU machine, which reaches no registry.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root/.device-deps"
grep -qx "/.device-deps/" "$root/.git/info/exclude" 2>/dev/null || echo "/.device-deps/" >> "$root/.git/info/exclude"
cd "$root/.device-deps"
apt-get download libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 \
  nlohmann-json3-dev libfmt-dev libfmt9 libgtest-dev libcli11-dev libutf8proc-dev libutf8proc2 libpcre2-dev \
  libpcre2-8-0 libyaml-cpp-dev libyaml-cpp0.7
