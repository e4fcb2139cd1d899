// io/gguf_dequant.cpp — ggml tensor types: names, block geometry, and dequantization to fp32.
//
// Invariants:
//  - Each dequantizer reproduces llama.cpp's reference dequantize_row_<type> (ggml-quants.c) bit for bit:
//    same element order, same float operations in the same order. Every product before an add is exact in
//    fp32 (an fp16 scale has 11 significant bits, times a 6-bit sub-scale, times a value of at most 6 bits:
//    at most 23 bits), so a fused multiply-add could not change a result; the pragma below still forbids
//    contraction (GCC fuses with -march=native even in ISO mode) so that the code computes literally what
//    the reference computes.
//  - Blocks are read byte-wise (little-endian fields assembled from bytes), so the source needs no
//    alignment and the code is endian-independent; GGUF is little-endian.
//  - ggml_dequantize_row works on whole blocks; ggml_dequantize_rows splits big jobs over rows with OpenMP
//    (each row is a whole number of blocks because ne[0] is, which the GGUF reader checks).
//
// Block layouts (QK = 32 for the legacy types, QK_K = 256 for the k-quants; "d"/"m" are fp16):
//   Q4_0  d, qs[16]          x = (nibble - 8) * d;   byte j holds element j (low) and j+16 (high)
//   Q4_1  d, m, qs[16]       x = nibble * d + m
//   Q5_0  d, qh[4], qs[16]   5th bit of element j is bit j of the little-endian u32 qh; x = (q - 16) * d
//   Q5_1  d, m, qh[4], qs[16]  x = q * d + m
//   Q8_0  d, qs[32] int8     x = q * d
//   Q2_K  scales[16], qs[64], d, dmin: 16 groups of 16; scale byte = 4-bit scale | 4-bit min << 4
//   Q3_K  hmask[32], qs[64], scales[12], d: 16 groups of 16, 6-bit signed scales (offset 32); the high
//         bit of each 3-bit value is in hmask, a cleared bit means "subtract 4"
//   Q4_K  d, dmin, scales[12], qs[128]: 8 groups of 32, 6-bit scale and min packed in 12 bytes
//   Q5_K  d, dmin, scales[12], qh[32], qs[128]: as Q4_K plus a fifth bit per element from qh
//   Q6_K  ql[128], qh[64], scales[16] int8, d: 16 groups of 16, 6-bit values offset by 32
#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "io/gguf.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  // GCC contracts a * b + c into FMA even in ISO mode otherwise
#endif

