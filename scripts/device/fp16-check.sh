#!/usr/bin/env bash
# On the GPU machine: `swift sft --torch_dtype float16` (fp16 weights and activations, fp32 accumulation, dynamic loss
# scaling) end to end on the tiny chat fixture, beside bfloat16 and float32 runs of the same 20 steps (LoRA, the
# dp-check command line). Prints the three loss curves, the largest relative difference of the fp16 and bf16 curves
# to the fp32 one, and the fp16 run's loss-scale lines; then a float16 `swift infer` smoke run over the fixture.
# Exits 1 when the fp16 run fails, does not train F16 on CUDA with loss scaling (its log lines), logs a non-finite
# loss, skips a step for overflow (the tiny model's gradients are far from fp16's range at scale 2^16), or strays more
# than BOUND (2e-2 relative, any step) from fp32: fp16 rounds each activation 8x finer than bf16, so its curve should
# sit well inside bf16's distance (reported, not required); or when the float16 inference run fails.
#   scripts/device/fp16-check.sh          (carry .device-deps; nvidia-h200 kind). Logs under $OUT/fp16-check/.
source "$(dirname "$0")/env.sh"
set +e
out=${OUT:-/tmp}/fp16-check
mkdir -p "$out"
build_gpu fp16 swift
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
BOUND=2e-2
T=tests/fixtures/tiny_chat
common=(sft --model $T --dataset $T/chat.jsonl --max_steps 20 --logging_steps 1 --learning_rate 1e-3
        --lora_dropout 0 --gradient_accumulation_steps 2 --per_device_train_batch_size 2 --save_steps 100)
losses() { python3 -c "import json,glob,sys; print(' '.join(f\"{json.loads(l)['loss']:.6f}\" for l in open(glob.glob(sys.argv[1] + '/v*/logging.jsonl')[0]) if '\"loss\"' in l))" "$1" 2>/dev/null; }
status=0
declare -A curve
for dtype in float32 bfloat16 float16; do
  rm -rf "$out/sft-$dtype"
  build-gpu/swift "${common[@]}" --torch_dtype $dtype --output_dir "$out/sft-$dtype" > "$out/sft-$dtype.log" 2>&1
  rc=$?
  echo "sft $dtype rc=$rc: $(grep -E '^device:' "$out/sft-$dtype.log")"
  [ $rc -ne 0 ] && { tail -15 "$out/sft-$dtype.log"; [ $dtype = float16 ] && status=1; }
  curve[$dtype]=$(losses "$out/sft-$dtype")
  echo "  $dtype: ${curve[$dtype]}"
done
echo "fp16 loss scaling:"; grep -E "^fp16:|loss scale" "$out/sft-float16.log" | sed 's/^/  /'
if ! grep -qE "^device: cuda.*F16" "$out/sft-float16.log" || ! grep -q "^fp16: dynamic loss scaling" "$out/sft-float16.log"; then
  echo "FAIL: the float16 run did not train F16 on CUDA with loss scaling"; status=1
fi
python3 - "${curve[float32]}" "${curve[bfloat16]}" "${curve[float16]}" "$BOUND" <<'PY' || status=1
import math, sys
f32, bf16, f16 = ([float(x) for x in s.split()] for s in sys.argv[1:4])
bound = float(sys.argv[4])
def rel(a, b):
    if not a or len(a) != len(b) or not all(math.isfinite(x) for x in a): return float("nan")
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
r16, rbf = rel(f16, f32), rel(bf16, f32)
print(f"steps fp32 {len(f32)} bf16 {len(bf16)} fp16 {len(f16)}")
print(f"max rel diff to fp32: fp16 {r16:.3e}, bf16 {rbf:.3e} (bound for fp16 {bound:g})")
bad = not f16 or any(not math.isfinite(x) for x in f16) or not (r16 <= bound)
if bad: print("FAIL: fp16 diverges from fp32 (NaN, missing steps or above the bound)")
sys.exit(1 if bad else 0)
PY
if grep -q "overflowed" "$out/sft-float16.log"; then echo "FAIL: fp16 steps skipped for overflow"; status=1; fi
build-gpu/swift infer --model $T --val_dataset $T/chat.jsonl --max_new_tokens 16 --temperature 1 --torch_dtype float16 \
  --result_path "$out/infer-float16.jsonl" > "$out/infer-float16.log" 2>&1
rc=$?
echo "infer float16 rc=$rc: $(grep -E '^device:' "$out/infer-float16.log") | $(grep -E 'tokens/s' "$out/infer-float16.log" | tail -1)"
[ $rc -ne 0 ] && { tail -10 "$out/infer-float16.log"; status=1; }
echo "fp16-check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
