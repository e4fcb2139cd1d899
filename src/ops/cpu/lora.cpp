// ops/cpu/lora.cpp — fast CPU dropout and LoRA linear (forward and backward).
//
// Invariants:
//  - The dropout multiplier of flat element i is (dropout draw i of `seed` >= threshold(p)) ? 1 / (1 - p) : 0
//    (ops/philox.h: 16-bit draws, 8 per Philox block); it is regenerated wherever needed (forward, backward dx,
//    backward da), never stored (but by swiglu_drawing_mask, whose op is to write them as keep bits), and applied as
//    x * multiplier (so NaN stays NaN, as torch's x * mask). With
//    AVX-512, 16 Philox blocks are generated at once (same draws bit for bit; tests/ops/test_lora.cpp checks masks
//    against the reference).
//  - With a DropoutMap (ops/philox.h) local element (i, j) draws stream index dropout_index(map, i, j, cols): a
//    full-width map is one contiguous run of the stream (one call, as the identity), a column block one run per row.
//  - p == 0 uses no RNG and no scratch: the LoRA products run on x directly.
//  - The base product goes through linear / linear_backward (16-bit frozen weights converted per block); the
//    rank-r products are single-threaded sgemm calls on tiles owned by one thread (row chunks for xa and dx,
//    column ranges for da, tile_of for db), so every output element has one writer and a fixed order.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/philox.h"

namespace swift::ops::cpu {

namespace {

constexpr int64_t kChunkFloats = 1 << 15;  // x elements per dropout work item (128 KiB of fp32: stays in L2)

#if defined(__AVX512F__)
// GCC 12's headers build the unmasked intrinsics from _mm512_undefined_* and then warn about their own code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Multipliers of the 128 draws of Philox blocks [block, block + 16): the 16 blocks run in the 16 lanes of AVX-512
// registers (the same rounds as philox4x32_10, bit for bit), then the words are put back in stream order and each
// word's low and high halves become two consecutive multipliers.
inline __m512i mulhi_epu32(__m512i a, __m512i b) {
  const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, b), 32);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), _mm512_srli_epi64(b, 32));
  return _mm512_mask_blend_epi32(0xAAAA, even, odd);
}

// Bit j of the low 16 bits of x moves to bit 2j.
inline uint32_t spread_to_even_bits(uint32_t x) {
  x &= 0xFFFFu;
  x = (x | (x << 8)) & 0x00FF00FFu;
  x = (x | (x << 4)) & 0x0F0F0F0Fu;
  x = (x | (x << 2)) & 0x33333333u;
  return (x | (x << 1)) & 0x55555555u;
}

