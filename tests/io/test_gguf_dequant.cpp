// tests/io/test_gguf_dequant.cpp — dequantization of every supported ggml type.
//
// Two independent checks:
//  1. Hand-built blocks: each test packs chosen scales and quantized values into the block layout (encoders
//     written here from the format description) and computes the expected values from those numbers. Scales
//     are powers of two and small integers, so every expected value is exact in fp32 whatever the order of
//     operations.
//  2. tests/fixtures/gguf/dequant_cases.json: random blocks (finite fp16 scales) and their values as the
//     `gguf` Python package dequantizes them (scripts/golden/make_gguf_fixtures.py); compared bit for bit
//     against that independent implementation of the layouts, with scales of every magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "io/gguf.h"
#include "test_gguf_writer.h"

namespace swift::test {
namespace {

using io::GgmlType;

struct Lcg {
  uint32_t state;
  int next(int lo, int hi) {  // uniform-ish in [lo, hi]
    state = state * 1664525u + 1013904223u;
    return lo + static_cast<int>((state >> 8) % static_cast<uint32_t>(hi - lo + 1));
  }
};

void put_half(Bytes& b, size_t pos, float v) { patch<uint16_t>(b, pos, f32_to_f16(v)); }

std::vector<float> dequant(GgmlType type, const Bytes& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), std::nanf(""));
  io::ggml_dequantize_row(type, b.data(), out.data(), n);
  return out;
}

void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << " element " << i;
  }
}

TEST(GgufDequant, Geometry) {
  EXPECT_EQ(io::ggml_block_elems(GgmlType::Q4_1), 32);
  EXPECT_EQ(io::ggml_block_bytes(GgmlType::Q4_1), 20u);
  EXPECT_EQ(io::ggml_block_elems(GgmlType::Q6_K), 256);
  EXPECT_EQ(io::ggml_block_bytes(GgmlType::Q6_K), 210u);
  EXPECT_EQ(io::ggml_block_bytes(GgmlType::BF16), 2u);
  EXPECT_STREQ(io::ggml_type_name(GgmlType::Q5_K), "Q5_K");
  EXPECT_STREQ(io::ggml_type_name(static_cast<GgmlType>(4)), "unknown");
  EXPECT_TRUE(io::ggml_type_known(23));   // IQ4_XS
  EXPECT_FALSE(io::ggml_type_known(4));   // removed Q4_2
  EXPECT_FALSE(io::ggml_type_known(999));
  EXPECT_TRUE(io::ggml_type_dequantizable(GgmlType::Q3_K));
  EXPECT_FALSE(io::ggml_type_dequantizable(GgmlType::Q8_K));
  expect_error([] { io::ggml_block_bytes(static_cast<GgmlType>(5)); }, {"unknown"});
  float out[32];
  Bytes b(34, 0);
  expect_error([&] { io::ggml_dequantize_row(GgmlType::Q8_0, b.data(), out, 16); }, {"Q8_0", "32-element"});
  std::vector<float> big(256);
  expect_error([&] { io::ggml_dequantize_row(static_cast<GgmlType>(23), b.data(), big.data(), 256); },
               {"IQ4_XS", "cannot be dequantized"});
}

TEST(GgufDequant, FloatTypes) {
  {
    const std::vector<uint16_t> h = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x8000, 0x3555, 0x7C00, 0x0400};
    Bytes b;
    for (uint16_t v : h) put<uint16_t>(b, v);
    const std::vector<float> want = {1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), -0.0f, 0.333251953125f,
                                     std::numeric_limits<float>::infinity(), std::ldexp(1.0f, -14)};
    auto got = dequant(GgmlType::F16, b, 8);
    expect_same(got, want, "F16");
    EXPECT_TRUE(std::signbit(got[4]));
    Bytes nan;
    put<uint16_t>(nan, 0x7E00);
    EXPECT_TRUE(std::isnan(dequant(GgmlType::F16, nan, 1)[0]));
  }
  {
    const std::vector<uint16_t> h = {0x3F80, 0xC0A0, 0x4049, 0x0001, 0xFF80};
    Bytes b;
    for (uint16_t v : h) put<uint16_t>(b, v);
    const std::vector<float> want = {1.0f, -5.0f, 3.140625f, std::ldexp(1.0f, -133),
                                     -std::numeric_limits<float>::infinity()};
    expect_same(dequant(GgmlType::BF16, b, 5), want, "BF16");
  }
  {
    Bytes b;
    for (float v : {1.5f, -0.0f, 3.0e38f}) put<float>(b, v);
    expect_same(dequant(GgmlType::F32, b, 3), {1.5f, -0.0f, 3.0e38f}, "F32");
  }
  {
    Bytes b;
    for (double v : {0.1, -2.0, 1e300}) put<double>(b, v);
    expect_same(dequant(GgmlType::F64, b, 3), {0.1f, -2.0f, std::numeric_limits<float>::infinity()}, "F64");
  }
}