namespace swift::io {
namespace {

struct TypeTraits {
  const char* name = nullptr;  // nullptr: no such type
  int64_t block_elems = 0;
  size_t block_bytes = 0;
  bool dequantizable = false;
};

// Indexed by the ggml type id. Sizes as in ggml's type_traits (sizeof of each block_* struct).
constexpr size_t kTypeCount = 42;
constexpr std::array<TypeTraits, kTypeCount> make_traits() {
  std::array<TypeTraits, kTypeCount> t{};
  t[0] = {"F32", 1, 4, true};
  t[1] = {"F16", 1, 2, true};
  t[2] = {"Q4_0", 32, 18, true};
  t[3] = {"Q4_1", 32, 20, true};
  t[6] = {"Q5_0", 32, 22, true};
  t[7] = {"Q5_1", 32, 24, true};
  t[8] = {"Q8_0", 32, 34, true};
  t[9] = {"Q8_1", 32, 36, false};
  t[10] = {"Q2_K", 256, 84, true};
  t[11] = {"Q3_K", 256, 110, true};
  t[12] = {"Q4_K", 256, 144, true};
  t[13] = {"Q5_K", 256, 176, true};
  t[14] = {"Q6_K", 256, 210, true};
  t[15] = {"Q8_K", 256, 292, false};
  t[16] = {"IQ2_XXS", 256, 66, false};
  t[17] = {"IQ2_XS", 256, 74, false};
  t[18] = {"IQ3_XXS", 256, 98, false};
  t[19] = {"IQ1_S", 256, 50, false};
  t[20] = {"IQ4_NL", 32, 18, false};
  t[21] = {"IQ3_S", 256, 110, false};
  t[22] = {"IQ2_S", 256, 82, false};
  t[23] = {"IQ4_XS", 256, 136, false};
  t[24] = {"I8", 1, 1, false};
  t[25] = {"I16", 1, 2, false};
  t[26] = {"I32", 1, 4, false};
  t[27] = {"I64", 1, 8, false};
  t[28] = {"F64", 1, 8, true};
  t[29] = {"IQ1_M", 256, 56, false};
  t[30] = {"BF16", 1, 2, true};
  t[34] = {"TQ1_0", 256, 54, false};
  t[35] = {"TQ2_0", 256, 66, false};
  t[39] = {"MXFP4", 32, 17, false};
  t[40] = {"NVFP4", 64, 36, false};
  t[41] = {"Q1_0", 128, 18, false};
  return t;
}
constexpr std::array<TypeTraits, kTypeCount> kTraits = make_traits();

const TypeTraits* find_traits(GgmlType type) {
  auto id = static_cast<uint32_t>(type);
  if (id >= kTypeCount || kTraits[id].name == nullptr) return nullptr;
  return &kTraits[id];
}

const TypeTraits& traits(GgmlType type) {
  const TypeTraits* t = find_traits(type);
  if (t == nullptr) fail("ggml type {}: unknown tensor type id", static_cast<uint32_t>(type));
  return *t;
}

// fp16 -> fp32 through a table of all 65,536 values built from core's exact conversion.
struct HalfTable {
  std::array<float, 65536> values;
  HalfTable() {
    for (uint32_t i = 0; i < 65536; ++i) values[i] = f16_to_f32(static_cast<f16_t>(i));
  }
};
const HalfTable& half_table() {
  static const HalfTable table;
  return table;
}

inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

struct Dequant {
  const float* half;
  float h(const uint8_t* p) const { return half[le16(p)]; }

