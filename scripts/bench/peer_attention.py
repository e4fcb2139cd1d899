#!/usr/bin/env python3
"""The peer's attention op timed on the shapes of bench/bench_attention.cpp: torch's scaled_dot_product_attention
(bf16, causal, grouped-query heads through enable_gqa) forward and backward, per backend torch offers (flash, cuDNN,
memory-efficient; the default choice first). Development tool for docs/PERFORMANCE.md, never run by the product.

  python3 scripts/bench/peer_attention.py [--seqs 8] [--len 2048] [--hq 14] [--hkv 2] [--d 64] [--reps 20]

Prints one JSON line: per backend the median ms and TFLOP/s of forward and of backward (the backward timed alone:
autograd.grad on a kept graph), with bench_attention's FLOP count: forward 4 * D * P, backward 10 * D * P, where
P = seqs * len * (len + 1) / 2 * Hq (causal pairs). A backend torch refuses for the shape reports its error.
Each sequence is its own batch row (torch's sdpa has no packed varlen input; bench_attention packs them, the same
work for full-length rows).
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms  # a sibling module: the script's directory is on sys.path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seqs", type=int, default=8)
    p.add_argument("--len", type=int, default=2048)
    p.add_argument("--hq", type=int, default=14)
    p.add_argument("--hkv", type=int, default=2)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(h):
        return torch.rand(args.seqs, h, args.len, args.d, device="cuda", dtype=torch.bfloat16, generator=gen) - 0.5

    q, k, v = rand(args.hq).requires_grad_(), rand(args.hkv).requires_grad_(), rand(args.hkv).requires_grad_()
    dout = rand(args.hq)
    pairs = args.seqs * args.len * (args.len + 1) // 2 * args.hq
    fwd_flops, bwd_flops = 4 * args.d * pairs, 10 * args.d * pairs
    result = {"impl": f"torch {torch.__version__} sdpa", "shape": vars(args), "paths": {}}
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for name, backend in backends:
        def attend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=args.hq != args.hkv)
        try:
            if backend is None:
                fwd = median_ms(lambda: attend(), args.reps)
                out = attend()
                bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.reps)
            else:
                with sdpa_kernel([backend]):
                    fwd = median_ms(lambda: attend(), args.reps)
                    out = attend()
                    bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.reps)
            result["paths"][name] = {"fwd_ms": round(fwd, 4), "fwd_tflops": round(fwd_flops / fwd / 1e9, 1),
                                     "bwd_ms": round(bwd, 4), "bwd_tflops": round(bwd_flops / bwd / 1e9, 1)}
        except Exception as e:  # noqa: BLE001 - a refused backend is a result
            result["paths"][name] = {"error": str(e).splitlines()[0][:200]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
