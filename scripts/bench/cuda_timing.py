# scripts/bench/cuda_timing.py — the one timing helper of the torch-side bench scripts (peer_attention.py,
# peer_gemm_shapes.py, gemm_fusion.py): median milliseconds of a CUDA callable between two CUDA events, after warm-up
# runs. Development only (GPU machine), never at run time.
import torch


def median_ms(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]
