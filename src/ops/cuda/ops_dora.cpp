// ops/cuda/ops_dora.cpp — DoRA linear on CUDA (ops.h: dora_weight_norm, dora_linear, dora_linear_backward): the
// matrix products through cuda::matmul (blas.h, cuBLASLt), the rest in the small kernels of dora.cu
// (kernels_dora.cuh) and the LoRA helpers of matmul.cu (kernels_matmul.cuh). Same formulas as ops/cpu/dora.cpp.
//
// Invariants:
//  - Arguments were validated by ops/op_checks (shapes, one device, dtypes): activations x, y, dy, dx share one
//    dtype (F32 or BF16); w is F32/BF16/F16; bias any float dtype; a, b, magnitude, weight_norm, xa, h, da, db,
//    dmagnitude are F32. h stays F32 (as the CPU kernel): it is g-scaled into y and read by the magnitude gradient.
//  - Products: A and B share a dtype. w is converted to the activation dtype in chunks of at most kChunkBytes when
//    the dtypes differ (as ops_matmul.cpp's linear). Products with the F32 factors a, b (xa, gb, gb a, h's LoRA
//    term) run in fp32 (F32 x F32, no TF32), except where a BF16 activation operand (dh) meets b or xa: those are
//    rounded to bf16 (r columns), as lora_linear_backward does. dh = g dy and (g - 1) dy are stored in the
//    activation dtype (one rounding for BF16).
//  - Dropout p > 0: xd = dropout(x) is materialised once in the activation dtype (ops::dropout's mask) for the
//    products with w; xa and da use the fp32 dropout(x) of launch_dropout_rows_to_f32 in row chunks (same mask);
//    dx's dropout term goes through launch_lora_dx_add. p = 0 uses x itself and draws no random numbers.
//  - The weight norm: (b a) in fp32 row chunks (workspace at most kChunkBytes), then per row w + scale (b a) in
//    fp32, squared and summed in fp64 (dora.cu). It is a constant of the backward.
//  - Deterministic: cuBLASLt products with fixed plans, kernels without atomics (the magnitude gradient sums fixed
//    row chunks in fp64 in chunk order).
//  - Everything runs on cuda::stream(device); workspaces are Tensor::empty (Workspace category) from the caching
//    allocator, released after the enqueue (stream-ordered reuse is safe). Launch failures throw naming the op.
#include "ops/cuda/cuda_ops.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/kernels.cuh"
#include "ops/cuda/kernels_dora.cuh"
#include "ops/cuda/kernels_elementwise.cuh"
#include "ops/cuda/kernels_matmul.cuh"
#include "ops/cuda/op_support.h"
#include "ops/philox.h"

namespace swift::ops::cuda {

using namespace support;

namespace {

constexpr int64_t kChunkBytes = int64_t{64} << 20;  // weight conversion / F32 row chunks

// Rows per F32 (rows, k) chunk.
int64_t chunk_rows(int64_t n, int64_t k) {
  return std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(k * 4, 1), 1, std::max<int64_t>(n, 1));
}

// d (n, m; row stride ldd, d_dtype) = alpha * a (n, k; act) w^T + beta * d, w (m, k) of any float dtype: converted
// to act in row chunks when it differs (each chunk fills a column slice of d).
void product_wt(const char* op, int device, const void* a, DType act, int64_t n, int64_t k, const Tensor& w, void* d,
                DType d_dtype, int64_t ldd, float alpha, float beta) {
  const int64_t m = w.size(0);
  MatmulArgs args;
  args.trans_b = true;
  args.n = n;
  args.k = k;
  args.a = a;
  args.lda = k;
  args.ldb = k;
  args.ab_dtype = code(act);
  args.d_dtype = code(d_dtype);
  args.ldd = ldd;
  args.alpha = alpha;
  args.beta = beta;
  if (w.dtype() == act || k == 0) {
    args.m = m;
    args.b = w.raw();
    args.d = d;
    matmul(op, device, args);
    return;
  }
  const int64_t rows = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(k * esize(act), 1), 1, std::max<int64_t>(m, 1));
  Tensor ws = workspace(rows * k, act, device);
  for (int64_t m0 = 0; m0 < m; m0 += rows) {
    const int64_t mc = std::min(rows, m - m0);
    convert(op, offset(w.raw(), m0 * k, w.dtype()), w.dtype(), ws.raw(), act, mc * k, device);
    args.m = mc;
    args.b = ws.raw();
    args.d = offset(d, m0, d_dtype);
    matmul(op, device, args);
  }
}

