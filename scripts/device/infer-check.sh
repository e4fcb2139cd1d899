#!/usr/bin/env bash
# On the GPU machine: `swift infer` end to end on the tiny chat fixture (tests/fixtures/tiny_chat): batch inference
# over its 12 rows, sampled at temperature 1 with the default seed (the random tiny model's greedy reply is a run of
# newlines; sampled tokens depend on every logit, and the draws are the same on every device) on the CPU (--device_map cpu), on CUDA in float32 and in bfloat16, without and with a
# LoRA adapter trained here for a few steps. The float32 CUDA responses must equal the CPU's (exit 1 otherwise);
# bfloat16 agreement is reported, not required (bf16 activations may flip near-ties of a random model).
# Carry .device-deps; builds the swift executable. Results and logs go to $OUT/infer-check/.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}/infer-check
mkdir -p "$out"
build_gpu infer swift
tiny=tests/fixtures/tiny_chat
swift=build-gpu/swift
CUDA_VISIBLE_DEVICES= "$swift" sft --model "$tiny" --dataset "$tiny/chat.jsonl" --max_steps 4 --learning_rate 1e-2 \
  --lora_rank 4 --output_dir "$out/sft" > "$out/sft.log" 2>&1 || { tail -20 "$out/sft.log"; exit 1; }
ckpt=$(grep -o 'last_model_checkpoint: .*' "$out/sft.log" | tail -1 | cut -d' ' -f2)
status=0
for adapter in none lora; do
  extra=()
  [ "$adapter" = lora ] && extra=(--adapters "$ckpt")
  for dev in cpu cuda-f32 cuda-bf16; do
    case $dev in
      cpu) flags=(--device_map cpu) ;;
      cuda-f32) flags=(--torch_dtype float32) ;;
      cuda-bf16) flags=(--torch_dtype bfloat16) ;;
    esac
    if ! "$swift" infer --model "$tiny" --val_dataset "$tiny/chat.jsonl" --max_new_tokens 24 --temperature 1 "${extra[@]}" "${flags[@]}" \
        --result_path "$out/$adapter-$dev.jsonl" > "$out/$adapter-$dev.log" 2>&1; then
      echo "infer ($adapter, $dev) failed:"; tail -5 "$out/$adapter-$dev.log"; status=1; continue
    fi
    echo "$adapter $dev: $(grep -E '^device:' "$out/$adapter-$dev.log") | $(grep -E 'tokens/s' "$out/$adapter-$dev.log")"
  done
  python3 - "$out/$adapter" <<'PY' || status=1
import json, sys
base = sys.argv[1]
rows = {d: [json.loads(l)["response"] for l in open(f"{base}-{d}.jsonl")] for d in ("cpu", "cuda-f32", "cuda-bf16")}
same_f32 = sum(a == b for a, b in zip(rows["cpu"], rows["cuda-f32"]))
same_bf16 = sum(a == b for a, b in zip(rows["cpu"], rows["cuda-bf16"]))
n = len(rows["cpu"])
print(f"{base.split('/')[-1]}: cuda float32 equals cpu on {same_f32}/{n} rows, bfloat16 on {same_bf16}/{n}; "
      f"row 0 cpu {rows['cpu'][0]!r} bf16 {rows['cuda-bf16'][0]!r}")
sys.exit(0 if same_f32 == n and n > 0 else 1)
PY
done
exit $status
