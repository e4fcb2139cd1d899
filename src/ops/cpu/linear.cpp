// ops/cpu/linear.cpp — fast CPU linear (y = x w^T + bias) and gemm through OpenBLAS sgemm.
//
// Invariants:
//  - OpenBLAS runs single-threaded; parallelism comes from OpenMP threads that each own one tile of the output
//    (a range of rows N times a range of columns M, from a grid that splits M first: panels of at least
//    kMinPanel columns, then N) and call sgemm on it. No two threads write the same element of y/c.
//  - BF16/F16 weights are converted to fp32 in blocks of rows (at most kWeightBlockFloats) into a per-thread
//    scratch buffer right before the sgemm that uses them: the full fp32 copy of a large weight never exists.
//  - With few rows (N <= kSkinnyRows: decoding), weights skip sgemm: each weight row is converted once (if
//    16-bit) and dotted with every row of x, so weight memory is read once (sgemm is 4x slower at N = 1);
//    the rows are split over threads only when the weight is large enough to pay for waking them.
//  - Bias is added after the product, accumulate adds into y (beta = 1), otherwise y is written (beta = 0).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <string>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

constexpr int64_t kSkinnyRows = 4;              // x rows at or below which the dot kernel replaces sgemm
constexpr int64_t kPanelAlign = 16;             // panel boundaries are multiples of this (one AVX-512 vector)
constexpr int64_t kMinPanel = 64;               // do not split the output into panels narrower than this
// kWeightBlockFloats (cpu_ops.h): 4 MiB of converted weight per block: one block for the demo's 576 x 1536
// layers; bounds scratch per thread.
constexpr double kSerialFlops = 2e6;            // below this many multiply-adds, one thread
constexpr int64_t kDotRows = 4;                 // weight rows per step of the skinny (decoding) kernel
// Skinny products read each weight once (memory-bound): split them over threads when the weight is at least
// this many bytes (waking a sleeping worker costs ~10-50 us; 2 MiB take ~200 us to stream on one core).
constexpr double kSkinnyParallelBytes = 2.0 * (1 << 20);

// y[r, o] (+)= dot(x[r], w[o]) + bias[o] for N <= kSkinnyRows; 16-bit weights converted kDotRows rows at a time.
// Bandwidth-bound: kDotRows weight rows are streamed at once (independent accumulators keep more loads in
// flight); each y element is one simd dot in a fixed order, whatever the thread count.
void linear_skinny(const float* x, const Tensor& w, const float* bias, float* y, int64_t n, int64_t k, int64_t m,
                   bool accumulate) {
  const char* wrows = static_cast<const char*>(w.raw());
  const size_t row_bytes = dtype_bytes(w.dtype(), k);
  const DType wd = w.dtype();
  const int64_t groups = (m + kDotRows - 1) / kDotRows;
  const int threads = static_cast<double>(row_bytes) * static_cast<double>(m) < kSkinnyParallelBytes
                          ? 1
                          : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    float* scratch =
        wd == DType::F32 ? nullptr : thread_scratch(ScratchSlot::Row, static_cast<size_t>(kDotRows * k));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t o0 = g * kDotRows, rows = std::min(kDotRows, m - o0);
      const float* wb;
      if (wd == DType::F32) {
        wb = reinterpret_cast<const float*>(wrows) + o0 * k;
      } else {
        to_f32(wrows + static_cast<size_t>(o0) * row_bytes, wd, scratch, rows * k);
        wb = scratch;
      }
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * k;
        float dots[kDotRows];
        if (rows == kDotRows) {
          const float *w0 = wb, *w1 = wb + k, *w2 = wb + 2 * k, *w3 = wb + 3 * k;
          float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
          for (int64_t i = 0; i < k; ++i) {
            const float xi = xr[i];
            a0 += xi * w0[i];
            a1 += xi * w1[i];
            a2 += xi * w2[i];
            a3 += xi * w3[i];
          }
          dots[0] = a0;
          dots[1] = a1;
          dots[2] = a2;
          dots[3] = a3;
        } else {
          for (int64_t j = 0; j < rows; ++j) {
            const float* wj = wb + j * k;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < k; ++i) acc += xr[i] * wj[i];
            dots[j] = acc;
          }
        }
        for (int64_t j = 0; j < rows; ++j) {
          float acc = dots[j];
          if (bias) acc += bias[o0 + j];
          float& out = y[r * m + o0 + j];
          out = accumulate ? out + acc : acc;
        }
      }
    }
  }
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t m, int64_t col_begin, int64_t col_end) {
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * m;
#pragma omp simd
    for (int64_t o = col_begin; o < col_end; ++o) yr[o] += bias[o];
  }
}

}  // namespace

}  // namespace swift::ops::cpu

namespace swift::ops {

std::string cpu_backend_info() {
  std::string core = openblas_get_corename();
  std::string config = openblas_get_config();
  std::string lower;
  for (char c : core) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  std::string line = fmt::format("CPU backend: {} (kernels: {}), {} OpenMP threads", config, core, omp_get_max_threads());
  const bool avx512_kernels = lower == "skylakex" || lower == "cooperlake" || lower == "sapphirerapids";
  const bool avx2_kernels = avx512_kernels || lower == "haswell" || lower == "zen";
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && !avx512_kernels) {
    line += "; this CPU has AVX-512 but OpenBLAS chose older kernels: start the process with "
            "OPENBLAS_CORETYPE=SkylakeX (or Cooperlake) for ~4x faster matmuls";
  } else if (__builtin_cpu_supports("avx2") && !avx2_kernels) {
    line += "; this CPU has AVX2 but OpenBLAS chose older kernels: start with OPENBLAS_CORETYPE=Haswell";
  }
#endif
  return line;
}

}  // namespace swift::ops

