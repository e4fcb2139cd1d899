#!/usr/bin/env bash
# On the GPU machine, one call: what the deterministic attention backward (cuDNN's, our default) costs the 7B at
# 2048 x 4 against cuDNN's atomic dQ form (SWIFT_CUDNN_ATTENTION_BWD=nondeterministic, what torch's sdpa backward, the
# peer, runs by default): the step with memory free and within 30 GiB (l,a,mlp N for N = 17, and 15 for the atomic
# form, whose smaller workspace lowers the peak), interleaved REPS times (default 2); the events profile's attention
# lines of both. Carry .device-deps (and .device-prebuilt: prebuild.sh bench_train_step). Logs go to $OUT.
source "$(dirname "$0")/env.sh"
build_gpu nondet bench_train_step
q7="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 5 --warmup 2"
m="--recompute_modules layernorm act mlp --recompute_num_layers"
nd=SWIFT_CUDNN_ATTENTION_BWD=nondeterministic
AB_LABEL="free" ab_steps "${REPS:-2}" "$q7" X=1 $nd
AB_LABEL="30 GiB, 17" ab_steps "${REPS:-2}" "$q7 $m 17" X=1 $nd
AB_LABEL="30 GiB, 16" ab_steps 1 "$q7 $m 16" $nd
AB_LABEL="30 GiB, 15" ab_steps 1 "$q7 $m 15" $nd
for s in X=1 $nd; do
  echo "== events, $s"
  env $s SWIFT_PROFILE=events build-gpu/bench/bench_train_step ${q7/--steps 5 --warmup 2/--steps 3 --warmup 1} \
    2>&1 >/dev/null | grep -E "^breakdown|^attention" | cut -c1-200 || true
done
