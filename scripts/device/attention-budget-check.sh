#!/usr/bin/env bash
# On the GPU machine: the 7B LoRA and 0.5B full steps with the default deterministic-backward workspace budget (the
# room under the process's high-water mark: the top layers split into head groups) and with room for one launch
# everywhere (SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192), interleaved (ours only), then the 7B step's profile with
# each (attention_backward per call).
# Carry .device-deps and .device-prebuilt (prebuild.sh bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu budget bench_train_step
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4"
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8"
AB_LABEL=7B ab_steps 2 "$q7 --steps 5 --warmup 2" X=1 SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192
AB_LABEL=0.5B ab_steps 1 "$q05 --steps 5 --warmup 2" X=1 SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192
for setting in X=1 SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192; do
  env $setting SWIFT_PROFILE=events build-gpu/bench/bench_train_step $q7 --steps 3 --warmup 2 2> "$out/profile.txt" \
    > /dev/null
  echo "$setting: $(grep -E '^attention' "$out/profile.txt" | tr -s ' ' | tr '\n' ';')"
done
