#!/usr/bin/env bash
# On the GPU machine: the deterministic cuDNN attention backward at the 0.5B shape in one launch against its head
# groups (SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB large / 0), then the 0.5B full step with the default budget and with
# room for one launch everywhere, interleaved (ours only).
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_attention bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu groups bench_attention bench_train_step
for mb in 8192 0; do
  SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=$mb build-gpu/bench/bench_attention --seqs 8 --len 2048 --hq 14 --hkv 2 \
    --d 64 --reps 10 2>&1 | grep -E "^backward dense|^\{" | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        j = json.loads(l); print('budget $mb MiB: cudnn fwd', j['cudnn']['fwd_ms'], 'bwd', j['cudnn']['bwd_ms'])
    else: print(l.strip())"
done
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 2 "$q05" X=1 SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192