// ---- legacy 32-element blocks --------------------------------------------------------------------------------

TEST(GgufDequant, Q4_0) {
  Lcg rng{1};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 3; ++blk) {
    const float d = blk == 1 ? -0.125f : 0.25f;
    Bytes block(18, 0);
    put_half(block, 0, d);
    int q[32];
    for (int& v : q) v = rng.next(0, 15);
    for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e] - 8) * d);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q4_0, b, 96), want, "Q4_0");
}

TEST(GgufDequant, Q4_1) {
  Lcg rng{2};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 3; ++blk) {
    const float d = 0.5f, m = blk == 2 ? 3.0f : -1.5f;
    Bytes block(20, 0);
    put_half(block, 0, d);
    put_half(block, 2, m);
    int q[32];
    for (int& v : q) v = rng.next(0, 15);
    for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e]) * d + m);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q4_1, b, 96), want, "Q4_1");
}

// Q5_0 / Q5_1: low nibbles as Q4, fifth bit of element e is bit e of a little-endian u32.
Bytes pack_q5(const int* q, size_t header) {
  Bytes block(header + 20, 0);
  uint32_t qh = 0;
  for (int e = 0; e < 32; ++e) qh |= static_cast<uint32_t>((q[e] >> 4) & 1) << e;
  patch<uint32_t>(block, header, qh);
  for (int j = 0; j < 16; ++j) block[header + 4 + j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
  return block;
}

TEST(GgufDequant, Q5_0) {
  Lcg rng{3};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 3; ++blk) {
    const float d = blk == 0 ? -0.125f : 2.0f;
    int q[32];
    for (int& v : q) v = rng.next(0, 31);
    q[0] = 31;
    q[31] = 16;
    Bytes block = pack_q5(q, 2);
    put_half(block, 0, d);
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e] - 16) * d);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q5_0, b, 96), want, "Q5_0");
}

TEST(GgufDequant, Q5_1) {
  Lcg rng{4};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 3; ++blk) {
    const float d = 0.25f, m = blk == 1 ? 2.0f : -4.0f;
    int q[32];
    for (int& v : q) v = rng.next(0, 31);
    Bytes block = pack_q5(q, 4);
    put_half(block, 0, d);
    put_half(block, 2, m);
    for (int e = 0; e < 32; ++e) want.push_back(static_cast<float>(q[e]) * d + m);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q5_1, b, 96), want, "Q5_1");
}

TEST(GgufDequant, Q8_0) {
  Lcg rng{5};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? 0.0625f : -3.0f;
    Bytes block(34, 0);
    put_half(block, 0, d);
    for (int e = 0; e < 32; ++e) {
      const int q = e == 0 ? -128 : e == 1 ? 127 : rng.next(-128, 127);
      block[2 + e] = static_cast<uint8_t>(static_cast<int8_t>(q));
      want.push_back(static_cast<float>(q) * d);
    }
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q8_0, b, 64), want, "Q8_0");
}

// ---- k-quants -------------------------------------------------------------------------------------------------
// In Q2_K and Q3_K, the 2-bit value of element e (0..255) sits in byte 32*(e/128) + e%32 at bit
// 2*((e%128)/32); its group of 16 is e/16.
void put_2bit(uint8_t* qs, int e, int v) {
  qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((v & 3) << (2 * ((e % 128) / 32)));
}

TEST(GgufDequant, Q2_K) {
  Lcg rng{6};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 2; ++blk) {
    const float d = 0.5f, dmin = blk == 0 ? 0.25f : 1.0f;
    Bytes block(84, 0);
    int sc[16], mn[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = rng.next(0, 15);
      mn[g] = rng.next(0, 15);
      block[g] = static_cast<uint8_t>(sc[g] | (mn[g] << 4));
    }
    for (int e = 0; e < 256; ++e) {
      const int q = rng.next(0, 3);
      put_2bit(block.data() + 16, e, q);
      want.push_back(d * static_cast<float>(sc[e / 16]) * static_cast<float>(q) -
                     dmin * static_cast<float>(mn[e / 16]));
    }
    put_half(block, 80, d);
    put_half(block, 82, dmin);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q2_K, b, 512), want, "Q2_K");
}