// d (n, k; row stride k, d_dtype) = a (n, m; act) w + beta * d, w (m, k) of any float dtype: converted to act in
// chunks over the inner dimension m when it differs (the chunks' products add up in order).
void product_w(const char* op, int device, const void* a, DType act, int64_t n, int64_t m, const Tensor& w, void* d,
               DType d_dtype, float beta) {
  const int64_t k = w.size(1);
  MatmulArgs args;
  args.n = n;
  args.m = k;
  args.lda = m;
  args.ldb = k;
  args.ab_dtype = code(act);
  args.d = d;
  args.d_dtype = code(d_dtype);
  args.ldd = k;
  args.beta = beta;
  if (w.dtype() == act || m == 0) {
    args.k = m;
    args.a = a;
    args.b = w.raw();
    matmul(op, device, args);
    return;
  }
  const int64_t rows = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(k * esize(act), 1), 1, m);
  Tensor ws = workspace(rows * k, act, device);
  for (int64_t m0 = 0; m0 < m; m0 += rows) {
    const int64_t mc = std::min(rows, m - m0);
    convert(op, offset(w.raw(), m0 * k, w.dtype()), w.dtype(), ws.raw(), act, mc * k, device);
    args.k = mc;
    args.a = offset(a, m0, act);
    args.b = ws.raw();
    args.beta = m0 == 0 ? beta : 1.0f;
    matmul(op, device, args);
  }
}

// F32 d (n, m; ldd) = alpha * a (n, k; lda) b (k, m; ldb) [b^T when trans_b] + beta * d, every operand F32.
void product_f32(const char* op, int device, bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k,
                 const void* a, int64_t lda, const void* b, int64_t ldb, void* d, int64_t ldd, float alpha,
                 float beta) {
  MatmulArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.n = n;
  args.m = m;
  args.k = k;
  args.a = a;
  args.lda = lda;
  args.b = b;
  args.ldb = ldb;
  args.d = d;
  args.ldd = ldd;
  args.alpha = alpha;
  args.beta = beta;
  matmul(op, device, args);
}

}  // namespace

void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares) {
  const char* op = "dora_weight_norm";
  const int device = dev(w);
  const int64_t m = w.size(0), k = w.size(1), r = a.size(0);
  if (m == 0) return;
  cudaStream_t s = stream(device);
  const bool lora = r > 0 && k > 0;
  const int64_t rows = chunk_rows(m, k);
  Tensor ba = lora ? workspace(rows * k, DType::F32, device) : Tensor();
  for (int64_t m0 = 0; m0 < m; m0 += rows) {
    const int64_t mc = std::min(rows, m - m0);
    if (lora) {  // ba (mc, k) = b[m0:m0+mc] (mc, r) a (r, k), fp32
      product_f32(op, device, false, false, mc, k, r, offset(b.raw(), m0 * r, DType::F32), r, a.raw(), k, ba.raw(), k,
                  1.0f, 0.0f);
    }
    check_launch(op, launch_dora_row_norm(offset(w.raw(), m0 * k, w.dtype()), code(w.dtype()),
                                          lora ? ba.data<float>() : nullptr, mc, k, scale, squares,
                                          norm.data<float>() + m0, s));
  }
}

void dora_norm_from_squares(Tensor& norm) {
  if (norm.numel() == 0) return;
  check_launch("dora_norm_from_squares",
               launch_dora_sqrt(norm.data<float>(), norm.numel(), stream(dev(norm))));
}

