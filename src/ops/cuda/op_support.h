// ops/cuda/op_support.h — host-side helpers shared by the CUDA op wrappers (ops_matmul.cpp, ops_dora.cpp,
// ops_cross_entropy.cpp): kernel dtype codes, launch checks, workspaces, dtype conversion into workspace, dropout
// parameters, and LoRA's two rank-r products against the output gradient.
//
// Invariants: everything runs on cuda::stream(device); workspaces are Tensor::empty of at least one element
// (Workspace category, stream-ordered reuse by the caching allocator); launch failures throw naming the op.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda::support {

inline int code(DType d) { return static_cast<int>(d); }  // kernels' dtype codes: F32 0, BF16 1, F16 2
inline int code(const Tensor& t) { return code(t.dtype()); }
inline int64_t esize(DType d) { return d == DType::F32 ? 4 : 2; }
inline int dev(const Tensor& t) { return t.device().index; }

inline void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}

inline const void* offset(const void* p, int64_t elems, DType d) {
  return static_cast<const char*>(p) + elems * esize(d);
}
inline void* offset(void* p, int64_t elems, DType d) { return static_cast<char*>(p) + elems * esize(d); }

// At least one element, so that raw() is a real device pointer even for empty shapes.
inline Tensor workspace(int64_t numel, DType dtype, int device) {
  return Tensor::empty({std::max<int64_t>(numel, 1)}, dtype, Device::cuda(device), MemoryCategory::Workspace);
}

// Converts `n` elements into `dst` (dtype conversion on the device's stream).
inline void convert(const char* op, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    int device) {
  check_launch(op, launch_cast(src, code(src_dtype), dst, code(dst_dtype), n, stream(device)));
}

// A copy of `t` in `dtype` with t's shape (the same tensor when it already is).
inline Tensor as_dtype(const char* op, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  if (t.numel() == 0) return Tensor::empty(t.shape(), dtype, Device::cuda(dev(t)), MemoryCategory::Workspace);
  Tensor out = workspace(t.numel(), dtype, dev(t)).view(t.shape());
  convert(op, t.raw(), t.dtype(), out.raw(), dtype, t.numel(), dev(t));
  return out;
}

struct DropoutParams {
  uint64_t seed = 0;
  uint32_t threshold = 0;  // 0: keep everything (no random numbers)
  float keep_scale = 1.0f;
  DropoutMap map{};        // the operand's place in the full tensor (ops.h Dropout::map); identity when p = 0
};
inline DropoutParams params_of(const Dropout& d) {
  if (d.p == 0.0f) return {};
  return {d.seed, dropout_threshold(d.p), 1.0f / (1.0f - d.p), d.map};
}

// db (m, r) F32 += scale * dy^T xa: dy (n, m) row-major in `act`, xa (n, r) F32 rounded to `act` (r columns: tiny).
inline void add_lora_db(const char* op, int device, const void* dy, int64_t n, int64_t m, const Tensor& xa, DType act,
                        float scale, Tensor& db) {
  const Tensor xa_c = as_dtype(op, xa, act);
  MatmulArgs args;
  args.trans_a = true;
  args.n = m;
  args.m = xa.size(1);
  args.k = n;
  args.a = dy;
  args.lda = m;
  args.b = xa_c.raw();
  args.ldb = xa.size(1);
  args.ab_dtype = code(act);
  args.d = db.raw();
  args.ldd = xa.size(1);
  args.d_dtype = code(DType::F32);
  args.alpha = scale;
  args.beta = 1.0f;
  matmul(op, device, args);
}

// g (n, r) F32 = dy b: dy (n, m) row-major in `act`, b (m, r) F32 rounded to `act`.
inline void lora_dy_b(const char* op, int device, const void* dy, int64_t n, int64_t m, const Tensor& b, DType act,
                      Tensor& g) {
  const Tensor b_c = as_dtype(op, b, act);
  MatmulArgs args;
  args.n = n;
  args.m = b.size(1);
  args.k = m;
  args.a = dy;
  args.lda = m;
  args.b = b_c.raw();
  args.ldb = b.size(1);
  args.ab_dtype = code(act);
  args.d = g.raw();
  args.ldd = b.size(1);
  args.d_dtype = code(DType::F32);
  matmul(op, device, args);
}

}  // namespace swift::ops::cuda::support
