#!/usr/bin/env bash
# On the GPU machine, one call for the full fine-tuning masters cast to the activation dtype once per forward
# (TrainableModel::refresh_product_weights) instead of in every product: the training gpu tests (BF16 and F16 full
# fine-tuning among them) and linear_residual's, then the 0.5B full step with and without it
# (SWIFT_PRODUCT_WEIGHTS=0), interleaved (ours only; the losses must be equal).
# Carry .device-deps and .device-prebuilt (prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu weights test_gpu bench_train_step
gpu_tests "${GPU_TESTS:-*CudaTraining*:*CudaF16Training*:OpsCudaMatmul.LinearResidual*}"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
ab_steps 2 "$q05" X=1 SWIFT_PRODUCT_WEIGHTS=0
