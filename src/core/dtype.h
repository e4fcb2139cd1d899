// core/dtype.h — element types and their storage sizes; scalar conversions bf16/fp16 <-> fp32.
//
// Invariants:
//  - Every dtype is stored in blocks: `block_elems` elements take `block_bytes` bytes. Plain types have
//    block_elems == 1; packed 4-bit (NF4) stores two codes per byte, its scales live in a separate tensor.
//  - Conversions to fp32 are exact; fp32 -> bf16/fp16 rounds to nearest even (as torch does), NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace swift {

enum class DType : uint8_t {
  F32,
  BF16,
  F16,
  I32,
  I64,
  U8,
  NF4,  // packed 4-bit codes, two per byte (low nibble first); absmax scales in a separate F32 tensor
};

struct DTypeInfo {
  const char* name;
  int block_elems;
  int block_bytes;
  bool is_float;
};

const DTypeInfo& dtype_info(DType dtype);
inline const char* dtype_name(DType dtype) { return dtype_info(dtype).name; }
// Bytes taken by `numel` elements; throws if numel is not a whole number of blocks.
size_t dtype_bytes(DType dtype, int64_t numel);
// Parses "F32", "float32", "bfloat16", "BF16", "F16", "float16", "I32", "I64", "U8", ...; throws on unknown.
DType dtype_from_string(std::string_view name);

// ---- scalar conversions -------------------------------------------------------------------------
using bf16_t = uint16_t;
using f16_t = uint16_t;

inline float bf16_to_f32(bf16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline bf16_t f32_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<bf16_t>((bits >> 16) | 0x40u);  // quiet NaN
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>((bits + rounding_bias) >> 16);
}

float f16_to_f32(f16_t v);
f16_t f32_to_f16(float v);

}  // namespace swift