TEST(GgufDequant, Q3_K) {
  Lcg rng{7};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? 0.5f : -0.25f;
    Bytes block(110, 0);
    uint8_t* hmask = block.data();
    uint8_t* qs = block.data() + 32;
    uint8_t* packed = block.data() + 96;
    int sc[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = g == 0 ? -32 : g == 1 ? 31 : rng.next(-32, 31);
      const int raw = sc[g] + 32;  // 6 bits: low 4 in the nibbles of packed[0..7], high 2 in packed[8..11]
      if (g < 8) {
        packed[g] |= static_cast<uint8_t>(raw & 15);
      } else {
        packed[g - 8] |= static_cast<uint8_t>((raw & 15) << 4);
      }
      packed[8 + g % 4] |= static_cast<uint8_t>((raw >> 4) << (2 * (g / 4)));
    }
    for (int e = 0; e < 256; ++e) {
      const int v = rng.next(-4, 3);  // 3-bit signed: high bit set means "no -4"
      if (v >= 0) hmask[e % 32] |= static_cast<uint8_t>(1u << (e / 32));
      put_2bit(qs, e, v >= 0 ? v : v + 4);
      want.push_back(d * static_cast<float>(sc[e / 16]) * static_cast<float>(v));
    }
    put_half(block, 108, d);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q3_K, b, 512), want, "Q3_K");
}

// Q4_K / Q5_K: 8 groups of 32 with 6-bit scales and mins packed in 12 bytes: bytes 0-3 hold scales 0-3 in
// their low 6 bits and the top 2 bits of scales 4-7; bytes 4-7 the same for mins; bytes 8-11 the low 4 bits
// of scale 4+j (low nibble) and min 4+j (high nibble).
void pack_scales_k4(uint8_t* s, const int* sc, const int* mn) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

void k4_block(Lcg& rng, bool five_bit, Bytes& b, std::vector<float>& want, float d, float dmin) {
  Bytes block(five_bit ? 176 : 144, 0);
  put_half(block, 0, d);
  put_half(block, 2, dmin);
  int sc[8], mn[8];
  for (int g = 0; g < 8; ++g) {
    sc[g] = g == 7 ? 63 : rng.next(0, 63);
    mn[g] = g == 6 ? 63 : rng.next(0, 63);
  }
  pack_scales_k4(block.data() + 4, sc, mn);
  uint8_t* qh = block.data() + 16;
  uint8_t* qs = block.data() + (five_bit ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 32;
    const int q = rng.next(0, five_bit ? 31 : 15);
    // Groups 2k and 2k+1 share bytes 32k..32k+31: low nibble for the even group, high for the odd one.
    qs[32 * (g / 2) + e % 32] |= static_cast<uint8_t>((q & 15) << (g % 2 ? 4 : 0));
    if (five_bit) qh[e % 32] |= static_cast<uint8_t>((q >> 4) << g);
    want.push_back(d * static_cast<float>(sc[g]) * static_cast<float>(q) - dmin * static_cast<float>(mn[g]));
  }
  b.insert(b.end(), block.begin(), block.end());
}

TEST(GgufDequant, Q4_K) {
  Lcg rng{8};
  Bytes b;
  std::vector<float> want;
  k4_block(rng, false, b, want, 0.5f, 0.25f);
  k4_block(rng, false, b, want, -0.125f, 2.0f);
  expect_same(dequant(GgmlType::Q4_K, b, 512), want, "Q4_K");
}

TEST(GgufDequant, Q5_K) {
  Lcg rng{9};
  Bytes b;
  std::vector<float> want;
  k4_block(rng, true, b, want, 0.5f, 0.25f);
  k4_block(rng, true, b, want, 0.25f, -1.0f);
  expect_same(dequant(GgmlType::Q5_K, b, 512), want, "Q5_K");
}

TEST(GgufDequant, Q6_K) {
  Lcg rng{10};
  Bytes b;
  std::vector<float> want;
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? 0.5f : 0.125f;
    Bytes block(210, 0);
    uint8_t* ql = block.data();
    uint8_t* qh = block.data() + 128;
    int sc[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = g == 0 ? -128 : g == 1 ? 127 : rng.next(-128, 127);
      block[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(sc[g]));
    }
    for (int e = 0; e < 256; ++e) {
      const int v = e == 5 ? -32 : e == 6 ? 31 : rng.next(-32, 31);
      const int raw = v + 32;
      // Element e: half = e/128, quarter k = (e%128)/32, l = e%32. Low 4 bits in ql[64*half + l + 32*(k%2)]
      // (low nibble for k < 2, high for k >= 2); top 2 bits in qh[32*half + l] at bit 2k.
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      ql[64 * half + l + 32 * (k % 2)] |= static_cast<uint8_t>((raw & 15) << (k >= 2 ? 4 : 0));
      qh[32 * half + l] |= static_cast<uint8_t>((raw >> 4) << (2 * k));
      want.push_back(d * static_cast<float>(sc[e / 16]) * static_cast<float>(v));
    }
    put_half(block, 208, d);
    b.insert(b.end(), block.begin(), block.end());
  }
  expect_same(dequant(GgmlType::Q6_K, b, 512), want, "Q6_K");
}

