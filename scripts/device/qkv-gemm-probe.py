# Are a 7B layer's k and v products slow next to q's? Times, with torch (cuBLAS), the frozen products of q, k, v one
# by one against one packed product, forward (x w^T) and input gradient (dy w, summed into one dx), BF16, random data.
# A probe for issue 5's packed q/k/v question, not a benchmark of ours: python3 scripts/device/qkv-gemm-probe.py
import torch

torch.manual_seed(0)
T, C, NQ, NKV = 8192, 3584, 3584, 512
dev, dt = "cuda", torch.bfloat16
x = torch.randn(T, C, device=dev, dtype=dt)
wq, wk, wv = (torch.randn(n, C, device=dev, dtype=dt) * 0.02 for n in (NQ, NKV, NKV))
wqkv = torch.cat([wq, wk, wv])
dq, dk, dv = (torch.randn(T, n, device=dev, dtype=dt) for n in (NQ, NKV, NKV))
dqkv = torch.cat([dq, dk, dv], dim=1)
dx = torch.empty(T, C, device=dev, dtype=dt)


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps


def flops(m, n, k):
    return 2.0 * m * n * k


def report(name, ms, fl):
    print(f"{name:38s} {ms * 1e3:8.1f} us  {fl / ms / 1e9:6.1f} TFLOP/s")


report("forward q (T x 3584 x 3584)", timed(lambda: torch.mm(x, wq.t())), flops(T, NQ, C))
report("forward k (T x 512 x 3584)", timed(lambda: torch.mm(x, wk.t())), flops(T, NKV, C))
report("forward q, k, v one by one", timed(lambda: (torch.mm(x, wq.t()), torch.mm(x, wk.t()), torch.mm(x, wv.t()))),
       flops(T, NQ + 2 * NKV, C))
report("forward packed (T x 4608 x 3584)", timed(lambda: torch.mm(x, wqkv.t())), flops(T, NQ + 2 * NKV, C))
report("dx of q (T x 3584 x 3584)", timed(lambda: torch.mm(dq, wq, out=dx)), flops(T, C, NQ))
report("dx of k, accumulating (K = 512)", timed(lambda: torch.addmm(dx, dk, wk, out=dx)), flops(T, C, NKV))


def dx_one_by_one():
    torch.mm(dq, wq, out=dx)
    torch.addmm(dx, dk, wk, out=dx)
    torch.addmm(dx, dv, wv, out=dx)


report("dx q, k, v one by one (accumulating)", timed(dx_one_by_one), flops(T, C, NQ + 2 * NKV))
report("dx packed (K = 4608)", timed(lambda: torch.mm(dqkv, wqkv, out=dx)), flops(T, C, NQ + 2 * NKV))
