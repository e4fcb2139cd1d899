#!/usr/bin/env bash
# On the GPU machine: validate CUDA graphs for decoding in one call. (1) The gpu tests of decoding: DeviceGraph, the
# replayable ops, replayed == eager steps bit for bit on every golden model (CudaDecodeGraph*), and the existing
# device-vs-CPU decoding tests, which now go through the graphs; (2) the same device-vs-CPU tests with
# SWIFT_CUDA_GRAPHS=0 (the eager step); (3) bench-decode.sh on Qwen2.5-0.5B (swift.cpp with graphs, without, and the
# peer) unless SKIP_BENCH=1.
#   scripts/device/decode-graphs-check.sh            cases for the bench as bench-decode.sh takes them (default 05b)
# Carry .device-deps (and .device-prebuilt: prebuild.sh). Logs go to $OUT/decode-graphs-*.log; the bench's table and JSON as bench-decode.sh writes them.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu decode-graphs test_gpu
decode_tests='CudaDeviceGraph*:CudaAttentionDecodeAt*:CudaKvCacheWrite*:*CudaDecodeGraph*:OpsCudaAttentionDecode*:*CudaDecodeModel*:CudaDecodeAdapters*'
status=0
echo "== gpu tests, CUDA graphs on (default)"
build-gpu/tests/test_gpu --gtest_filter="$decode_tests" --gtest_color=no > "$out/decode-graphs-tests.log" 2>&1 || status=1
grep -E '^\[  (PASSED|FAILED)  \]' "$out/decode-graphs-tests.log" || tail -30 "$out/decode-graphs-tests.log"
echo "== gpu tests, SWIFT_CUDA_GRAPHS=0 (eager steps)"
SWIFT_CUDA_GRAPHS=0 build-gpu/tests/test_gpu --gtest_filter='*CudaDecodeModel*:CudaDecodeAdapters*' --gtest_color=no \
  > "$out/decode-graphs-tests-eager.log" 2>&1 || status=1
grep -E '^\[  (PASSED|FAILED)  \]' "$out/decode-graphs-tests-eager.log" || tail -30 "$out/decode-graphs-tests-eager.log"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== bench-decode"
  [ $# -gt 0 ] || set -- 05b
  "$(dirname "$0")/bench-decode.sh" "$@" || status=1
fi
exit $status
