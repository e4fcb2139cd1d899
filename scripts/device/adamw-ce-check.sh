#!/usr/bin/env bash
# On the GPU machine, one call: AdamW reading and writing 4 elements per thread where its chunk is 16-byte aligned
# (the same bits), and the cross-entropy row statistics taking each thread's 16 values at once (one rescale, a tree
# of independent exps). The elementwise (AdamW), cross-entropy, vocabulary-shard, training and golden gpu tests; the
# 0.5B full step under SWIFT_PROFILE=events (adamw_step and cross_entropy.row_stats per call), then 3 plain steps.
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu adamw test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*AdamW*:*CrossEntropy*:*VocabShard*:*CudaTraining*:*Golden*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q05/--steps 5/--steps 3} > /dev/null 2> "${OUT:-/tmp}/profile.log"
grep -E "^(breakdown|adamw_step|cross_entropy|grad_norm)" "${OUT:-/tmp}/profile.log" | head -12 || true
for rep in 1 2 3; do echo "rep $rep: $(build-gpu/bench/bench_train_step $q05 2>>"${OUT:-/tmp}/ab.log" | show_bench)"; done
