#!/usr/bin/env bash
# On the GPU machine: `swift sft` end to end with frozen-weight streaming on the tiny chat fixture
# (tests/fixtures/tiny_chat, one layer): LoRA with dropout on CUDA in bfloat16 and float32, 6 steps each without and
# with --offload_frozen_layers 1; the logged losses and gradient norms and the saved adapters must be the same (exit 1 otherwise).
# Carry .device-deps (and .device-prebuilt with swift: prebuild.sh swift). Logs go to $OUT/sft-frozen/.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}/sft-frozen
mkdir -p "$out"
build_gpu sft swift
tiny=tests/fixtures/tiny_chat
status=0
for dtype in bfloat16 float32; do
  for n in 0 1; do
    build-gpu/swift sft --model "$tiny" --dataset "$tiny/chat.jsonl" --max_steps 6 --learning_rate 1e-3 \
      --lora_dropout 0.1 --torch_dtype "$dtype" --gradient_checkpointing false --offload_frozen_layers "$n" \
      --logging_steps 1 --output_dir "$out/$dtype-$n" > "$out/$dtype-$n.log" 2>&1 || { tail -20 "$out/$dtype-$n.log"; exit 1; }
    grep -E "^activations:" "$out/$dtype-$n.log"
    grep -oE '"(loss|grad_norm)":[0-9.e-]+' "$out/$dtype-$n.log" > "$out/$dtype-$n.losses" || true
  done
  if cmp -s "$out/$dtype-0.losses" "$out/$dtype-1.losses" && [ -s "$out/$dtype-0.losses" ]; then
    echo "$dtype: the same logged losses and gradient norms ($(wc -l < "$out/$dtype-0.losses") values): $(tr '\n' ' ' < "$out/$dtype-1.losses")"
  else
    echo "$dtype: losses differ or none logged"; paste "$out/$dtype-0.losses" "$out/$dtype-1.losses"; status=1
  fi
  a=$(find "$out/$dtype-0" -name adapter_model.safetensors | sort | tail -1)
  b=$(find "$out/$dtype-1" -name adapter_model.safetensors | sort | tail -1)
  if [ -n "$a" ] && cmp -s "$a" "$b"; then echo "$dtype: the same adapter bytes"; else echo "$dtype: adapters differ"; status=1; fi
done
exit $status
