#!/usr/bin/env bash
# On the GPU machine, one call: the dense cuDNN attention graphs (every sequence one bucket length: no ragged offsets,
# length overrides or padding mask) against the ragged ones (SWIFT_CUDNN_ATTENTION_DENSE=0), interleaved, on the 0.5B
# full step and the 7B LoRA step (ours only, one machine), then each with the atomic attention backward
# (SWIFT_CUDNN_ATTENTION_BWD=nondeterministic, what torch's sdpa runs). Every step time is printed.
# Carry .device-deps (and .device-prebuilt: prebuild.sh test_gpu bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
build_gpu dense bench_train_step
q05="--config bench/configs/qwen2.5-0.5b.json --tuner full --seq 2048 --batch 8 --steps 5 --warmup 2"
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
for model in q05 q7; do
  args=${!model}
  for rep in $(seq "${REPS:-2}"); do
    for setting in X=1 SWIFT_CUDNN_ATTENTION_DENSE=0; do
      echo "$model rep $rep $setting: $(env $setting build-gpu/bench/bench_train_step $args 2>>"$out/dense.log" | show_bench)"
    done
  done
  for setting in X=1 SWIFT_CUDNN_ATTENTION_DENSE=0; do
    echo "$model atomic backward, $setting: $(env SWIFT_CUDNN_ATTENTION_BWD=nondeterministic $setting \
      build-gpu/bench/bench_train_step $args 2>>"$out/dense.log" | show_bench)"
  done
done
grep -E "^step" "$out/dense.log" | tr '\n' ' ' | fold -w 200; echo