void philox_multipliers_x16(uint64_t seed, uint64_t block, uint32_t threshold, float keep_scale, float* out) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i base_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(block)));
  __m512i c0 = _mm512_add_epi32(base_lo, iota);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base_lo);
  const __m512i base_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(block >> 32)));
  __m512i c1 = _mm512_mask_add_epi32(base_hi, carry, base_hi, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u)), m1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i hi0 = mulhi_epu32(m0, c0), lo0 = _mm512_mullo_epi32(m0, c0);
    const __m512i hi1 = mulhi_epu32(m1, c2), lo1 = _mm512_mullo_epi32(m1, c2);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Transpose (word j of block l in lane l of cj) to stream order: block l's words at out[4l .. 4l + 3].
  const __m512i ab_lo = _mm512_unpacklo_epi32(c0, c1), ab_hi = _mm512_unpackhi_epi32(c0, c1);
  const __m512i cd_lo = _mm512_unpacklo_epi32(c2, c3), cd_hi = _mm512_unpackhi_epi32(c2, c3);
  const __m512i r0 = _mm512_unpacklo_epi64(ab_lo, cd_lo);  // blocks 0, 4, 8, 12 (one per 128-bit lane)
  const __m512i r1 = _mm512_unpackhi_epi64(ab_lo, cd_lo);  // blocks 1, 5, 9, 13
  const __m512i r2 = _mm512_unpacklo_epi64(ab_hi, cd_hi);  // blocks 2, 6, 10, 14
  const __m512i r3 = _mm512_unpackhi_epi64(ab_hi, cd_hi);  // blocks 3, 7, 11, 15
  const __m512i t0 = _mm512_shuffle_i32x4(r0, r1, 0x44), t1 = _mm512_shuffle_i32x4(r2, r3, 0x44);
  const __m512i t2 = _mm512_shuffle_i32x4(r0, r1, 0xEE), t3 = _mm512_shuffle_i32x4(r2, r3, 0xEE);
  const __m512i words[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                            _mm512_shuffle_i32x4(t2, t3, 0x88), _mm512_shuffle_i32x4(t2, t3, 0xDD)};
  const __m512i thr = _mm512_set1_epi32(static_cast<int>(threshold));
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  const __m512 keep = _mm512_set1_ps(keep_scale);
  for (int v = 0; v < 4; ++v) {  // words 16v .. 16v + 15: draws 32v .. 32v + 31
    const uint32_t low = _mm512_cmpge_epu32_mask(_mm512_and_si512(words[v], low16), thr);
    const uint32_t high = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(words[v], 16), thr);
    const uint32_t keep_bits = spread_to_even_bits(low) | (spread_to_even_bits(high) << 1);
    _mm512_storeu_ps(out + 32 * v, _mm512_maskz_mov_ps(static_cast<__mmask16>(keep_bits), keep));
    _mm512_storeu_ps(out + 32 * v + 16, _mm512_maskz_mov_ps(static_cast<__mmask16>(keep_bits >> 16), keep));
  }
}
#pragma GCC diagnostic pop
#endif

// out[e] = multiplier of flat element begin + e, for e in [0, count).
void dropout_multipliers(uint64_t seed, uint32_t threshold, float keep_scale, uint64_t begin, int64_t count,
                         float* out) {
  if (count <= 0) return;
  const uint64_t end = begin + static_cast<uint64_t>(count);
  uint64_t i = begin;
  PhiloxCursor cursor(seed);
  // Leading partial block, whole blocks (8 draws each), trailing partial block.
  for (; i < end && (i & 7) != 0; ++i) out[i - begin] = cursor.draw(i) >= threshold ? keep_scale : 0.0f;
  const uint64_t whole_end = end & ~uint64_t{7};
#if defined(__AVX512F__)
  for (; i + 128 <= whole_end; i += 128) philox_multipliers_x16(seed, i >> 3, threshold, keep_scale, out + (i - begin));
#endif
  for (; i < whole_end; i += 8) {
    const uint32_t bits = dropout_keep_bits8(philox_block(seed, i >> 3), threshold);
    float* o = out + (i - begin);
    for (int e = 0; e < 8; ++e) o[e] = ((bits >> e) & 1u) != 0 ? keep_scale : 0.0f;
  }
  for (; i < end; ++i) out[i - begin] = cursor.draw(i) >= threshold ? keep_scale : 0.0f;
}

struct DropoutParams {
  uint64_t seed;
  uint32_t threshold;
  float keep_scale;
  DropoutMap map;
};
DropoutParams params_of(const Dropout& d) {
  return {d.seed, dropout_threshold(d.p), d.p > 0.0f ? 1.0f / (1.0f - d.p) : 1.0f, d.map};
}

