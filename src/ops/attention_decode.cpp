// ops/attention_decode.cpp — argument checks of attention_decode and its dispatch on the tensors' device: the CPU
// kernel (ops/cpu/attention_decode.cpp) or the CUDA kernel (ops/cuda/attention_decode.cu via cuda_ops.h).
//
// Invariants: checks run before any data is touched; CUDA tensors run on cuda::stream(device) with the device made
// current, timed as a cuda::DeviceRegion under SWIFT_PROFILE (as ops/dispatch.cpp does for every op);
// a build without CUDA refuses CUDA tensors by name. attention_decode_at and kv_cache_write read their position on the
// host only for CPU tensors (where they check it); on CUDA they enqueue without reading it (graph capture safe) and
// allocate nothing.
#include "ops/attention_decode.h"

#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/profile_events.h"
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

namespace {
#ifdef SWIFT_WITH_CUDA
// Runs `kernel` with the device current, timed under SWIFT_PROFILE (as ops/dispatch.cpp).
template <typename Fn>
void on_cuda(const char* op, Device device, Fn&& kernel) {
  if (cudaSetDevice(device.index) != cudaSuccess) fail("op {}: cannot select device {}", op, device.str());
  if (profile::enabled()) {
    cuda::DeviceRegion region(op, device.index);
    kernel();
    return;
  }
  kernel();
}
#endif

// The (1) I32 position tensor of the replayable ops, on `device`.
void check_position(const char* op, const char* name, const Tensor& t, Device device) {
  detail::require_defined(op, name, t);
  SWIFT_CHECK(t.dtype() == DType::I32 && t.numel() == 1 && t.device() == device,
              "{}: {} {} must be one I32 on {} (the tensors' device)", op, name, t.str(), device.str());
}
}  // namespace

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
  on_cuda(op, device, [&] { cuda::attention_decode(q, k_cache, v_cache, start, scale, window, out); });
#else
  detail::no_cuda_kernel(op);
#endif
}

void attention_decode_at(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& start,
                         int64_t max_keys, float scale, int64_t window, Tensor& out, const Tensor& workspace) {
  const char* op = "attention_decode_at";
  SWIFT_CHECK(q.defined() && max_keys >= q.size(0), "{}: max_keys = {} is below the {} queries", op, max_keys,
              q.defined() ? q.size(0) : 0);
  // The bound stands for the position in the shape checks (queries at [max_keys - Tq, max_keys) fit the cache).
  const Device device = detail::check_attention_decode(op, q, k_cache, v_cache, max_keys - q.size(0), window, out);
  SWIFT_CHECK(std::isfinite(scale), "{}: scale = {} must be finite", op, scale);
  check_position(op, "start", start, device);
  if (workspace.defined()) {
    SWIFT_CHECK(workspace.dtype() == DType::F32 && workspace.device() == device && !detail::overlaps(workspace, out),
                "{}: workspace {} must be F32 on {}, apart from out", op, workspace.str(), device.str());
  }
  if (device.is_cpu()) {
    const int64_t s = start.data<int32_t>()[0];
    SWIFT_CHECK(s >= 0 && s + q.size(0) <= max_keys, "{}: queries at [{}, {}) exceed max_keys = {}", op, s,
                s + q.size(0), max_keys);
    cpu::attention_decode(q, k_cache, v_cache, s, scale, window, out);
    return;
  }
#ifdef SWIFT_WITH_CUDA
  on_cuda(op, device,
          [&] { cuda::attention_decode_at(q, k_cache, v_cache, start, max_keys, scale, window, out, workspace); });
#else
  detail::no_cuda_kernel(op);
#endif
}

int64_t attention_decode_workspace(const Tensor& q, const Tensor& k_cache, int64_t max_keys, int64_t window) {
  const char* op = "attention_decode_workspace";
  detail::require_defined(op, "q", q);
  detail::require_defined(op, "k_cache", k_cache);
  SWIFT_CHECK(max_keys >= q.size(0) && max_keys <= k_cache.size(0), "{}: max_keys = {} outside [{}, {}]", op, max_keys,
              q.size(0), k_cache.size(0));
  if (q.device().is_cpu()) return 0;
#ifdef SWIFT_WITH_CUDA
  return cuda::attention_decode_workspace(q, k_cache, max_keys, window);
#else
  detail::no_cuda_kernel(op);
#endif
}

void kv_cache_write(const Tensor& k_new, const Tensor& v_new, Tensor& k_cache, Tensor& v_cache, const Tensor& row) {
  const char* op = "kv_cache_write";
  detail::require_defined(op, "k_new", k_new);
  detail::require_defined(op, "v_new", v_new);
  detail::require_defined(op, "k_cache", k_cache);
  detail::require_defined(op, "v_cache", v_cache);
  detail::require_rank(op, "k_new", k_new, 3, "(T, Hkv, D)");
  detail::require_rank(op, "k_cache", k_cache, 3, "(Tk, Hkv, D)");
  SWIFT_CHECK(k_new.shape() == v_new.shape() && k_cache.shape() == v_cache.shape() &&
                  k_new.size(1) == k_cache.size(1) && k_new.size(2) == k_cache.size(2),
              "{}: new keys {} / values {} do not fit the caches {} / {}", op, k_new.str(), v_new.str(), k_cache.str(),
              v_cache.str());
  SWIFT_CHECK(k_new.dtype() == k_cache.dtype() && v_new.dtype() == k_cache.dtype() && v_cache.dtype() == k_cache.dtype() &&
                  (k_cache.dtype() == DType::F32 || k_cache.dtype() == DType::BF16 || k_cache.dtype() == DType::F16),
              "{}: keys, values and caches must share one float dtype ({}, {}, {}, {})", op, k_new.str(), v_new.str(),
              k_cache.str(), v_cache.str());
  for (const Tensor* cache : {&k_cache, &v_cache}) {
    SWIFT_CHECK(!detail::overlaps(*cache, k_new) && !detail::overlaps(*cache, v_new), "{}: cache {} overlaps the new rows", op,
                cache->str());
  }
  SWIFT_CHECK(!detail::overlaps(k_cache, v_cache), "{}: k_cache and v_cache overlap", op);
  k_cache.check_writable(op);
  v_cache.check_writable(op);
  const Device device = detail::common_device(op, {&k_new, &v_new, &k_cache, &v_cache});
  check_position(op, "row", row, device);
  if (device.is_cpu()) {
    const int64_t r = row.data<int32_t>()[0], t = k_new.size(0);
    SWIFT_CHECK(r >= 0 && r + t <= k_cache.size(0), "{}: rows [{}, {}) outside the cache of {} rows", op, r, r + t,
                k_cache.size(0));
    k_cache.slice_rows(r, r + t).copy_from(k_new);
    v_cache.slice_rows(r, r + t).copy_from(v_new);
    return;
  }
#ifdef SWIFT_WITH_CUDA
  on_cuda(op, device, [&] { cuda::kv_cache_write(k_new, v_new, k_cache, v_cache, row); });
#else
  detail::no_cuda_kernel(op);
#endif
}

}  // namespace swift::ops
