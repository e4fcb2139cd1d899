// core/dtype.cpp — dtype table and IEEE half conversions (portable bit manipulation, round to nearest even).
#include "core/dtype.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace swift {

namespace {
constexpr std::array<DTypeInfo, 7> kDTypes = {{
    {"F32", 1, 4, true},
    {"BF16", 1, 2, true},
    {"F16", 1, 2, true},
    {"I32", 1, 4, false},
    {"I64", 1, 8, false},
    {"U8", 1, 1, false},
    {"NF4", 2, 1, false},
}};
}  // namespace

const DTypeInfo& dtype_info(DType dtype) { return kDTypes.at(static_cast<size_t>(dtype)); }

size_t dtype_bytes(DType dtype, int64_t numel) {
  const DTypeInfo& info = dtype_info(dtype);
  SWIFT_CHECK(numel >= 0 && numel % info.block_elems == 0,
              "dtype {}: {} elements is not a whole number of blocks of {}", info.name, numel, info.block_elems);
  return static_cast<size_t>(numel / info.block_elems) * static_cast<size_t>(info.block_bytes);
}

DType dtype_from_string(std::string_view name) {
  std::string upper;
  for (char c : name) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (upper == "F32" || upper == "FLOAT32" || upper == "FLOAT" || upper == "FP32") return DType::F32;
  if (upper == "BF16" || upper == "BFLOAT16") return DType::BF16;
  if (upper == "F16" || upper == "FLOAT16" || upper == "HALF" || upper == "FP16") return DType::F16;
  if (upper == "I32" || upper == "INT32") return DType::I32;
  if (upper == "I64" || upper == "INT64") return DType::I64;
  if (upper == "U8" || upper == "UINT8") return DType::U8;
  if (upper == "NF4") return DType::NF4;
  fail("unknown dtype '{}' (expected one of F32, BF16, F16, I32, I64, U8, NF4)", name);
}

float f16_to_f32(f16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

f16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    return static_cast<f16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<f16_t>(sign | 0x7c00u);  // rounds to >= 65520: overflow
  if (abs < 0x38800000u) {                                             // below 2^-14: subnormal or zero
    if (abs < 0x33000000u) return static_cast<f16_t>(sign);             // below half of smallest subnormal
    uint32_t exponent = abs >> 23;
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent-150); the subnormal unit is 2^-24, so shift right by 126 - exponent.
    uint32_t rshift = 126 - exponent;  // in [14, 24+]
    uint32_t q = mantissa >> rshift;
    uint32_t rem = mantissa & ((1u << rshift) - 1u);
    uint32_t halfway = 1u << (rshift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<f16_t>(sign | q);
  }
  uint32_t exponent = (abs >> 23) - 127 + 15;
  uint32_t mantissa = abs & 0x7fffffu;
  uint32_t q = (exponent << 10) | (mantissa >> 13);
  uint32_t rem = mantissa & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry into exponent is correct rounding
  return static_cast<f16_t>(sign | q);
}

}  // namespace swift
