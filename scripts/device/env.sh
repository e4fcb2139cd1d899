#!/usr/bin/env bash
# Sourced by the device scripts: unpacks the Debian packages carried in .device-deps/ (scripts/device/fetch-deps.sh)
# into /tmp/swift-deps. Idempotent within one machine. Also defines, for the scripts that source it (logs under
# ${OUT:-/tmp}):
#   build_gpu NAME TARGET...   the targets in build-gpu: installed from .device-prebuilt/ (scripts/device/prebuild.sh,
#                              carried) when built from this very tree, else built (build-gpu configured on first
#                              need: CUDA on, Hopper sm_90a, Ninja; log NAME-build.log, its tail and exit 1 on failure)
#   gpu_tests FILTER           test_gpu with that gtest filter (log gpu-suite.log), prints the summary lines
#   show_bench                 one bench_train_step / peer JSON line on stdin -> "tokens/s GiB loss"
#   ab_steps REPS "ARGS" SETTING...
#                              interleaved A/B: REPS rounds of bench_train_step ARGS once under each SETTING (an
#                              environment assignment; X=1 for none), a line "LABEL SETTING: tokens/s GiB loss" each
#                              (LABEL: $AB_LABEL, default "rep N"; log ab.log)
#   events_profiles "ARGS" "PATTERN" SETTING...
#                              per SETTING: bench_train_step ARGS under SWIFT_PROFILE=events and SETTING, its
#                              show_bench line and the profile lines matching PATTERN (log profile-SETTING.txt)
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
# Configures build-gpu on first need (a call whose binaries all come prebuilt configures nothing).
configure_gpu() {
  [ -f build-gpu/build.ninja ] && return 0
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps/usr" \
    -DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so" -DGTest_DIR="$lib/cmake/GTest" \
    -Dfmt_DIR="$lib/cmake/fmt" -Dnlohmann_json_DIR="$deps/usr/share/cmake/nlohmann_json" > /tmp/cmake-configure.log \
    || { cat /tmp/cmake-configure.log; exit 1; }
}
source "$root/scripts/device/stamp.sh"
# Installs the carried binary of target $1 (.device-prebuilt/, scripts/device/prebuild.sh) into build-gpu when its
# stamp matches this tree; returns 1 (build it) otherwise.
install_prebuilt() {
  local t=$1 rel
  [ -f .device-prebuilt/stamp ] && [ -f ".device-prebuilt/$t.gz" ] || return 1
  [ "$(cat .device-prebuilt/stamp)" = "${tree_stamp_value:=$(tree_stamp)}" ] || { echo "prebuilt $t: stale stamp, building" >&2; return 1; }
  rel=$(awk -v t="$t" '$1 == t { print $2 }' .device-prebuilt/manifest)
  [ -n "$rel" ] || return 1
  # The tests open their fixtures under the root they were compiled in: make that path lead here.
  local src; src=$(cat .device-prebuilt/source_root)
  if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
  [ "$src" = "$root" ] || [ "$(cd "$src" && pwd -P)" = "$(pwd -P)" ] \
    || echo "prebuilt $t: $src is another directory: fixture paths lead there" >&2
  mkdir -p "build-gpu/$(dirname "$rel")"
  gzip -dc ".device-prebuilt/$t.gz" > "build-gpu/$rel"
  chmod +x "build-gpu/$rel"
  if ldd "build-gpu/$rel" | grep -q "not found"; then  # a library this machine lacks: build here instead
    echo "prebuilt $t: $(ldd "build-gpu/$rel" | grep "not found" | head -3 | tr -s ' \n' ' '); building" >&2
    rm -f "build-gpu/$rel"
    return 1
  fi
  echo "prebuilt $t: installed build-gpu/$rel" >&2
}
show_bench() {
  python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("%.0f tokens/s %.2f GiB loss %.4f" % (r["tokens_per_s"], r["peak_allocated_gib"], r["last_loss"]))'
}
ab_steps() {
  local reps=$1 args=$2 rep setting; shift 2
  for rep in $(seq "$reps"); do
    for setting in "$@"; do
      echo "${AB_LABEL:-rep $rep} $setting: $(env $setting build-gpu/bench/bench_train_step $args \
        2>>"${OUT:-/tmp}/ab.log" | show_bench)"
    done
  done
}
events_profiles() {
  local args=$1 pattern=$2 setting; shift 2
  for setting in "$@"; do
    echo "== events profile, $setting"
    env $setting SWIFT_PROFILE=events build-gpu/bench/bench_train_step $args \
      2> "${OUT:-/tmp}/profile-${setting//[^A-Za-z0-9_]/_}.txt" | show_bench
    grep -E "$pattern" "${OUT:-/tmp}/profile-${setting//[^A-Za-z0-9_]/_}.txt" | head -16 || true
  done
}
build_gpu() {
  local log="${OUT:-/tmp}/$1-build.log"; shift
  local need=() t
  for t in "$@"; do install_prebuilt "$t" || need+=("$t"); done
  [ ${#need[@]} -gt 0 ] || return 0
  configure_gpu
  cmake --build build-gpu -j"$(nproc)" --target "${need[@]}" > "$log" 2>&1 || { tail -40 "$log"; exit 1; }
}
gpu_tests() {
  build-gpu/tests/test_gpu --gtest_color=no --gtest_filter="$1" > "${OUT:-/tmp}/gpu-suite.log" 2>&1 || true
  grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]|^\[  FAILED  \]' "${OUT:-/tmp}/gpu-suite.log" | head -20 || true
}