namespace swift::ops::cpu {

void split_range(int64_t total, int64_t parts, int64_t index, int64_t align, int64_t& begin, int64_t& end) {
  const int64_t units = (total + align - 1) / align;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t b = index * per + std::min(index, extra);
  const int64_t e = b + per + (index < extra ? 1 : 0);
  begin = std::min(total, b * align);
  end = std::min(total, e * align);
}

Tile tile_of(int64_t n, int64_t m, int threads, int tid) {
  constexpr int64_t kMinRows = 16;
  int64_t pm = std::clamp<int64_t>(m / kMinPanel, 1, threads);
  while (threads % pm != 0) --pm;
  const int64_t pn = std::clamp<int64_t>(n / kMinRows, 1, threads / pm);
  Tile t;
  if (tid >= pm * pn) return t;
  split_range(m, pm, tid % pm, kPanelAlign, t.m0, t.m1);
  split_range(n, pn, tid / pm, 1, t.n0, t.n1);
  return t;
}

int threads_for(double multiply_adds) { return multiply_adds < kSerialFlops ? 1 : omp_get_max_threads(); }

void blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  SWIFT_PROFILE("linear");
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  if (n == 0 || m == 0) return;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const float* pb = nullptr;
  if (bias.defined()) {
    float* converted = thread_scratch(ScratchSlot::Bias, static_cast<size_t>(m));
    to_f32(bias.raw(), bias.dtype(), converted, m);
    pb = converted;
  }
  if (k == 0) {  // empty product: y = (accumulate ? y : 0) + bias
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t o = 0; o < m; ++o) py[r * m + o] = (accumulate ? py[r * m + o] : 0.0f) + (pb ? pb[o] : 0.0f);
    }
    return;
  }
  const DType wd = w.dtype();
  if (n <= kSkinnyRows) {
    linear_skinny(px, w, pb, py, n, k, m, accumulate);
    return;
  }
  blas_single_threaded();
  const float beta = accumulate ? 1.0f : 0.0f;
  const char* wbytes = static_cast<const char*>(w.raw());
  const size_t w_row_bytes = dtype_bytes(wd, k);
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * m * k))
  {
    const Tile t = tile_of(n, m, omp_get_num_threads(), omp_get_thread_num());
    if (t.n1 > t.n0 && t.m1 > t.m0) {
      const int64_t cols = t.m1 - t.m0;
      const int64_t block = wd == DType::F32 ? cols
                                             : std::min(cols, std::max<int64_t>(kPanelAlign, kWeightBlockFloats / k /
                                                                                                 kPanelAlign * kPanelAlign));
      float* scratch = wd == DType::F32 ? nullptr : thread_scratch(ScratchSlot::WeightBlock, static_cast<size_t>(block * k));
      for (int64_t b0 = t.m0; b0 < t.m1; b0 += block) {
        const int64_t rows = std::min(block, t.m1 - b0);
        const float* wb;
        if (wd == DType::F32) {
          wb = reinterpret_cast<const float*>(wbytes) + b0 * k;
        } else {
          to_f32(wbytes + static_cast<size_t>(b0) * w_row_bytes, wd, scratch, rows * k);
          wb = scratch;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t.n1 - t.n0), static_cast<int>(rows),
                    static_cast<int>(k), 1.0f, px + t.n0 * k, static_cast<int>(k), wb, static_cast<int>(k), beta,
                    py + t.n0 * m + b0, static_cast<int>(m));
      }
      if (pb) add_bias(py + t.n0 * m, pb, t.n1 - t.n0, m, t.m0, t.m1);
    }
  }
}

void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  SWIFT_PROFILE("gemm");
  const int64_t n = c.size(0), m = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  if (n == 0 || m == 0) return;
  float* pc = c.data<float>();
  if (k == 0) {  // empty product: c = beta * c, c not read when beta == 0
    for (int64_t i = 0; i < n * m; ++i) pc[i] = beta == 0.0f ? 0.0f : beta * pc[i];
    return;
  }
  blas_single_threaded();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t lda = a.size(1), ldb = b.size(1);
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * m * k))
  {
    const Tile t = tile_of(n, m, omp_get_num_threads(), omp_get_thread_num());
    if (t.n1 > t.n0 && t.m1 > t.m0) {
      const float* a_part = trans_a ? pa + t.n0 : pa + t.n0 * lda;
      const float* b_part = trans_b ? pb + t.m0 * ldb : pb + t.m0;
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                  static_cast<int>(t.n1 - t.n0), static_cast<int>(t.m1 - t.m0), static_cast<int>(k), alpha, a_part,
                  static_cast<int>(lda), b_part, static_cast<int>(ldb), beta, pc + t.n0 * m + t.m0, static_cast<int>(m));
    }
  }
}

}  // namespace swift::ops::cpu