// out[e] = multiplier of local flat element begin + e (e < count) of a (rows, cols) operand, through d.map.
void mapped_multipliers(const DropoutParams& d, int64_t cols, int64_t begin, int64_t count, float* out) {
  if (count <= 0 || cols <= 0) return;
  if (d.map.col_offset == 0 && (d.map.full_cols == 0 || d.map.full_cols == cols)) {  // full width: one run
    dropout_multipliers(d.seed, d.threshold, d.keep_scale, dropout_index(d.map, 0, 0, cols) + static_cast<uint64_t>(begin),
                        count, out);
    return;
  }
  for (int64_t e = begin; e < begin + count;) {  // a column block: one run per (part of a) row
    const int64_t row = e / cols, col = e % cols, len = std::min(cols - col, begin + count - e);
    dropout_multipliers(d.seed, d.threshold, d.keep_scale, dropout_index(d.map, row, col, cols), len, out + (e - begin));
    e += len;
  }
}

// Rows per work item when a (rows x k) fp32 block must fit kChunkFloats (at least 1).
int64_t rows_per_chunk(int64_t k) { return std::max<int64_t>(1, kChunkFloats / std::max<int64_t>(k, 1)); }

}  // namespace

void dropout(const Tensor& x, const Dropout& dropout, Tensor& out) {
  SWIFT_PROFILE("dropout");
  const int64_t n = x.numel();
  const float* px = x.data<float>();
  float* po = out.data<float>();
  if (dropout.p == 0.0f) {
    if (po != px) std::copy(px, px + n, po);
    return;
  }
  const DropoutParams d = params_of(dropout);
  const int64_t cols = x.dim() > 0 ? x.size(x.dim() - 1) : 1;
  const int64_t chunks = (n + kChunkFloats - 1) / kChunkFloats;
#pragma omp parallel if (n >= kChunkFloats)
  {
    float* mult = thread_scratch(ScratchSlot::Row, static_cast<size_t>(kChunkFloats));
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t begin = ch * kChunkFloats, len = std::min(kChunkFloats, n - begin);
      mapped_multipliers(d, cols, begin, len, mult);
#pragma omp simd
      for (int64_t e = 0; e < len; ++e) po[begin + e] = px[begin + e] * mult[e];
    }
  }
}

void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask) {
  SWIFT_PROFILE("swiglu_drawing_mask");
  swiglu(gate, up, out);
  const DropoutParams d = params_of(mask);
  const int64_t n = out.size(0), f = out.size(1), bytes = (f + 7) / 8;
  uint8_t* bits = mask.keep_bits.data<uint8_t>();
#pragma omp parallel for schedule(static) if (n * f >= kChunkFloats)
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t c = 0; c < bytes; ++c) {
      bits[row * bytes + c] = static_cast<uint8_t>(dropout_keep_byte(d.seed, d.map, row, 8 * c, f, d.threshold));
    }
  }
}

namespace {
// xa = dropout(x) a^T (lora_linear's, and lora_xa's alone).
void lora_xa_impl(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa) {
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  if (n == 0) return;
  if (dropout.p == 0.0f) {
    gemm(false, true, 1.0f, x, a, 0.0f, xa);
  } else if (r > 0) {
    blas_single_threaded();
    const DropoutParams d = params_of(dropout);
    const float* px = x.data<float>();
    const float* pa = a.data<float>();
    float* pxa = xa.data<float>();
    const int64_t rows = rows_per_chunk(k), chunks = (n + rows - 1) / rows;
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * k * (r + 8)))
    {
      float* xd = thread_scratch(ScratchSlot::Row, static_cast<size_t>(rows * k));
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t n0 = ch * rows, nr = std::min(rows, n - n0);
        mapped_multipliers(d, k, n0 * k, nr * k, xd);
#pragma omp simd
        for (int64_t e = 0; e < nr * k; ++e) xd[e] = px[n0 * k + e] * xd[e];
        if (k > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(r),
                      static_cast<int>(k), 1.0f, xd, static_cast<int>(k), pa, static_cast<int>(k), 0.0f,
                      pxa + n0 * r, static_cast<int>(r));
        } else {
          std::fill(pxa + n0 * r, pxa + (n0 + nr) * r, 0.0f);
        }
      }
    }
  }
}

}  // namespace

void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa) {
  SWIFT_PROFILE("lora_xa");
  lora_xa_impl(x, a, dropout, xa);
}

