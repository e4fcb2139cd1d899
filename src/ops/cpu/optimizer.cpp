// ops/cpu/optimizer.cpp — fast CPU AdamW (multi-tensor), global gradient norm and clip-by-norm, each operation
// rounded as torch's CPU kernels round it (see ops.h for the formulas).
//
// Invariants:
//  - Work is split into chunks of kChunk elements over all tensors (a flat list of (tensor, range) items), so
//    hundreds of small LoRA tensors and a few large ones load-balance in one parallel region.
//  - AdamW is element-wise: the result does not depend on the split. Where torch's vectorised kernels fuse a
//    multiply-add (lerp, addcmul) we use an explicit fma; no other product feeds an addition (the decay
//    param *= decay is its own pass, as torch's separate mul_ kernel), so compiler contraction cannot fuse
//    what torch rounds twice. The main loop uses AVX-512 / AVX2 intrinsics (a vectorised sqrt without errno,
//    which GCC will not emit from std::sqrt under -fmath-errno); the tail and other CPUs use the same scalar
//    operations.
//  - grad_norm sums squares in fp64 per chunk, then the chunk sums in chunk order: the same value for any thread
//    count.
#include <omp.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

constexpr int64_t kChunk = 16384;

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

template <typename Get>
std::vector<Chunk> chunks_of(size_t count, Get&& numel) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = numel(i);
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({i, b, std::min(n, b + kChunk)});
  }
  return chunks;
}

struct AdamWScalars {
  float decay, w1, w1_m1, beta2, w2, bc2_sqrt, eps, step_size_neg, grad_scale;
  bool small_weight;  // |w1| < 0.5: torch's lerp branch
};

// exp_avg.lerp_(grad, w1) as torch's vectorised CPU kernel: fma(w1, grad - exp_avg, exp_avg) when |w1| < 0.5,
// else fma(w1 - 1, grad - exp_avg, grad); then exp_avg_sq, denom and the param update (param already decayed).
inline void adamw_scalar(const AdamWScalars& k, float& p, float g_raw, float& m, float& v) {
  const float g = g_raw * k.grad_scale;
  const float diff = g - m;
  const float mi = k.small_weight ? std::fma(k.w1, diff, m) : std::fma(k.w1_m1, diff, g);
  const float vi = std::fma(k.w2 * g, g, v * k.beta2);
  const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
  p = p + (k.step_size_neg * mi) / denom;
  m = mi;
  v = vi;
}

void adamw_chunk(const AdamWScalars& k, float* p, const float* g, float* m, float* v, int64_t begin, int64_t end) {
  if (k.decay != 1.0f) {  // param.mul_(1 - lr * weight_decay): rounded before the update, as torch
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) p[i] *= k.decay;
  }
  int64_t i = begin;
