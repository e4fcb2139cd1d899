#!/usr/bin/env python3
# scripts/bench/gemm_fusion.py — development measurement (GPU machine): what fusing the q/k/v products into one
# (N = Hq*D + 2*Hkv*D) and gate/up into one (N = 2F) would save, with torch's cuBLAS bf16 GEMMs on the training
# step's shapes: the forward product, the input gradient (separate products summed vs one with K = the fused N)
# and the weight gradient. Prints ms per layer for each, median of 20 after 5 warm-ups. Not a test.
import argparse
import torch

from cuda_timing import median_ms  # a sibling module: the script's directory is on sys.path

SHAPES = {  # tokens, C, F, q width, k/v width
    "qwen2.5-0.5b": (16384, 896, 4864, 896, 128),
    "qwen2.5-7b": (8192, 3584, 18944, 3584, 512),
}


def group(name, t, c, widths):
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(t, c, device=dev, dtype=dt)
    ws = [torch.randn(n, c, device=dev, dtype=dt) * 0.02 for n in widths]
    dys = [torch.randn(t, n, device=dev, dtype=dt) for n in widths]
    w_all = torch.cat(ws, 0)
    dy_all = torch.cat(dys, 1)
    outs = [torch.empty(t, n, device=dev, dtype=dt) for n in widths]
    out_all = torch.empty(t, sum(widths), device=dev, dtype=dt)
    dx = torch.empty(t, c, device=dev, dtype=dt)
    dws = [torch.empty(n, c, device=dev, dtype=torch.float32) for n in widths]
    dw_all = torch.empty(sum(widths), c, device=dev, dtype=torch.float32)

    def fwd_sep():
        for w, o in zip(ws, outs):
            torch.matmul(x, w.t(), out=o)

    def fwd_fused():
        torch.matmul(x, w_all.t(), out=out_all)

    def dx_sep():
        torch.matmul(dys[0], ws[0], out=dx)
        for dy, w in zip(dys[1:], ws[1:]):
            dx.addmm_(dy, w)

    def dx_fused():
        torch.matmul(dy_all, w_all, out=dx)

    def dw_sep():
        for dy, dw in zip(dys, dws):
            torch.mm(dy.t(), x, out_dtype=torch.float32, out=dw)

    def dw_fused():
        torch.mm(dy_all.t(), x, out_dtype=torch.float32, out=dw_all)

    flops = 2 * t * c * sum(widths)
    print(f"{name}: T={t} C={c} N={widths}")
    for label, sep, fused in (("forward", fwd_sep, fwd_fused), ("dx", dx_sep, dx_fused), ("dw", dw_sep, dw_fused)):
        try:
            a, b = median_ms(sep, 20, 5), median_ms(fused, 20, 5)
            print(f"  {label:8s} separate {a:7.3f} ms ({flops / a / 1e9:6.1f} TFLOP/s)  fused {b:7.3f} ms "
                  f"({flops / b / 1e9:6.1f} TFLOP/s)  saved {a - b:6.3f} ms per layer")
        except Exception as e:  # noqa: BLE001 (out_dtype needs a recent torch)
            print(f"  {label:8s} failed: {e}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(SHAPES), action="append")
    args = p.parse_args()
    for m in args.model or sorted(SHAPES):
        t, c, f, q, kv = SHAPES[m]
        group(f"{m} q/k/v", t, c, [q, kv, kv])
        group(f"{m} gate/up", t, c, [f, f])


if __name__ == "__main__":
    main()
