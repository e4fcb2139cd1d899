#!/usr/bin/env python3
"""make_adamw_fixture.py — dumps torch.optim.AdamW steps and torch.nn.utils.clip_grad_norm_ into
tests/fixtures/adamw_steps.json, the oracle of swift::ops::adamw_step / grad_norm / clip_grad_norm.

Invariants:
  - Every number comes from torch itself on the CPU (foreach=False: the single-tensor loop of
    torch/optim/adam.py that ops.h mirrors operation for operation), single-threaded and seeded.
  - Values are fp32 tensors written as Python floats (exact fp32 values, round-trip exact in JSON).
  - Tensor sizes mix torch's AVX-512 vector path (16 lanes) and its scalar tail: 7, 3x5 = 15 and 40 elements.
  - Case "decay": lr changes every step (a scheduler), weight_decay 0.1, betas (0.9, 0.999), eps 1e-8.
    Case "low_beta1": beta1 = 0.3 (torch's lerp takes its other branch: weight 0.7 >= 0.5), beta2 0.99,
    eps 1e-6, no weight decay. Gradients include zeros and values 100x larger than the rest.
  - clip cases: max_norm below the total norm (grads scaled) and above it (coefficient clamped to 1).

Usage: python3 scripts/golden/make_adamw_fixture.py [out.json]   (needs torch; CPU only, < 1 s)
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "adamw_steps.json")
SHAPES = [[7], [3, 5], [40]]


def flat(t):
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


def make_grads(gen, step):
    grads = []
    for i, shape in enumerate(SHAPES):
        g = torch.randn(shape, generator=gen, dtype=torch.float32) * 1e-2
        g.view(-1)[0] = 0.0                      # a zero gradient
        g.view(-1)[(step + i) % g.numel()] *= 100.0  # an outlier
        grads.append(g)
    return grads


def adamw_case(name, gen, lrs, betas, eps, weight_decay):
    params = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float32)) for s in SHAPES]
    init = [flat(p) for p in params]
    opt = torch.optim.AdamW(params, lr=lrs[0], betas=betas, eps=eps, weight_decay=weight_decay, foreach=False,
                            fused=False)
    steps = []
    for step, lr in enumerate(lrs):
        grads = make_grads(gen, step)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        steps.append({"lr": lr, "grads": [flat(g) for g in grads], "params": [flat(p) for p in params]})
    state = [opt.state[p] for p in params]
    return {"name": name, "shapes": SHAPES, "betas": list(betas), "eps": eps, "weight_decay": weight_decay,
            "init": init, "steps": steps, "exp_avg": [flat(s["exp_avg"]) for s in state],
            "exp_avg_sq": [flat(s["exp_avg_sq"]) for s in state]}


def clip_case(gen, max_norm, scale):
    grads = [torch.randn(s, generator=gen, dtype=torch.float32) * scale for s in SHAPES]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return {"max_norm": max_norm, "grads": [flat(g) for g in grads], "total_norm": float(total),
            "clipped": [flat(p.grad) for p in params]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    fixture = {
        "generator": f"scripts/golden/make_adamw_fixture.py, torch {torch.__version__}",
        "adamw": [
            adamw_case("decay", gen, [1e-3, 8e-4, 5e-4, 2e-4, 1e-4], (0.9, 0.999), 1e-8, 0.1),
            adamw_case("low_beta1", gen, [1e-2] * 5, (0.3, 0.99), 1e-6, 0.0),
        ],
        "clip": [clip_case(gen, 1.0, 1.0), clip_case(gen, 1.0, 0.01)],
    }
    with open(out, "w") as f:
        json.dump(fixture, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
