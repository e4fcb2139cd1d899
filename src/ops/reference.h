// ops/reference.h — plain CPU references of every op in ops/ops.h: naive loops, fp32 inputs converted
// element by element, accumulation in double. Same signatures and shape rules as ops.h. They are the oracle
// of the op tests and stay callable after faster kernels exist; never used on a hot path.
#pragma once

#include "ops/ops.h"

namespace swift::ops::ref {

void cast(const Tensor& src, Tensor& dst);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate = false);
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse);

}  // namespace swift::ops::ref
