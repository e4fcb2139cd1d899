// ops/cpu/backward.cpp — fast CPU backward of embedding, linear and swiglu.
//
// Invariants:
//  - Parameter gradients (dtable, dw, dbias) accumulate (+=); activation gradients (dx, dgate, dup) are
//    written (=) unless accumulate_dx. Undefined outputs are skipped.
//  - Every output element is owned by one thread and computed in an order that does not depend on the thread
//    count's scheduling: embedding and bias gradients split columns across threads and add tokens / rows in
//    order; products split the output into tiles (tile_of) and call single-threaded sgemm per tile.
//  - 16-bit weights are converted to fp32 in blocks of rows restricted to the thread's columns, so no full fp32
//    copy of a frozen weight ever exists and no two threads convert the same block.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {
constexpr int64_t kParallelMin = 32768;  // elements below which a pass runs on one thread
constexpr int64_t kColumnAlign = 16;     // column ranges start at multiples of one AVX-512 vector
constexpr int64_t kChunk = 16384;        // elements per work item of element-wise passes

// dx (n, k) (+)= dy (n, m) @ w (m, k), w of any float dtype.
void linear_dx(const float* dy, const Tensor& w, float* dx, int64_t n, int64_t m, int64_t k, bool accumulate) {
  if (m == 0) {
    if (!accumulate) std::fill(dx, dx + n * k, 0.0f);
    return;
  }
  const DType wd = w.dtype();
  const char* wbytes = static_cast<const char*>(w.raw());
  const size_t row_bytes = dtype_bytes(wd, k), elem_bytes = dtype_bytes(wd, 1);
  const float beta0 = accumulate ? 1.0f : 0.0f;
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * m * k))
  {
    const Tile t = tile_of(n, k, omp_get_num_threads(), omp_get_thread_num());
    if (!t.empty()) {
      const int64_t rows = t.n1 - t.n0, cols = t.m1 - t.m0;
      float* out = dx + t.n0 * k + t.m0;
      if (wd == DType::F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
                    static_cast<int>(m), 1.0f, dy + t.n0 * m, static_cast<int>(m),
                    reinterpret_cast<const float*>(wbytes) + t.m0, static_cast<int>(k), beta0, out, static_cast<int>(k));
      } else {
        const int64_t block = std::min(m, std::max<int64_t>(16, kWeightBlockFloats / cols));
        float* scratch = thread_scratch(ScratchSlot::WeightBlock, static_cast<size_t>(block * cols));
        for (int64_t b0 = 0; b0 < m; b0 += block) {
          const int64_t nb = std::min(block, m - b0);
          for (int64_t i = 0; i < nb; ++i) {
            to_f32(wbytes + static_cast<size_t>(b0 + i) * row_bytes + static_cast<size_t>(t.m0) * elem_bytes, wd,
                   scratch + i * cols, cols);
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
                      static_cast<int>(nb), 1.0f, dy + t.n0 * m + b0, static_cast<int>(m), scratch,
                      static_cast<int>(cols), b0 == 0 ? beta0 : 1.0f, out, static_cast<int>(k));
        }
      }
    }
  }
}

// dw (m, k) += dy (n, m)^T @ x (n, k).
void linear_dw(const float* dy, const float* x, float* dw, int64_t n, int64_t m, int64_t k, bool accumulate) {
  if (n == 0) {
    if (!accumulate) std::fill(dw, dw + m * k, 0.0f);
    return;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * m * k))
  {
    const Tile t = tile_of(m, k, omp_get_num_threads(), omp_get_thread_num());
    if (!t.empty()) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(t.n1 - t.n0), static_cast<int>(t.m1 - t.m0),
                  static_cast<int>(n), 1.0f, dy + t.n0, static_cast<int>(m), x + t.m0, static_cast<int>(k), beta,
                  dw + t.n0 * k + t.m0, static_cast<int>(k));
    }
  }
}

// db (m) += column sums of dy (n, m), in fp64 per column, rows in order.
void linear_dbias(const float* dy, float* db, int64_t n, int64_t m) {
#pragma omp parallel if (n * m >= kParallelMin)
  {
    int64_t c0, c1;
    split_range(m, omp_get_num_threads(), omp_get_thread_num(), kColumnAlign, c0, c1);
    if (c1 > c0) {
      std::vector<double> acc(static_cast<size_t>(c1 - c0), 0.0);
      for (int64_t r = 0; r < n; ++r) {
        const float* row = dy + r * m + c0;
#pragma omp simd
        for (int64_t j = 0; j < c1 - c0; ++j) acc[static_cast<size_t>(j)] += row[j];
      }
      for (int64_t j = c0; j < c1; ++j) db[j] = static_cast<float>(db[j] + acc[static_cast<size_t>(j - c0)]);
    }
  }
}

}  // namespace

namespace {
// dtable[id - vocab_offset] += dout[t] for the ids inside the table (not padding_id). Deterministic: each thread owns
// a column block and walks the tokens in order.
void scatter_add_rows(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable, int64_t padding_id) {
  const int64_t tokens = ids.size(0), c = dout.size(1), vocab = dtable.size(0);
  const int32_t* id = ids.data<int32_t>();
  const float* src = dout.data<float>();
  float* table = dtable.data<float>();
#pragma omp parallel if (tokens * c >= kParallelMin)
  {
    int64_t c0, c1;
    split_range(c, omp_get_num_threads(), omp_get_thread_num(), kColumnAlign, c0, c1);
    for (int64_t t = 0; t < tokens && c1 > c0; ++t) {
      const int64_t row_index = id[t] - vocab_offset;
      if (id[t] == padding_id || row_index < 0 || row_index >= vocab) continue;
      float* row = table + row_index * c;
      const float* g = src + t * c;
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) row[j] += g[j];
    }
  }
}
}  // namespace

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id) {
  SWIFT_PROFILE("embedding_backward");
  scatter_add_rows(dout, ids, 0, dtable, padding_id);  // ids were checked against the vocabulary
}

void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id) {
  SWIFT_PROFILE("embedding_shard_backward");
  scatter_add_rows(dout, ids, vocab_offset, dtable, padding_id);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw) {
  SWIFT_PROFILE("linear_backward");
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  blas_single_threaded();
  const float* pdy = dy.data<float>();
  if (dx.defined() && n > 0 && k > 0) linear_dx(pdy, w, dx.data<float>(), n, m, k, accumulate_dx);
  if (dw.defined() && m > 0 && k > 0) linear_dw(pdy, x.data<float>(), dw.data<float>(), n, m, k, accumulate_dw);
  if (dbias.defined() && m > 0) linear_dbias(pdy, dbias.data<float>(), n, m);
}

// dup = dout * silu(g); dgate = ((dout * up) * sigmoid(g)) * (1 + g * (1 - sigmoid(g))), torch's silu_backward
// order. Every input element is read before either output element is written (in-place safe).
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  SWIFT_PROFILE("swiglu_backward");
  const int64_t n = gate.numel();
  const float* d = dout.data<float>();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* dg = dgate.data<float>();
  float* du = dup.data<float>();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t begin = ch * kChunk, end = std::min(n, begin + kChunk);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i], ui = u[i], di = d[i];
      const float denom = 1.0f + exp_approx(-gi);
      const float sig = 1.0f / denom;
      const float silu = gi / denom;
      const float a = di * ui;
      du[i] = di * silu;
      dg[i] = (a * sig) * (1.0f + gi * (1.0f - sig));
    }
  }
}

}  // namespace swift::ops::cpu
