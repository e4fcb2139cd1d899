#!/usr/bin/env bash
# On the GPU machine: build bench_decode, then time swift.cpp and the peer (transformers generate,
# scripts/bench/peer_decode.py) on the same shapes, one after the other in this one call, and print a table:
# random weights of bench/configs/<model>.json in bf16, batch 1, a 512-token random prompt, 128 new tokens (greedy,
# KV cache), 1 warm-up run and the median of 3 timed runs each. swift.cpp runs twice in one process (bench_decode
# --cuda_graphs both): decoding steps replayed from CUDA graphs, then the same kernels launched op by op
# (SWIFT_CUDA_GRAPHS=0); both must pick the same greedy ids (bit-identical logits), which the table checks.
#   scripts/device/bench-decode.sh [case ...]     cases: 05b 7b (default: both); ours-05b ours-7b (swift.cpp only)
#   BENCH_GRAPHS=on|off|both (default both) picks swift.cpp's modes.
# Carry .device-deps (and .device-prebuilt: prebuild.sh). JSON lines go to $OUT/bench-decode.jsonl, logs to $OUT/bench-decode.log.
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}
prompt=${BENCH_PROMPT:-512}
new_tokens=${BENCH_NEW_TOKENS:-128}
graphs=${BENCH_GRAPHS:-both}
build_gpu bench-decode bench_decode
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(05b 7b)
ours() {  # name config
  echo "== $1: swift.cpp" >&2
  build-gpu/bench/bench_decode --config "$2" --prompt "$prompt" --new_tokens "$new_tokens" --runs 3 --warmup 1 \
    --cuda_graphs "$graphs" 2>>"$out/bench-decode.log" | sed "s/^{/{\"case\": \"$1\", /" | tee -a "$out/bench-decode.jsonl" \
    || echo "{\"case\": \"$1\", \"impl\": \"swift.cpp\", \"error\": true}" | tee -a "$out/bench-decode.jsonl"
}
peer() {  # name config
  echo "== $1: peer" >&2
  PYTHONUNBUFFERED=1 python3 scripts/bench/peer_decode.py --config "$2" --prompt "$prompt" --new-tokens "$new_tokens" \
    --runs 3 --warmup 1 2>>"$out/bench-decode.log" | sed "s/^{/{\"case\": \"$1\", /" | tee -a "$out/bench-decode.jsonl" \
    || echo "{\"case\": \"$1\", \"impl\": \"peer\", \"error\": true}" | tee -a "$out/bench-decode.jsonl"
}
for c in "${cases[@]}"; do
  case $c in
    05b) ours "$c" bench/configs/qwen2.5-0.5b.json; peer "$c" bench/configs/qwen2.5-0.5b.json ;;
    7b) ours "$c" bench/configs/qwen2.5-7b.json; peer "$c" bench/configs/qwen2.5-7b.json ;;
    ours-05b) ours 05b bench/configs/qwen2.5-0.5b.json ;;
    ours-7b) ours 7b bench/configs/qwen2.5-7b.json ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
[ -f "$out/bench-decode.jsonl" ] || exit 0
python3 - "$out/bench-decode.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'case':6} {'impl':17} {'prefill s':>9} {'prefill tok/s':>13} {'decode tok/s':>12} {'ms/token':>9} {'e2e tok/s':>9} {'peak GiB':>8} {'replays':>7}")
ids = {}
for r in rows:
    impl = "swift.cpp" if r.get("impl") == "swift.cpp" else "peer"
    if impl == "swift.cpp" and "cuda_graphs" in r:
        impl += " (graphs)" if r["cuda_graphs"] else " (eager)"
    if r.get("error"):
        print(f"{r['case']:6} {impl:17} failed"); continue
    print(f"{r['case']:6} {impl:17} {r['prefill_s']:>9.4f} {r['prefill_tokens_per_s']:>13.0f} {r['decode_tokens_per_s']:>12.1f} "
          f"{r['ms_per_token']:>9.3f} {r['e2e_tokens_per_s']:>9.1f} {r['peak_allocated_gib']:>8.2f} {r.get('graph_replays', ''):>7}")
    if r.get("impl") == "swift.cpp" and "first_ids" in r:
        ids.setdefault(r["case"], set()).add(tuple(r["first_ids"]))
for case, seen in ids.items():
    if len(seen) > 1:
        print(f"{case}: graph and eager decoding picked different ids {sorted(seen)} (they must be bit-identical)")
PY
