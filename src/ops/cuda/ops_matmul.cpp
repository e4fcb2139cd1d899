// ops/cuda/ops_matmul.cpp — placeholder: every op here refuses CUDA tensors by name until its kernels land.
#include "ops/cuda/cuda_ops.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"  // placeholders below name their arguments unused
#include "ops/op_checks.h"

namespace swift::ops::cuda {

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  detail::no_cuda_kernel("linear");
}

void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  detail::no_cuda_kernel("gemm");
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias, bool accumulate_dx) {
  detail::no_cuda_kernel("linear_backward");
}

void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale, const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate) {
  detail::no_cuda_kernel("lora_linear");
}

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, bool accumulate_dx) {
  detail::no_cuda_kernel("lora_linear_backward");
}

CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale, Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  detail::no_cuda_kernel("cross_entropy");
}

void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp, const CrossEntropyOptions& options) {
  detail::no_cuda_kernel("token_logprobs");
}

void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp, Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  detail::no_cuda_kernel("token_logprobs_backward");
}

}  // namespace swift::ops::cuda
