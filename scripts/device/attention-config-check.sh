source scripts/device/env.sh >/dev/null 2>&1
build_gpu cfg bench_attention >/dev/null 2>&1
for shape in "--seqs 8 --len 2048 --hq 14 --hkv 2 --d 64" "--seqs 4 --len 2048 --hq 28 --hkv 4 --d 128"; do
for c in 0 1 2; do
  SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=8192 SWIFT_CUDNN_ATTENTION_CONFIG=$c build-gpu/bench/bench_attention $shape --reps 10 2>&1 | grep -E "^(forward|backward)|^\{" | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        j = json.loads(l); print('config $c', {k:(j[k]['fwd_ms'], j[k]['bwd_ms'], j[k].get('max_diff_vs_flash2',{}).get('dq')) for k in ('cudnn','cudnn_nondeterministic_bwd') if k in j})
    else: print('  ', l.strip())"
done
done