void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate) {
  const char* op = "dora_linear";
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  const DType act = x.dtype();
  if (n == 0) return;
  cudaStream_t s = stream(device);
  const bool dropped = dropout.p != 0.0f;
  const DropoutParams d = params_of(dropout);

  // xd = dropout(x) in the activation dtype (x itself when p = 0).
  Tensor xd_holder;
  const void* xd = x.raw();
  if (dropped) {
    xd_holder = workspace(n * k, act, device);
    check_launch(op, launch_dropout(x.raw(), xd_holder.raw(), code(act), n * k, k, d.seed, d.threshold, d.keep_scale,
                                    d.map, s));
    xd = xd_holder.raw();
  }
  // h (n, m) F32 = xd w^T.
  product_wt(op, device, xd, act, n, k, w, h.raw(), DType::F32, m, 1.0f, 0.0f);
  // p > 0: t (n, m) F32 = x w^T - xd w^T (h copied, then the product with beta = -1).
  Tensor t;
  if (dropped && m > 0) {
    t = workspace(n * m, DType::F32, device);
    const cudaError_t st =
        cudaMemcpyAsync(t.raw(), h.raw(), static_cast<size_t>(n * m) * sizeof(float), cudaMemcpyDeviceToDevice, s);
    if (st != cudaSuccess) fail("op {}: cudaMemcpyAsync failed: {}", op, cudaGetErrorString(st));
    product_wt(op, device, x.raw(), act, n, k, w, t.raw(), DType::F32, m, 1.0f, -1.0f);
  }
  if (r > 0) {
    // xa (n, r) = dropout(x) a^T in fp32: F32 activations use xd directly, BF16 ones an exact fp32 dropout(x).
    if (act == DType::F32) {
      product_f32(op, device, false, true, n, r, k, xd, k, a.raw(), k, xa.raw(), r, 1.0f, 0.0f);
    } else {
      const int64_t rows = chunk_rows(n, k);
      Tensor xd32 = workspace(rows * k, DType::F32, device);
      for (int64_t n0 = 0; n0 < n; n0 += rows) {
        const int64_t nr = std::min(rows, n - n0);
        check_launch(op, launch_dropout_rows_to_f32(x.raw(), code(act), n0, nr, k, d.seed, d.threshold, d.keep_scale,
                                                    d.map, xd32.data<float>(), s));
        product_f32(op, device, false, true, nr, r, k, xd32.raw(), k, a.raw(), k,
                    offset(xa.raw(), n0 * r, DType::F32), r, 1.0f, 0.0f);
      }
    }
    // h += scale xa b^T (fp32).
    product_f32(op, device, false, true, n, m, r, xa.raw(), r, b.raw(), r, h.raw(), m, scale, 1.0f);
  }
  // y (=|+=) (t + bias) + g h.
  check_launch(op, launch_dora_output(y.raw(), code(act), h.data<float>(), t.defined() ? t.data<float>() : nullptr,
                                      bias.defined() ? bias.raw() : nullptr,
                                      bias.defined() ? code(bias.dtype()) : 0, magnitude.data<float>(),
                                      weight_norm.data<float>(), n, m, accumulate, s));
}

