#!/usr/bin/env bash
# Here (with Debian's registry): download the .deb packages the build needs into .device-deps/ (ignored by
# git through .git/info/exclude), to be carried to the GPU machine, which reaches no registry. cairo (training
# curves as PNG) comes with its runtime libraries, since the GPU image may lack them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root/.device-deps"
grep -qx "/.device-deps/" "$root/.git/info/exclude" 2>/dev/null || echo "/.device-deps/" >> "$root/.git/info/exclude"
cd "$root/.device-deps"
apt-get download libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 \
  nlohmann-json3-dev libfmt-dev libfmt9 libgtest-dev libcli11-dev libutf8proc-dev libutf8proc2 libpcre2-dev \
  libpcre2-8-0 libyaml-cpp-dev libyaml-cpp0.7 \
  zlib1g-dev libxxhash-dev libxxhash0 \
  libcairo2-dev libcairo2 libpixman-1-0 libfontconfig1 fontconfig-config libfreetype6 libpng16-16 libbrotli1 \
  libexpat1 libxcb1 libxcb-render0 libxcb-shm0 libxrender1 libx11-6 libx11-data libxext6 libxau6 libxdmcp6 \
  libbsd0 libmd0 fonts-dejavu-core
