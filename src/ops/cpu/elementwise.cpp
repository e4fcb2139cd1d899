// ops/cpu/elementwise.cpp — fast CPU cast, add, swiglu, embedding; dtype conversion rows; per-thread scratch.
//
// Invariants:
//  - Element-wise ops split the flat range into fixed chunks (kChunk) across OpenMP threads; each element is
//    computed independently, so aliasing out with an input is safe.
//  - Conversions are exact to fp32 and round to nearest even from fp32 (AVX-512/AVX2/F16C instructions when
//    compiled for them; the scalar functions of core/dtype.h otherwise and for tails).
#include <omp.h>

#include <algorithm>
#include <array>
#include <vector>

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {
constexpr int64_t kChunk = 16384;         // elements per parallel work item
constexpr int64_t kParallelMin = 65536;   // below this many elements, one thread

int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }
}  // namespace

// ---- conversions --------------------------------------------------------------------------------------------
void to_f32(const void* src, DType dtype, float* dst, int64_t n) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (dtype == DType::BF16) {  // bf16 is the top half of an fp32: widen and shift (explicit: not every GCC
                               // vectorises the scalar loop)
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
      // maskz forms with a full mask: same instructions, and GCC 12 does not warn about its own
      // _mm512_undefined_epi32 as it does for the unmasked intrinsics.
      const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, h);
      _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16)));
    }
#elif defined(__AVX2__)
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
#endif
    for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
    return;
  }
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
}

void from_f32(const float* src, DType dtype, void* dst, int64_t n) {
  if (dtype == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (dtype == DType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
    return;
  }
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
#endif
  for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
}

float* thread_scratch(ScratchSlot slot, size_t floats) {
  thread_local std::array<std::vector<float>, static_cast<size_t>(ScratchSlot::Count)> buffers;
  std::vector<float>& buffer = buffers[static_cast<size_t>(slot)];
  if (buffer.size() < floats) buffer.resize(std::max(floats, buffer.size() * 3 / 2));
  return buffer.data();
}

// ---- ops ----------------------------------------------------------------------------------------------------
void cast(const Tensor& src, Tensor& dst) {
  SWIFT_PROFILE("cast");
  const int64_t n = src.numel();
  const DType sd = src.dtype(), dd = dst.dtype();
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  const size_t ss = dtype_bytes(sd, 1), ds = dtype_bytes(dd, 1);
  if (sd == dd) {
    if (s != d) std::memmove(d, s, static_cast<size_t>(n) * ss);
    return;
  }
#pragma omp parallel if (n >= kParallelMin)
  {
    float* row = thread_scratch(ScratchSlot::Row, kChunk);
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks(n); ++c) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      if (sd == DType::F32) {
        from_f32(reinterpret_cast<const float*>(s) + begin, dd, d + begin * ds, len);
      } else if (dd == DType::F32) {
        to_f32(s + begin * ss, sd, reinterpret_cast<float*>(d) + begin, len);
      } else {
        to_f32(s + begin * ss, sd, row, len);
        from_f32(row, dd, d + begin * ds, len);
      }
    }
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  SWIFT_PROFILE("add");
  const int64_t n = a.numel();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks(n); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) po[i] = pa[i] + pb[i];
  }
}

// out = gate / (1 + exp(-gate)) * up, as torch's silu(gate) * up in fp32.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  SWIFT_PROFILE("swiglu");
  const int64_t n = gate.numel();
  const float* g = gate.data<float>();
  const float* u = up.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (n >= kParallelMin / 4)
  for (int64_t c = 0; c < chunks(n); ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      o[i] = gi / (1.0f + exp_approx(-gi)) * u[i];
    }
  }
}

namespace {
// Rows id - vocab_offset of the table (zeros for ids outside it: another vocabulary shard's), as F32.
void gather_rows(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out) {
  const int64_t tokens = ids.size(0), c = table.size(1), vocab = table.size(0);
  const int32_t* id = ids.data<int32_t>();
  const char* rows = static_cast<const char*>(table.raw());
  const size_t row_bytes = dtype_bytes(table.dtype(), c);
  float* o = out.data<float>();
#pragma omp parallel for schedule(static) if (tokens * c >= kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = id[t] - vocab_offset;
    if (row < 0 || row >= vocab) {
      std::fill(o + t * c, o + (t + 1) * c, 0.0f);
    } else {
      to_f32(rows + static_cast<size_t>(row) * row_bytes, table.dtype(), o + t * c, c);
    }
  }
}
}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  SWIFT_PROFILE("embedding");
  gather_rows(table, ids, 0, out);  // ids were checked against the vocabulary: every row is the table's
}

void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out) {
  SWIFT_PROFILE("embedding_shard");
  gather_rows(table, ids, vocab_offset, out);
}

}  // namespace swift::ops::cpu
