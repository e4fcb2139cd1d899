#!/usr/bin/env bash
# On the GPU machine, one call: the attention op, ours (bench_attention: flash2, cuDNN deterministic / atomic backward)
# against torch's sdpa (scripts/bench/peer_attention.py: default, flash, cuDNN, efficient backends) on the 0.5B shape
# (8 x 2048, Hq 14, Hkv 2, D 64) and the 7B shape (4 x 2048, Hq 28, Hkv 4, D 128), then the 0.5B full step with the
# default (deterministic) and the atomic attention backward. First the attention / training gpu tests (GPU_TESTS=none
# skips them).
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step bench_attention). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu attention test_gpu bench_attention bench_train_step
[ "${GPU_TESTS:-}" = none ] || gpu_tests "${GPU_TESTS:-OpsCudaAttention*:*CudaTraining*}"
for shape in "--seqs 8 --len 2048 --hq 14 --hkv 2 --d 64" "--seqs 4 --len 2048 --hq 28 --hkv 4 --d 128"; do
  echo "== $shape"
  build-gpu/bench/bench_attention $shape 2>>"$out/attention.log" | tee -a "$out/attention.jsonl" \
    | python3 -c "import json,sys; r=json.load(sys.stdin); [print(f'ours {p}: fwd {r[p][\"fwd_ms\"]:.3f} ms ({r[p][\"fwd_tflops\"]} TF/s) bwd {r[p][\"bwd_ms\"]:.3f} ms ({r[p][\"bwd_tflops\"]} TF/s)') for p in ('flash2','cudnn','cudnn_nondeterministic_bwd') if p in r]"
  python3 scripts/bench/peer_attention.py $shape 2>>"$out/attention.log" | tee -a "$out/attention.jsonl" \
    | python3 -c "import json,sys; r=json.load(sys.stdin); [print(f'peer {n}: ' + (v['error'] if 'error' in v else f'fwd {v[\"fwd_ms\"]:.3f} ms ({v[\"fwd_tflops\"]} TF/s) bwd {v[\"bwd_ms\"]:.3f} ms ({v[\"bwd_tflops\"]} TF/s)')) for n,v in r['paths'].items()]"
done
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
echo "0.5b full: $(build-gpu/bench/bench_train_step $q05 2>>"$out/attention.log" | show_bench)"
echo "0.5b full, atomic attention backward: $(SWIFT_CUDNN_ATTENTION_BWD=nondeterministic build-gpu/bench/bench_train_step $q05 2>>"$out/attention.log" | show_bench)"
