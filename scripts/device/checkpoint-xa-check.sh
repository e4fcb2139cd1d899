#!/usr/bin/env bash
# On the GPU machine, one call: a checkpointed block keeps its LoRA xa and keep bits from the forward and its
# recompute skips the xa passes (TrainableModel::run, Activations::rank_kept; SWIFT_CHECKPOINT_KEEP_XA=0 for the A/B).
# The training / LoRA / golden gpu tests (CudaTrainingDropout compares checkpointing with keeping everything, bit for
# bit), then the 7B with checkpointing every layer, interleaved REPS times (default 2), and the events profile's
# lora_linear lines of both. Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu keepxa test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-CudaTraining*:*Golden*:OpsCudaMatmul.Lora*}"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
AB_LABEL="checkpointing" ab_steps "${REPS:-2}" "$q7 --gradient_checkpointing" X=1 SWIFT_CHECKPOINT_KEEP_XA=0
