#!/usr/bin/env bash
# On the GPU machine, the closing call of a session: the whole gpu suite on this tree, then the 0.5B full step and
# the 7B LoRA step against the peer (bench-train.sh 05b-full 7b-lora).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu final test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*}"
bash "$(dirname "$0")/bench-train.sh" ${CASES:-05b-full 7b-lora}
