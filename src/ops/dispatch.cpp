// ops/dispatch.cpp — the public ops:: entry points: check arguments, then run the kernel of the tensors' device.
//
// Invariants:
//  - Every op validates its arguments with detail::check_<op> before touching data, so kernels may assume
//    consistent shapes, dtypes and one device.
//  - CPU tensors run the fast kernels of ops/cpu; CUDA tensors run ops/cuda kernels where one exists (cast) and
//    otherwise throw "op <name>: no CUDA kernel yet" (one case per op, no fallback to the CPU by accident).
//  - CUDA kernels are launched on the default stream of the tensors' device, so they are ordered with the
//    backend's synchronous copies.
#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"
#include "ops/ops.h"

#include <initializer_list>

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/kernels.cuh"
#endif

namespace swift::ops {

namespace {
// Every output must be writable memory (not a view of a mapped weight file).
void require_writable(const char* op, std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* t : outputs) {
    if (t->defined()) t->check_writable(op);
  }
}

// Runs `cpu_kernel` for CPU tensors; CUDA has no kernels yet.
template <typename Fn>
void dispatch(const char* op, Device device, Fn&& cpu_kernel) {
  switch (device.type) {
    case DeviceType::CPU: cpu_kernel(); return;
    case DeviceType::CUDA: detail::no_cuda_kernel(op);
  }
  fail("op {}: unknown device {}", op, device.str());
}

#ifdef SWIFT_WITH_CUDA
void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}
#endif
}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  const Device device = detail::check_cast(src, dst);
  require_writable("cast", {&dst});
#ifdef SWIFT_WITH_CUDA
  if (device.is_cuda()) {
    check_launch("cast", cudaSetDevice(device.index));
    // dtype codes of kernels.cuh are DType's values: F32 = 0, BF16 = 1, F16 = 2.
    check_launch("cast", cuda::launch_cast(src.raw(), static_cast<int>(src.dtype()), dst.raw(),
                                           static_cast<int>(dst.dtype()), src.numel(), nullptr));
    return;
  }
#endif
  dispatch("cast", device, [&] { cpu::cast(src, dst); });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  require_writable("add", {&out});
  dispatch("add", detail::check_add(a, b, out), [&] { cpu::add(a, b, out); });
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  require_writable("swiglu", {&out});
  dispatch("swiglu", detail::check_swiglu(gate, up, out), [&] { cpu::swiglu(gate, up, out); });
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  require_writable("embedding", {&out});
  dispatch("embedding", detail::check_embedding(table, ids, out), [&] { cpu::embedding(table, ids, out); });
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  require_writable("linear", {&y});
  dispatch("linear", detail::check_linear(x, w, bias, y), [&] { cpu::linear(x, w, bias, y, accumulate); });
}

void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  require_writable("gemm", {&c});
  dispatch("gemm", detail::check_gemm(trans_a, trans_b, a, b, c),
           [&] { cpu::gemm(trans_a, trans_b, alpha, a, b, beta, c); });
}

void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  require_writable("rmsnorm", {&y, &rstd});
  dispatch("rmsnorm", detail::check_rmsnorm(x, weight, eps, y, rstd), [&] { cpu::rmsnorm(x, weight, eps, y, rstd); });
}

void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  require_writable("rope", {&x});
  dispatch("rope", detail::check_rope(x, positions, freqs), [&] { cpu::rope(x, positions, freqs); });
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse) {
  require_writable("attention", {&out, &lse});
  dispatch("attention", detail::check_attention(q, k, v, cu_seqlens, scale, window, out, lse),
           [&] { cpu::attention(q, k, v, cu_seqlens, scale, window, out, lse); });
}

}  // namespace swift::ops
