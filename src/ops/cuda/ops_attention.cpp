// ops/cuda/ops_attention.cpp — placeholder: every op here refuses CUDA tensors by name until its kernels land.
#include "ops/cuda/cuda_ops.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"  // placeholders below name their arguments unused
#include "ops/op_checks.h"

namespace swift::ops::cuda {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& out, Tensor& lse) {
  detail::no_cuda_kernel("attention");
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq, Tensor& dk, Tensor& dv) {
  detail::no_cuda_kernel("attention_backward");
}

}  // namespace swift::ops::cuda