#if defined(__AVX512F__)
  const __m512 w = _mm512_set1_ps(k.small_weight ? k.w1 : k.w1_m1), w2 = _mm512_set1_ps(k.w2);
  const __m512 beta2 = _mm512_set1_ps(k.beta2), bc2 = _mm512_set1_ps(k.bc2_sqrt), eps = _mm512_set1_ps(k.eps);
  const __m512 step = _mm512_set1_ps(k.step_size_neg), gscale = _mm512_set1_ps(k.grad_scale);
  for (; i + 16 <= end; i += 16) {  // maskz sqrt with a full mask: GCC 12 warns on the unmasked intrinsic
    const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gscale), mi0 = _mm512_loadu_ps(m + i);
    const __m512 diff = _mm512_sub_ps(gi, mi0);
    const __m512 mi = _mm512_fmadd_ps(w, diff, k.small_weight ? mi0 : gi);
    const __m512 vi = _mm512_fmadd_ps(_mm512_mul_ps(w2, gi), gi, _mm512_mul_ps(_mm512_loadu_ps(v + i), beta2));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(0xffff, vi), bc2), eps);
    _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), _mm512_div_ps(_mm512_mul_ps(step, mi), denom)));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 w = _mm256_set1_ps(k.small_weight ? k.w1 : k.w1_m1), w2 = _mm256_set1_ps(k.w2);
  const __m256 beta2 = _mm256_set1_ps(k.beta2), bc2 = _mm256_set1_ps(k.bc2_sqrt), eps = _mm256_set1_ps(k.eps);
  const __m256 step = _mm256_set1_ps(k.step_size_neg), gscale = _mm256_set1_ps(k.grad_scale);
  for (; i + 8 <= end; i += 8) {
    const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gscale), mi0 = _mm256_loadu_ps(m + i);
    const __m256 diff = _mm256_sub_ps(gi, mi0);
    const __m256 mi = _mm256_fmadd_ps(w, diff, k.small_weight ? mi0 : gi);
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(w2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), beta2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(_mm256_loadu_ps(p + i), _mm256_div_ps(_mm256_mul_ps(step, mi), denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
#endif
  for (; i < end; ++i) adamw_scalar(k, p[i], g[i], m[i], v[i]);
}

}  // namespace

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step) {
  SWIFT_PROFILE("adamw_step");
  // Scalars in double, as Python computes them; each becomes a float scalar when it meets an fp32 tensor.
  const double bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(config.beta2, static_cast<double>(step));
  AdamWScalars k;
  k.step_size_neg = static_cast<float>(-(config.lr / bias_correction1));
  k.bc2_sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));
  // torch skips param.mul_ without weight decay; multiplying by exactly 1 changes nothing.
  k.decay = config.weight_decay != 0.0 ? static_cast<float>(1.0 - config.lr * config.weight_decay) : 1.0f;
  k.w1 = static_cast<float>(1.0 - config.beta1);
  k.w1_m1 = k.w1 - 1.0f;
  k.beta2 = static_cast<float>(config.beta2);
  k.w2 = static_cast<float>(1.0 - config.beta2);
  k.eps = static_cast<float>(config.eps);
  k.small_weight = std::fabs(k.w1) < 0.5f;
  k.grad_scale = config.grad_scale;
  const std::vector<Chunk> chunks = chunks_of(tensors.size(), [&](size_t i) { return tensors[i].param.numel(); });
  const int64_t count = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t ci = 0; ci < count; ++ci) {
    const Chunk& ch = chunks[static_cast<size_t>(ci)];
    const AdamWTensor& t = tensors[ch.tensor];
    float* p = t.param.data<float>();
    const float* g = t.grad.data<float>();
    float* m = t.exp_avg.data<float>();
    float* v = t.exp_avg_sq.data<float>();
    adamw_chunk(k, p, g, m, v, ch.begin, ch.end);
    if (t.product.defined()) {
      from_f32(p + ch.begin, t.product.dtype(),
               static_cast<char*>(t.product.raw()) + dtype_bytes(t.product.dtype(), ch.begin), ch.end - ch.begin);
    }
  }
}

float grad_norm(std::span<const Tensor> grads) {
  SWIFT_PROFILE("grad_norm");
  const std::vector<Chunk> chunks = chunks_of(grads.size(), [&](size_t i) { return grads[i].numel(); });
  const int64_t count = static_cast<int64_t>(chunks.size());
  std::vector<double> partial(chunks.size(), 0.0);
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t ci = 0; ci < count; ++ci) {
    const Chunk& ch = chunks[static_cast<size_t>(ci)];
    const float* g = grads[ch.tensor].data<float>();
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = ch.begin; i < ch.end; ++i) sum += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(ci)] = sum;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return static_cast<float>(std::sqrt(total));
}

namespace {
// g *= factor for every element of every tensor, in chunks over the threads (clip_grad_norm, scale_gradients).
void multiply_all(std::span<const Tensor> grads, float factor) {
  const std::vector<Chunk> chunks = chunks_of(grads.size(), [&](size_t i) { return grads[i].numel(); });
  const int64_t count = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(static) if (count > 1)
  for (int64_t ci = 0; ci < count; ++ci) {
    const Chunk& ch = chunks[static_cast<size_t>(ci)];
    float* g = grads[ch.tensor].data<float>();
#pragma omp simd
    for (int64_t i = ch.begin; i < ch.end; ++i) g[i] *= factor;
  }
}
}  // namespace

float clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  SWIFT_PROFILE("clip_grad_norm");
  const float total = grad_norm(grads);
  multiply_all(grads, clip_coefficient(total, max_norm));
  return total;
}

void scale_gradients(std::span<const Tensor> grads, float factor) {
  SWIFT_PROFILE("scale_gradients");
  multiply_all(grads, factor);
}

void zero_gradients(std::span<const Tensor> grads) {
  SWIFT_PROFILE("zero_gradients");
  for (const Tensor& g : grads) {
    if (g.nbytes() > 0) std::memset(g.raw(), 0, g.nbytes());
  }
}

}  // namespace swift::ops::cpu
