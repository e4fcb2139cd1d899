#!/usr/bin/env bash
# The README's first command, on a fresh machine with no GPU: install packages, build, fetch the real
# SmolLM2-135M-Instruct model, answer a few GSM8K test questions with the base model, fine-tune it with LoRA on
# GSM8K train rows, then answer the same questions with the fine-tuned adapter.
# Knobs (environment): SWIFT_DEMO_TRAIN_ROWS (default 200), SWIFT_DEMO_TEST_ROWS (3), SWIFT_DEMO_MAX_LENGTH (320).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/fetch-model.sh"
cd "$root"
swift=build/swift
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
train_rows=${SWIFT_DEMO_TRAIN_ROWS:-200}
test_rows=${SWIFT_DEMO_TEST_ROWS:-3}
max_length=${SWIFT_DEMO_MAX_LENGTH:-320}
out=output/main-job
mkdir -p "$out"

echo "== base model on $test_rows GSM8K test questions"
$swift infer --model "$model" --val_dataset "data/gsm8k/test-50.jsonl#$test_rows" --max_new_tokens 160 \
  --result_path "$out/base.jsonl"

echo "== LoRA fine-tuning on $train_rows GSM8K train rows"
$swift sft --model "$model" --dataset "data/gsm8k/train-1000.jsonl#$train_rows" --tuner_type lora \
  --max_length "$max_length" --num_train_epochs 1 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 \
  --learning_rate 5e-4 --lora_rank 16 --lora_alpha 32 --warmup_ratio 0.05 --logging_steps 5 --save_steps 50 \
  --gradient_checkpointing false --dataset_num_proc 2 --output_dir "$out/sft" | tee "$out/sft.log"
ckpt=$(sed -n 's/^last_model_checkpoint: //p' "$out/sft.log" | tail -n 1)

echo "== fine-tuned model ($ckpt) on the same questions"
$swift infer --model "$model" --adapters "$ckpt" --val_dataset "data/gsm8k/test-50.jsonl#$test_rows" \
  --max_new_tokens 160 --result_path "$out/finetuned.jsonl"
echo "== results: $out/base.jsonl, $out/finetuned.jsonl; training logs and curves: $(dirname "$ckpt")"
