#!/usr/bin/env bash
# On a machine with 2+ GPUs: data-parallel `swift sft` through NCCL against one process with the same global batch,
# on the tiny chat fixture (bf16 and float32): plain data parallel (gradient buckets reduced during the backward),
# --deepspeed zero1 and --deepspeed zero2 (reduce-scatter + all_gather on the communication stream), with gradient
# accumulation 2 so that only the last micro-batch's backward reduces. Prints each loss curve and its largest
# relative difference to the one-process run. First the started (asynchronous) NCCL collectives on their own:
# tests/dist/helper/dist_helper nccl; last sequence and tensor parallelism on a 4-head copy of the fixture.
#   scripts/device/dp-check.sh          (carry .device-deps; run on the nvidia-h200-x2 kind)
source "$(dirname "$0")/env.sh"
set +e
export NCCL_NVLS_ENABLE=0
build_gpu dp swift dist_helper
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
NPROC_PER_NODE=2 SWIFT_DIST_TIMEOUT=120 build-gpu/tests/dist_helper nccl > /tmp/dp-nccl-async.log 2>&1
echo "started NCCL collectives rc=$?"; tail -4 /tmp/dp-nccl-async.log
T=tests/fixtures/tiny_chat
common=(sft --model $T --dataset $T/chat.jsonl --max_steps 6 --logging_steps 1 --learning_rate 1e-3
        --lora_dropout 0 --gradient_accumulation_steps 2 --save_steps 100)
losses() { python3 -c "import json,glob,sys; print(' '.join(f\"{json.loads(l)['loss']:.6f}\" for l in open(glob.glob(sys.argv[1] + '/v*/logging.jsonl')[0]) if '\"loss\"' in l))" "$1"; }
for dtype in bfloat16 float32; do
  rm -rf /tmp/dp-one-$dtype /tmp/dp-two-$dtype
  build-gpu/swift "${common[@]}" --torch_dtype $dtype --per_device_train_batch_size 2 --output_dir /tmp/dp-one-$dtype \
    > /tmp/dp-one-$dtype.log 2>&1; echo "one process ($dtype) rc=$?"
  a=$(losses /tmp/dp-one-$dtype); echo "one:   $a"
  for mode in zero0 zero1 zero2; do
    rm -rf /tmp/dp-two-$mode-$dtype
    NPROC_PER_NODE=2 build-gpu/swift "${common[@]}" --torch_dtype $dtype --per_device_train_batch_size 1 \
      --deepspeed $mode --output_dir /tmp/dp-two-$mode-$dtype > /tmp/dp-two-$mode-$dtype.log 2>&1
    echo "two ranks ($dtype, $mode) rc=$?"
    grep -hE "^device|global batch|communicator|nccl|NCCL" /tmp/dp-two-$mode-$dtype.log | sort -u | head -6
    b=$(losses /tmp/dp-two-$mode-$dtype); echo "$mode: $b"
    python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print('steps', len(a), len(b), 'max rel diff', max(abs(x-y)/abs(x) for x,y in zip(a,b)) if a and len(a)==len(b) else 'n/a')" "$a" "$b"
    tail -3 /tmp/dp-two-$mode-$dtype.log
  done
done
# Sequence and tensor parallelism through NCCL (float32): a 4-head / 2-KV-head copy of the tiny chat model with random
# weights (transformers writes it), one process against NPROC_PER_NODE=2 with --sequence_parallel_size 2 or
# --tensor_model_parallel_size 2 (same per-device batch: both ranks share each micro-batch).
python3 - <<'PY'
import json, os, shutil, torch, transformers
src, dst = "tests/fixtures/tiny_chat", "/tmp/tiny4"
cfg = json.load(open(f"{src}/config.json"))
cfg.update(num_attention_heads=4, num_key_value_heads=2)
cfg.pop("torch_dtype", None)
torch.manual_seed(0)
transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).save_pretrained(dst)
shutil.copy(f"{src}/tokenizer.json", dst)
PY
par=(sft --model /tmp/tiny4 --dataset $T/chat.jsonl --max_steps 4 --logging_steps 1 --learning_rate 1e-3
     --lora_dropout 0 --gradient_accumulation_steps 2 --per_device_train_batch_size 2 --save_steps 100
     --torch_dtype float32 --split_dataset_ratio 0)
rm -rf /tmp/par-one; build-gpu/swift "${par[@]}" --output_dir /tmp/par-one > /tmp/par-one.log 2>&1
echo "one process (4 heads) rc=$?"; a=$(losses /tmp/par-one); echo "one: $a"
for flag in --sequence_parallel_size --tensor_model_parallel_size; do
  rm -rf /tmp/par$flag
  NPROC_PER_NODE=2 SWIFT_DIST_TIMEOUT=120 build-gpu/swift "${par[@]}" $flag 2 --output_dir /tmp/par$flag \
    > /tmp/par$flag.log 2>&1
  echo "two ranks ($flag 2) rc=$?"; b=$(losses /tmp/par$flag); echo "$flag: $b"
  python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print('steps', len(a), len(b), 'max rel diff', max(abs(x-y)/abs(x) for x,y in zip(a,b)) if a and len(a)==len(b) else 'n/a')" "$a" "$b"
  tail -3 /tmp/par$flag.log
done

