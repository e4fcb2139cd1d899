#!/usr/bin/env bash
# On the GPU machine, one call: bench_lora's bit-equality check per kernel family (the tensor-core and CUDA-core x
# passes each against their own reference), then the 0.5B full step with the cross-entropy's logits block at the
# default 1 GiB against 2 and 4 GiB (SWIFT_CE_WORKSPACE_MB: fewer row chunks, so fewer read-modify-writes of the F32
# head gradient), interleaved (ours only).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step bench_lora). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu ce test_gpu bench_train_step bench_lora
build-gpu/bench/bench_lora --dropout 0.05 > "${OUT:-/tmp}/bench_lora.log" 2>&1; echo "bench_lora rc $?"
grep -E "MISMATCH|bit-identical" "${OUT:-/tmp}/bench_lora.log" | head -8
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 2 "$q05" X=1 SWIFT_CE_WORKSPACE_MB=2048 SWIFT_CE_WORKSPACE_MB=4096