void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate, bool b_product) {
  SWIFT_PROFILE("lora_linear");
  linear(x, w, bias, y, accumulate);
  if (x.size(0) == 0) return;
  lora_xa_impl(x, a, dropout, xa);
  // y += scale * xa b^T
  if (b_product) gemm(false, true, scale, xa, b, 1.0f, y);
}

// gate / up get their B products as lora_linear adds them (the same gemm), then the plain swiglu.
void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out) {
  SWIFT_PROFILE("swiglu_lora");
  gemm(false, true, scale, gate_b.xa, gate_b.b, 1.0f, gate);
  gemm(false, true, scale, up_b.xa, up_b.b, 1.0f, up);
  swiglu(gate, up, out);
}

// The B product as lora_linear adds it (the same gemm).
void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale) {
  SWIFT_PROFILE("lora_b_product");
  if (y.size(0) == 0) return;
  gemm(false, true, scale, bp.xa, bp.b, 1.0f, y);
}

// y + residual, then the B product as lora_linear adds it (the same gemm): fp32 on the CPU.
void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale) {
  SWIFT_PROFILE("add_lora_residual");
  add(y, residual, y);
  gemm(false, true, scale, bp.xa, bp.b, 1.0f, y);
}

namespace {
// The first step of a LoRA linear's backward: db += scale dy^T xa (db defined), and g = dy b (g defined), the
// gradient of xa before the scale.
void lora_dy_step(const Tensor& dy, const Tensor& b, const Tensor& xa, float scale, Tensor& g, Tensor& db) {
  if (db.defined()) gemm(true, false, scale, dy, xa, 1.0f, db);
  if (g.defined()) gemm(false, false, 1.0f, dy, b, 0.0f, g);
}

// lora_linear_backward's rank-r part: db and g (lora_dy_step; with g given, both were made by the caller), then dx's
// LoRA term (added onto dx) and da.
void lora_rank_backward(const Tensor& dy, const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& xa,
                        float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                        const Tensor& g_given = Tensor()) {
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  if (n == 0 || r == 0) return;
  Tensor g = g_given;
  if (!g.defined()) {
    const bool want_g = dx.defined() || da.defined();
    if (want_g) g = Tensor::empty({n, r}, DType::F32, Device::cpu(), MemoryCategory::Workspace);
    lora_dy_step(dy, b, xa, scale, g, db);
  }
  if (!dx.defined() && !da.defined()) return;
  if (dropout.p == 0.0f) {
    if (dx.defined()) gemm(false, false, scale, g, a, 1.0f, dx);  // dx += scale g a
    if (da.defined()) gemm(true, false, scale, g, x, 1.0f, da);   // da += scale g^T x
    return;
  }
  if (k == 0) return;
  blas_single_threaded();
  const DropoutParams d = params_of(dropout);
  const float* pg = g.data<float>();
  const float* pa = a.data<float>();
  const float* px = x.data<float>();
  const int64_t rows = rows_per_chunk(k);
  if (dx.defined()) {  // dx += scale * mult * (g a), row chunks
    float* pdx = dx.data<float>();
    const int64_t chunks = (n + rows - 1) / rows;
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * k * (r + 8)))
    {
      float* buf = thread_scratch(ScratchSlot::Row, static_cast<size_t>(2 * rows * k));
      float* ga = buf;
      float* mult = buf + rows * k;
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t n0 = ch * rows, nr = std::min(rows, n - n0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nr), static_cast<int>(k),
                    static_cast<int>(r), 1.0f, pg + n0 * r, static_cast<int>(r), pa, static_cast<int>(k), 0.0f, ga,
                    static_cast<int>(k));
        mapped_multipliers(d, k, n0 * k, nr * k, mult);
        float* out = pdx + n0 * k;
#pragma omp simd
        for (int64_t e = 0; e < nr * k; ++e) out[e] += scale * (mult[e] * ga[e]);
      }
    }
  }
  if (da.defined()) {  // da += scale g^T dropout(x), column ranges of K per thread, row chunks in order
    float* pda = da.data<float>();
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * k * (r + 8)))
    {
      int64_t k0, k1;
      split_range(k, omp_get_num_threads(), omp_get_thread_num(), 16, k0, k1);
      const int64_t cols = k1 - k0;
      if (cols > 0) {
        const int64_t crows = rows_per_chunk(cols);
        float* xd = thread_scratch(ScratchSlot::Row, static_cast<size_t>(crows * cols));
        for (int64_t n0 = 0; n0 < n; n0 += crows) {
          const int64_t nr = std::min(crows, n - n0);
          for (int64_t i = 0; i < nr; ++i) {
            float* row = xd + i * cols;
            const float* xr = px + (n0 + i) * k + k0;
            mapped_multipliers(d, k, (n0 + i) * k + k0, cols, row);
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) row[j] = xr[j] * row[j];
          }
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(r), static_cast<int>(cols),
                      static_cast<int>(nr), scale, pg + n0 * r, static_cast<int>(r), xd, static_cast<int>(cols), 1.0f,
                      pda + k0, static_cast<int>(k));
        }
      }
    }
  }
}

}  // namespace

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx) {
  SWIFT_PROFILE("lora_linear_backward");
  Tensor none;
  if (dx.defined()) linear_backward(dy, x, w, dx, none, none, accumulate_dx);  // through the frozen weight
  lora_rank_backward(dy, x, a, b, xa, scale, dropout, dx, da, db);
}

