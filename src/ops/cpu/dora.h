// ops/cpu/dora.h — the fast CPU DoRA kernels (namespace swift::ops::cpu), same contracts as ops.h. Internal to
// src/ops: callers go through ops.h (dispatch.cpp checks the arguments first).
#pragma once

#include "ops/ops.h"

namespace swift::ops::cpu {

void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares);
void dora_norm_from_squares(Tensor& norm);
void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate);
void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx);

}  // namespace swift::ops::cpu