void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx) {
  const char* op = "dora_linear_backward";
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  const DType act = x.dtype();
  if (n == 0) return;
  cudaStream_t s = stream(device);

  if (dmagnitude.defined() && m > 0) {  // dmagnitude += sum_n dy h / weight_norm (fp64, fixed chunks)
    const size_t bytes = dora_magnitude_scratch_bytes(n, m);
    Tensor scratch = workspace(static_cast<int64_t>((bytes + 3) / 4), DType::F32, device);
    check_launch(op, launch_dora_magnitude_grad(dy.raw(), code(act), h.data<float>(), weight_norm.data<float>(), n, m,
                                                dmagnitude.data<float>(), scratch.raw(), bytes, s));
  }
  if (!dx.defined() && !da.defined() && !db.defined()) return;

  // dh (n, m) = g dy, activation dtype.
  Tensor dh = workspace(n * m, act, device);
  check_launch(op, launch_dora_scale_rows(dy.raw(), code(act), magnitude.data<float>(), weight_norm.data<float>(),
                                          0.0f, n, m, dh.raw(), s));
  if (db.defined() && r > 0) add_lora_db(op, device, dh.raw(), n, m, xa, act, scale, db);  // db += scale dh^T xa
  if (!dx.defined() && !da.defined()) return;
  if (k == 0) return;  // dx (n, 0) and da (r, 0) are empty

  // gb (n, r) F32 = dh b: the gradient of xa before the scale.
  Tensor gb;
  if (r > 0) {
    gb = workspace(n * r, DType::F32, device);
    lora_dy_b(op, device, dh.raw(), n, m, b, act, gb);
  }
  const bool dropped = dropout.p != 0.0f;
  const DropoutParams d = params_of(dropout);
  const int64_t rows = chunk_rows(n, k);
  const bool da_direct = act == DType::F32 && !dropped;  // da from x itself, no fp32 copy
  const bool need_buf = (da.defined() && r > 0 && !da_direct) || (dx.defined() && (r > 0 || dropped));
  Tensor buf = need_buf ? workspace(rows * k, DType::F32, device) : Tensor();  // F32 (rows, k) row chunks

  if (da.defined() && r > 0) {  // da (r, k) += scale gb^T xd, xd = dropout(x) in fp32
    if (da_direct) {
      product_f32(op, device, true, false, r, k, n, gb.raw(), r, x.raw(), k, da.raw(), k, scale, 1.0f);
    } else {
      for (int64_t n0 = 0; n0 < n; n0 += rows) {  // row chunks in order
        const int64_t nr = std::min(rows, n - n0);
        check_launch(op, launch_dropout_rows_to_f32(x.raw(), code(act), n0, nr, k, d.seed, d.threshold, d.keep_scale,
                                                    d.map, buf.data<float>(), s));
        product_f32(op, device, true, false, r, k, nr, offset(gb.raw(), n0 * r, DType::F32), r, buf.raw(), k,
                    da.raw(), k, scale, 1.0f);
      }
    }
  }
  if (!dx.defined()) return;
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  if (!dropped) {
    // dx (=|+=) dh w + scale gb a.
    product_w(op, device, dh.raw(), act, n, m, w, dx.raw(), act, beta);
    if (r == 0) return;
    for (int64_t n0 = 0; n0 < n; n0 += rows) {
      const int64_t nr = std::min(rows, n - n0);
      product_f32(op, device, false, false, nr, k, r, offset(gb.raw(), n0 * r, DType::F32), r, a.raw(), k, buf.raw(),
                  k, 1.0f, 0.0f);
      check_launch(op, launch_lora_dx_add(dx.raw(), code(act), buf.data<float>(), n0, nr, k, scale, 0, 0u, 1.0f,
                                          DropoutMap{}, s));
    }
    return;
  }
  // p > 0: dx (=|+=) dy w + mult * ((dh - dy) w + scale gb a). dh's buffer now holds e = dh - dy = (g - 1) dy
  // (gb and db, its readers, are enqueued before).
  product_w(op, device, dy.raw(), act, n, m, w, dx.raw(), act, beta);
  check_launch(op, launch_dora_scale_rows(dy.raw(), code(act), magnitude.data<float>(), weight_norm.data<float>(),
                                          -1.0f, n, m, dh.raw(), s));
  for (int64_t n0 = 0; n0 < n; n0 += rows) {
    const int64_t nr = std::min(rows, n - n0);
    product_w(op, device, offset(dh.raw(), n0 * m, act), act, nr, m, w, buf.raw(), DType::F32, 0.0f);  // e w
    if (r > 0) {
      product_f32(op, device, false, false, nr, k, r, offset(gb.raw(), n0 * r, DType::F32), r, a.raw(), k, buf.raw(),
                  k, scale, 1.0f);  // += scale gb a
    }
    check_launch(op, launch_lora_dx_add(dx.raw(), code(act), buf.data<float>(), n0, nr, k, 1.0f, d.seed, d.threshold,
                                        d.keep_scale, d.map, s));
  }
}

}  // namespace swift::ops::cuda
