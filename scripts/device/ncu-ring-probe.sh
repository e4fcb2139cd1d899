#!/usr/bin/env bash
# On the GPU machine (session 16): what bounds the ring passes (lora_ring.cu). Torch's device-to-device copy of 1 GiB
# (the read + write bandwidth this H200 reaches), then Nsight Compute counters of the 7B step's swiglu_lora
# (lora_swiglu_ring_kernel) and the backward's dx term (lora_rank_ring_kernel after the forward's 140 B products and
# residual adds), one launch each: speed of light, occupancy, warp stall reasons, memory workload
# ($OUT/ncu-ring-swiglu.txt, $OUT/ncu-ring-dx.txt). Carry .device-deps and .device-prebuilt (prebuild.sh
# bench_train_step).
source "$(dirname "$0")/env.sh"
build_gpu ncu bench_train_step
python3 - <<'PY' || true
import torch
a = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True); e0.record()
for _ in range(20): b.copy_(a)
e1.record(); torch.cuda.synchronize(); ms = e0.elapsed_time(e1) / 20
print("torch copy 1 GiB: %.3f ms, %.0f GB/s (read + write)" % (ms, 2 * a.numel() * 2 / ms / 1e6))
PY
bin=/usr/local/cuda/bin
sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats"
args="--config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4 --steps 1 --warmup 0"
run_ncu() {  # name kernel-regex launches-to-skip
  timeout 200 "$bin/ncu" -k "regex:$2" --launch-skip "$3" --launch-count 1 $sections \
    build-gpu/bench/bench_train_step $args > "${OUT:-/tmp}/ncu-$1.txt" 2>&1 || true
  grep -E "==ERROR==" "${OUT:-/tmp}/ncu-$1.txt" | head -3 || true
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occ|Registers Per|Issued Warp|Stall (Long|Short|Wait|No Inst|Math|LG|MIO|Barrier|Not Sel|Drain)|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes" \
    "${OUT:-/tmp}/ncu-$1.txt" | head -30 || true
}
echo "== swiglu_lora (ring)"; run_ncu ring-swiglu "lora_swiglu_ring_kernel" 3
echo "== dx term (ring)"; run_ncu ring-dx "lora_rank_ring_kernel" 140
