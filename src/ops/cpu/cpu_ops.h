// ops/cpu/cpu_ops.h — the fast CPU kernels behind ops:: (namespace swift::ops::cpu), and their shared helpers.
// Internal to src/ops: callers go through ops.h, which checks arguments before calling these.
//
// Invariants:
//  - Kernels assume their arguments passed detail::check_<op> (shapes, dtypes, CPU device, valid ids and
//    cu_seqlens); they never throw from inside an OpenMP region.
//  - Parallelism is OpenMP only. OpenBLAS is switched to one thread on first use (blas_single_threaded) and
//    called from inside OpenMP regions on per-thread panels, so the two thread pools never compete.
//  - Per-thread scratch (thread_scratch) is reused across calls: no allocation in steady state.
//  - Each op's entry point opens a SWIFT_PROFILE region (core/profile.h): free unless SWIFT_PROFILE=1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "ops/ops.h"

namespace swift::ops::cpu {

void cast(const Tensor& src, Tensor& dst);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
void swap_outer_axes(const Tensor& x, Tensor& y);  // layout.cpp
void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols);  // layout.cpp
void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward);  // norm_rope.cpp
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out);
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate);
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse);

// ---- backward and training ops (same contracts as ops.h) ---------------------------------------------------
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id);
void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw = true);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx);
void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv);
void dropout(const Tensor& x, const Dropout& dropout, Tensor& out);
void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask);
void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa);
void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate, bool b_product);
void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out);
void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale);
void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale);
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx);
void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate);
void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y);
void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db);
void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs);
void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx);
void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale);
CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options);
void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options);
void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options);
void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options);
void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options);
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step);
float grad_norm(std::span<const Tensor> grads);
float clip_grad_norm(std::span<const Tensor> grads, double max_norm);
void scale_gradients(std::span<const Tensor> grads, float factor);
void zero_gradients(std::span<const Tensor> grads);

// ---- helpers shared by the kernels ------------------------------------------------------------------------
// n elements of dtype (F32/BF16/F16) at src, converted to fp32 into dst. Exact.
void to_f32(const void* src, DType dtype, float* dst, int64_t n);
// n fp32 values converted to dtype (F32/BF16/F16), rounding to nearest even.
void from_f32(const float* src, DType dtype, void* dst, int64_t n);

// A per-thread buffer of at least `floats` floats; slot picks one of a few independent buffers. Valid until
// the same thread asks for the same slot again. Contents are unspecified.
enum class ScratchSlot : int { WeightBlock, Bias, Attention, Row, Count };
float* thread_scratch(ScratchSlot slot, size_t floats);

// Calls openblas_set_num_threads(1) once per process.
void blas_single_threaded();

// Splits [0, total) into `parts` ranges aligned to `align`; returns part `index` as [begin, end).
void split_range(int64_t total, int64_t parts, int64_t index, int64_t align, int64_t& begin, int64_t& end);

// The output tile (rows [n0, n1), columns [m0, m1)) of thread `tid` out of `threads` for an (n, m) product:
// columns are split into as many panels of >= 64 as divide the thread count, rows into the remaining factor
// (>= 16 rows each). Threads beyond the grid get an empty tile. A thread's tile depends only on (n, m,
// threads, tid), so every element of an output is computed by one thread in one fixed order.
struct Tile {
  int64_t n0 = 0, n1 = 0, m0 = 0, m1 = 0;
  bool empty() const { return n1 <= n0 || m1 <= m0; }
};
Tile tile_of(int64_t n, int64_t m, int threads, int tid);

// OpenMP threads for a product of `multiply_adds`: 1 below ~2e6, else all.
int threads_for(double multiply_adds);

// Rows of a 16-bit weight converted per block so that one block holds at most ~4 MiB of fp32.
constexpr int64_t kWeightBlockFloats = 1 << 20;

// exp(x) in fp32 within 1 ulp (checked densely over [-87, 88.3]), branch-free so loops over it vectorise.
// exp(-inf) = 0, exp(+inf) = inf, NaN propagates; results below 2^-126 flush to 0.
inline float exp_approx(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365447504019f;
  float xc = x > kHi ? kHi : x;
  xc = xc < kLo ? kLo : xc;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts (Cody-Waite).
  const float shifted = xc * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float result = p * scale;
  result = x > kHi ? __builtin_inff() : result;
  result = x < kLo ? 0.0f : result;
  return result;
}

}  // namespace swift::ops::cpu
