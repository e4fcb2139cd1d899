#!/usr/bin/env python3
"""torch's bf16 products on the linears of a Qwen2.5-0.5B full fine-tuning step (development only): the peer's side
of tests/gpu/test_cuda_matmul.cpp's BenchQwen05bLinears (same shapes, 16,384 tokens; forward F.linear with the q / k
/ v bias, dx = dy @ w, dw = dy^T @ x in bf16 as autograd forms it for bf16 parameters). Median of 5 timed calls after
2 warm-ups, CUDA events. Prints one row per linear and the per-layer total.

  python3 scripts/bench/peer_gemm_shapes.py
"""
import torch
import torch.nn.functional as F

from cuda_timing import median_ms  # a sibling module: the script's directory is on sys.path


def main():
    n = 16384
    shapes = [("q", 896, 896, True), ("k", 896, 128, True), ("v", 896, 128, True), ("o", 896, 896, False),
              ("gate", 896, 4864, False), ("up", 896, 4864, False), ("down", 4864, 896, False)]
    dev = torch.device("cuda")
    print("%-5s %10s %8s %10s %8s %10s %8s" % ("linear", "fwd ms", "TFLOP/s", "dx ms", "TFLOP/s", "dw ms", "TFLOP/s"))
    total = 0.0
    for name, fin, fout, bias in shapes:
        g = torch.Generator(device=dev).manual_seed(1)
        x = (torch.rand(n, fin, device=dev, generator=g) - 0.5).to(torch.bfloat16) * 0.1
        w = (torch.rand(fout, fin, device=dev, generator=g) - 0.5).to(torch.bfloat16) * 0.1
        b = (torch.rand(fout, device=dev, generator=g) - 0.5).to(torch.bfloat16) * 0.1 if bias else None
        dy = (torch.rand(n, fout, device=dev, generator=g) - 0.5).to(torch.bfloat16) * 0.1
        flop = 2.0 * n * fin * fout
        fwd = median_ms(lambda: F.linear(x, w, b), 5, 2)
        bdx = median_ms(lambda: dy @ w, 5, 2)
        bdw = median_ms(lambda: dy.t() @ x, 5, 2)
        total += fwd + bdx + bdw
        print("%-5s %10.4f %8.0f %10.4f %8.0f %10.4f %8.0f" % (name, fwd, flop / fwd / 1e9, bdx, flop / bdx / 1e9,
                                                             bdw, flop / bdw / 1e9))
    print("per layer %.3f ms, x 24 layers %.1f ms" % (total, 24 * total))


if __name__ == "__main__":
    main()