// ---- against gguf-py --------------------------------------------------------------------------------------

Bytes from_hex(const std::string& hex) {
  Bytes out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(GgufDequant, BitExactAgainstGgufPy) {
  const std::string path = std::string(SWIFT_FIXTURES_DIR) + "/gguf/dequant_cases.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing fixture " << path << " (scripts/golden/make_gguf_fixtures.py makes it)";
  const auto fixture = nlohmann::json::parse(in);
  std::set<std::string> types;
  for (const auto& c : fixture.at("cases")) {
    const std::string name = c.at("type");
    GgmlType type = GgmlType::F32;
    bool found = false;
    for (uint32_t id = 0; id < 64 && !found; ++id) {
      if (io::ggml_type_known(id) && name == io::ggml_type_name(static_cast<GgmlType>(id))) {
        type = static_cast<GgmlType>(id);
        found = true;
      }
    }
    ASSERT_TRUE(found) << name;
    const Bytes raw = from_hex(c.at("hex"));
    const int64_t n = c.at("n");
    ASSERT_EQ(raw.size(), static_cast<size_t>(n / io::ggml_block_elems(type)) * io::ggml_block_bytes(type)) << name;
    const auto got = dequant(type, raw, n);
    const auto& values = c.at("values");
    ASSERT_EQ(values.size(), static_cast<size_t>(n));
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(values[static_cast<size_t>(i)].get<double>());
      uint32_t a, w;
      std::memcpy(&a, &got[static_cast<size_t>(i)], 4);
      std::memcpy(&w, &want, 4);
      if (a != w && ++mismatches <= 5) ADD_FAILURE() << name << " element " << i << ": " << got[i] << " vs " << want;
    }
    EXPECT_EQ(mismatches, 0) << name;
    types.insert(name);
  }
  for (const char* t : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                        "Q5_K", "Q6_K"}) {
    EXPECT_EQ(types.count(t), 1u) << "the fixture lacks " << t;
  }
}

// ggml_dequantize_rows: parallel over rows, with and without a gather order, equals row-by-row dequantization.
TEST(GgufDequant, RowsParallelAndReordered) {
  const int64_t rows = 300, row_len = 512;  // 153,600 elements: above the threshold for threads
  std::mt19937 rng(99);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16}) {
    const int64_t blocks_per_row = row_len / io::ggml_block_elems(type);
    const size_t row_bytes = static_cast<size_t>(blocks_per_row) * io::ggml_block_bytes(type);
    Bytes src(row_bytes * rows);
    for (auto& byte : src) byte = static_cast<uint8_t>(rng());
    if (type == GgmlType::F16) {
      for (size_t i = 0; i < src.size(); i += 2) put_half(src, i, static_cast<float>(rng() % 1000) / 64.0f);
    } else {
      for (int64_t blk = 0; blk < rows * blocks_per_row; ++blk) {
        const size_t at = static_cast<size_t>(blk) * io::ggml_block_bytes(type);
        put_half(src, at, 0.01f);
        if (type == GgmlType::Q4_K) put_half(src, at + 2, 0.02f);
      }
    }
    std::vector<float> serial(static_cast<size_t>(rows * row_len));
    for (int64_t r = 0; r < rows; ++r) {
      io::ggml_dequantize_row(type, src.data() + r * row_bytes, serial.data() + r * row_len, row_len);
    }
    std::vector<float> parallel(serial.size());
    io::ggml_dequantize_rows(type, src.data(), parallel.data(), rows, row_len);
    EXPECT_EQ(parallel, serial) << io::ggml_type_name(type);
    std::vector<int64_t> order(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) order[r] = (r * 7) % rows;  // 7 is coprime to 300
    std::vector<float> gathered(serial.size());
    io::ggml_dequantize_rows(type, src.data(), gathered.data(), rows, row_len, order.data());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(0, std::memcmp(gathered.data() + r * row_len, serial.data() + order[r] * row_len, row_len * 4))
          << io::ggml_type_name(type) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace swift::test