// linear, then the B product.
void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate) {
  cpu::linear(x, w, bias, y, accumulate);
  cpu::lora_b_product(y, LoraBProduct{xa, b}, scale);
}

// lora_linear_from_xa, then the residual added (into a copy first when the residual is y itself).
void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y) {
  const bool in_place = residual.storage() == y.storage() && residual.byte_offset() == y.byte_offset();
  Tensor out = in_place ? Tensor::empty(y.shape(), y.dtype(), y.device(), MemoryCategory::Workspace) : y;
  cpu::lora_linear_from_xa(x, w, bias, b, xa, scale, out, false);
  cpu::add(residual, out, y);
}

// The two ops in order (the CPU has no pass to save).
void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db) {
  cpu::lora_linear_backward(dy, act, w, a, b, xa, scale, dropout, dgate, da, db, false);
  cpu::swiglu_backward(dgate, gate, up, dgate, dup);
}

// The single ops in order (the CPU has no pass over x to share).
void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs) {
  for (const LoraSharedXa& job : jobs) {
    Tensor xa = job.xa;
    cpu::lora_xa(x, job.a, job.dropout, xa);
  }
}

// The frozen products' input gradients in job order, then each job's rank-r part in order (ops.h's order).
void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx) {
  SWIFT_PROFILE("lora_linear_backward_shared");
  Tensor none;
  for (size_t j = 0; j < jobs.size(); ++j) linear_backward(jobs[j].dy, x, jobs[j].w, dx, none, none, j > 0 || accumulate_dx);
  for (const LoraSharedBackward& job : jobs) {
    Tensor da = job.da, db = job.db;
    lora_rank_backward(job.dy, x, job.a, job.b, job.xa, scale, job.dropout, dx, da, db, job.g);
  }
}

// swiglu_backward, then each step's db and g over the gradient it made (lora_rank_backward's first step).
void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale) {
  SWIFT_PROFILE("swiglu_backward_lora_dy");
  cpu::swiglu_backward(dout, gate, up, dgate, dup);
  for (auto [dy, step] : {std::pair{&dgate, &gate_step}, {&dup, &up_step}}) {
    Tensor g = step->g, db = step->db;
    lora_dy_step(*dy, step->b, step->xa, scale, g, db);
  }
}

}  // namespace swift::ops::cpu
