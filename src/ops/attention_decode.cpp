// ops/attention_decode.cpp — argument checks of attention_decode and its dispatch on the tensors' device: the CPU
// kernel (ops/cpu/attention_decode.cpp) or the CUDA kernel (ops/cuda/attention_decode.cu via cuda_ops.h).
//
// Invariants: checks run before any data is touched; CUDA tensors run on cuda::stream(device) with the device made
// current, bracketed by stream synchronisations under SWIFT_PROFILE=1 (as ops/dispatch.cpp does for every op);
// a build without CUDA refuses CUDA tensors by name.
#include "ops/attention_decode.h"

#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace swift::ops {

namespace detail {

Device check_attention_decode(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t start,
                              int64_t window, const Tensor& out) {
  require_defined(op, "q", q);
  require_defined(op, "k_cache", k);
  require_defined(op, "v_cache", v);
  require_defined(op, "out", out);
  require_rank(op, "q", q, 3, "(Tq, Hq, D)");
  require_rank(op, "k_cache", k, 3, "(Tk, Hkv, D)");
  require_rank(op, "v_cache", v, 3, "(Tk, Hkv, D)");
  require_rank(op, "out", out, 3, "(Tq, Hq, D)");
  require_activation(op, "q", q);
  require_activation(op, "k_cache", k, "q", &q);
  require_activation(op, "v_cache", v, "q", &q);
  require_activation(op, "out", out, "q", &q);
  SWIFT_CHECK(k.shape() == v.shape(), "{}: k_cache {} and v_cache {} differ", op, k.str(), v.str());
  SWIFT_CHECK(q.shape() == out.shape(), "{}: q {} and out {} differ", op, q.str(), out.str());
  SWIFT_CHECK(q.size(2) == k.size(2), "{}: q {} and k_cache {} disagree on D", op, q.str(), k.str());
  SWIFT_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "{}: Hq = {} is not a multiple of Hkv = {}", op,
              q.size(1), k.size(1));
  SWIFT_CHECK(start >= 0 && start + q.size(0) <= k.size(0), "{}: queries at [{}, {}) but the cache holds {} rows",
              op, start, start + q.size(0), k.size(0));
  SWIFT_CHECK(window >= 0, "{}: window = {} must be >= 0", op, window);
  for (const Tensor* input : {&q, &k, &v}) {
    SWIFT_CHECK(!overlaps(out, *input), "{}: out {} overlaps an input", op, out.str());
  }
  out.check_writable(op);
  return common_device(op, {&q, &k, &v, &out});
}

}  // namespace detail

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out) {
  const char* op = "attention_decode";
  const Device device = detail::check_attention_decode(op, q, k_cache, v_cache, start, window, out);
  SWIFT_CHECK(std::isfinite(scale), "{}: scale = {} must be finite", op, scale);
  if (device.is_cpu()) {
    cpu::attention_decode(q, k_cache, v_cache, start, scale, window, out);
    return;
  }
#ifdef SWIFT_WITH_CUDA
  if (cudaSetDevice(device.index) != cudaSuccess) fail("op {}: cannot select device {}", op, device.str());
  if (profile::enabled()) {
    cudaStreamSynchronize(cuda::stream(device.index));
    profile::Scope scope(op);
    cuda::attention_decode(q, k_cache, v_cache, start, scale, window, out);
    cudaStreamSynchronize(cuda::stream(device.index));
    return;
  }
  cuda::attention_decode(q, k_cache, v_cache, start, scale, window, out);
#else
  detail::no_cuda_kernel(op);
#endif
}

}  // namespace swift::ops