  // ---- legacy 32-element blocks --------------------------------------------------------------------------
  void q4_0(const uint8_t* b, float* y) const {
    const float d = h(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0F) - 8;
      const int hi = (qs[j] >> 4) - 8;
      y[j] = static_cast<float>(lo) * d;
      y[j + 16] = static_cast<float>(hi) * d;
    }
  }
  void q4_1(const uint8_t* b, float* y) const {
    const float d = h(b), m = h(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      const float lo = static_cast<float>(qs[j] & 0x0F) * d;
      const float hi = static_cast<float>(qs[j] >> 4) * d;
      y[j] = lo + m;
      y[j + 16] = hi + m;
    }
  }
  void q5_0(const uint8_t* b, float* y) const {
    const float d = h(b);
    const uint32_t qh = le32(b + 2);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = ((qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int hi = ((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      y[j] = static_cast<float>(lo) * d;
      y[j + 16] = static_cast<float>(hi) * d;
    }
  }
  void q5_1(const uint8_t* b, float* y) const {
    const float d = h(b), m = h(b + 2);
    const uint32_t qh = le32(b + 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      const float a = static_cast<float>(lo) * d;
      const float c = static_cast<float>(hi) * d;
      y[j] = a + m;
      y[j + 16] = c + m;
    }
  }
  void q8_0(const uint8_t* b, float* y) const {
    const float d = h(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }

  // ---- k-quants (256-element super-blocks) ---------------------------------------------------------------
  void q2_k(const uint8_t* b, float* y) const {
    const uint8_t* scales = b;
    const uint8_t* q = b + 16;
    const float d = h(b + 80), dmin = h(b + 82);
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {  // 128 elements from 32 bytes, 2 bits at a time
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {       // 16 elements from bytes [16 * part, 16 * part + 16)
          const uint8_t sc = scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0F);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const float v = dl * static_cast<float>((q[16 * part + l] >> shift) & 3);
            *y++ = v - ml;
          }
        }
      }
    }
  }
  void q3_k(const uint8_t* b, float* y) const {
    const uint8_t* hmask = b;
    const uint8_t* q = b + 32;
    const uint8_t* packed = b + 96;
    const float d = h(b + 108);
    // 16 six-bit scales: low 4 bits from packed[0..7] (low nibbles for 0-7, high nibbles for 8-15), high
    // 2 bits from packed[8..11], two bits per scale: scale s takes bits 2*(s/4) of packed[8 + s % 4].
    int8_t scale[16];
    for (int s = 0; s < 16; ++s) {
      const int low = (s < 8) ? (packed[s] & 0x0F) : (packed[s - 8] >> 4);
      const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
      scale[s] = static_cast<int8_t>((low | (high << 4)) - 32);
    }
    int is = 0;
    uint8_t bit = 1;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, bit = static_cast<uint8_t>(bit << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(scale[is++]);
          for (int l = 0; l < 16; ++l) {
            const int idx = 16 * part + l;
            const int v = ((q[idx] >> shift) & 3) - ((hmask[idx] & bit) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
  // 6-bit scale and min of group j (0..7) from the 12 packed bytes of Q4_K / Q5_K.
  static void scale_min_k4(int j, const uint8_t* s, int& sc, int& mn) {
    if (j < 4) {
      sc = s[j] & 63;
      mn = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
      mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
  }
  void q4_k(const uint8_t* b, float* y) const {
    const float d = h(b), dmin = h(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int g = 0; g < 8; g += 2, q += 32) {  // 64 elements from 32 bytes: low nibbles, then high
      int sc, mn;
      scale_min_k4(g, scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      scale_min_k4(g + 1, scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        const float v = d1 * static_cast<float>(q[l] & 0x0F);
        *y++ = v - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const float v = d2 * static_cast<float>(q[l] >> 4);
        *y++ = v - m2;
      }
    }
  }
  void q5_k(const uint8_t* b, float* y) const {
    const float d = h(b), dmin = h(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + 48;
    for (int g = 0; g < 8; g += 2, q += 32) {  // groups g and g+1 take their 5th bit from bits g, g+1 of qh
      int sc, mn;
      scale_min_k4(g, scales, sc, mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      scale_min_k4(g + 1, scales, sc, mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0F) + (((qh[l] >> g) & 1) << 4);
        const float p = d1 * static_cast<float>(v);
        *y++ = p - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) + (((qh[l] >> (g + 1)) & 1) << 4);
        const float p = d2 * static_cast<float>(v);
        *y++ = p - m2;
      }
    }
  }
  void q6_k(const uint8_t* b, float* y) const {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = h(b + 208);
    // Each 128-element half uses 64 ql bytes, 32 qh bytes and 8 scales. Element 32*k + l (k = 0..3) takes
    // its low nibble from ql[l + 32*(k&1)] (low nibble for k < 2, high for k >= 2) and its top two bits from
    // bits 2k, 2k+1 of qh[l]; its scale is sc[2k + l/16].
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
};

template <typename BlockFn>
void for_blocks(const uint8_t* src, float* dst, int64_t n, int64_t block_elems, size_t block_bytes, BlockFn fn) {
  const int64_t blocks = n / block_elems;
  for (int64_t i = 0; i < blocks; ++i) fn(src + static_cast<size_t>(i) * block_bytes, dst + i * block_elems);
}

}  // namespace

const char* ggml_type_name(GgmlType type) {
  const TypeTraits* t = find_traits(type);
  return t == nullptr ? "unknown" : t->name;
}

bool ggml_type_known(uint32_t type_id) { return find_traits(static_cast<GgmlType>(type_id)) != nullptr; }

bool ggml_type_dequantizable(GgmlType type) {
  const TypeTraits* t = find_traits(type);
  return t != nullptr && t->dequantizable;
}

int64_t ggml_block_elems(GgmlType type) { return traits(type).block_elems; }
size_t ggml_block_bytes(GgmlType type) { return traits(type).block_bytes; }

void ggml_dequantize_row(GgmlType type, const void* src_ptr, float* dst, int64_t n) {
  const TypeTraits& t = traits(type);
  SWIFT_CHECK(t.dequantizable, "ggml_dequantize_row: tensor type {} cannot be dequantized (supported: F32, F16, "
              "BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K); re-quantize the model "
              "with one of these types", t.name);
  SWIFT_CHECK(n >= 0 && n % t.block_elems == 0, "ggml_dequantize_row: {} elements of {} are not a whole number "
              "of {}-element blocks", n, t.name, t.block_elems);
  const auto* src = static_cast<const uint8_t*>(src_ptr);
  const Dequant dq{half_table().values.data()};
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = dq.h(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(le16(src + 2 * i));
      return;
    case GgmlType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return;
    case GgmlType::Q4_0:
      return for_blocks(src, dst, n, 32, 18, [&](const uint8_t* b, float* y) { dq.q4_0(b, y); });
    case GgmlType::Q4_1:
      return for_blocks(src, dst, n, 32, 20, [&](const uint8_t* b, float* y) { dq.q4_1(b, y); });
    case GgmlType::Q5_0:
      return for_blocks(src, dst, n, 32, 22, [&](const uint8_t* b, float* y) { dq.q5_0(b, y); });
    case GgmlType::Q5_1:
      return for_blocks(src, dst, n, 32, 24, [&](const uint8_t* b, float* y) { dq.q5_1(b, y); });
    case GgmlType::Q8_0:
      return for_blocks(src, dst, n, 32, 34, [&](const uint8_t* b, float* y) { dq.q8_0(b, y); });
    case GgmlType::Q2_K:
      return for_blocks(src, dst, n, 256, 84, [&](const uint8_t* b, float* y) { dq.q2_k(b, y); });
    case GgmlType::Q3_K:
      return for_blocks(src, dst, n, 256, 110, [&](const uint8_t* b, float* y) { dq.q3_k(b, y); });
    case GgmlType::Q4_K:
      return for_blocks(src, dst, n, 256, 144, [&](const uint8_t* b, float* y) { dq.q4_k(b, y); });
    case GgmlType::Q5_K:
      return for_blocks(src, dst, n, 256, 176, [&](const uint8_t* b, float* y) { dq.q5_k(b, y); });
    case GgmlType::Q6_K:
      return for_blocks(src, dst, n, 256, 210, [&](const uint8_t* b, float* y) { dq.q6_k(b, y); });
    default:
      fail("ggml_dequantize_row: no dequantizer for {}", t.name);
  }
}

void ggml_dequantize_rows(GgmlType type, const void* src, float* dst, int64_t rows, int64_t row_len,
                          const int64_t* row_order) {
  const TypeTraits& t = traits(type);
  // Everything that can throw is checked here: exceptions must not leave the parallel region below.
  SWIFT_CHECK(t.dequantizable, "ggml_dequantize_rows: tensor type {} cannot be dequantized", t.name);
  SWIFT_CHECK(rows >= 0 && row_len >= 0 && row_len % t.block_elems == 0,
              "ggml_dequantize_rows: rows of {} elements of {} are not whole {}-element blocks", row_len, t.name,
              t.block_elems);
  const size_t row_bytes = static_cast<size_t>(row_len / t.block_elems) * t.block_bytes;
  const auto* base = static_cast<const uint8_t*>(src);
  (void)half_table();  // build the table before the threads start
  // Chunks of about 64K elements, handed out dynamically (a busy core does not hold the others up); small
  // jobs stay on the calling thread.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row_len, 1));
  const int64_t chunks = (rows + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(rows, (c + 1) * chunk);
    for (int64_t r = c * chunk; r < end; ++r) {
      const int64_t from = row_order != nullptr ? row_order[r] : r;
      ggml_dequantize_row(type, base + static_cast<size_t>(from) * row_bytes, dst + r * row_len, row_len);
    }
  }
}

}  // namespace swift::io
