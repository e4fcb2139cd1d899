// tests/core/test_core.cpp — dtypes and conversions, tensor views and copies, memory accounting, mmap,
// the byte-level alphabet, and the command line's handling of subcommands.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "text/byte_level.h"

namespace swift {
namespace {

TEST(DType, HalfRoundTripIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<f16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "half bits " << h << " value " << f;
  }
}

#if defined(__F16C__)
TEST(DType, FloatToHalfMatchesHardwareRounding) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f)) continue;
    uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(f32_to_f16(f), hw) << "float bits " << b;
    float back = f16_to_f32(hw);
    ASSERT_EQ(back, _cvtsh_ss(hw));
  }
}
#endif

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway again: ties to even rounds up to 1 + 2^-6.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xc020);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bytes(DType::F32, 5), 20u);
  EXPECT_EQ(dtype_bytes(DType::BF16, 5), 10u);
  EXPECT_EQ(dtype_bytes(DType::NF4, 64), 32u);
  EXPECT_THROW(dtype_bytes(DType::NF4, 5), Error);
  EXPECT_EQ(dtype_from_string("bfloat16"), DType::BF16);
  EXPECT_EQ(dtype_from_string("F16"), DType::F16);
  EXPECT_THROW(dtype_from_string("float8"), Error);
}

TEST(Tensor, ViewsShareStorageAndCheckBounds) {
  Tensor t = Tensor::from_f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.item(0), 4.0);
  rows.data<float>()[0] = 40.0f;
  EXPECT_EQ(t.item(4), 40.0);
  Tensor flat = t.view({-1});
  EXPECT_EQ(flat.shape(), (Shape{12}));
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.slice_rows(2, 4), Error);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(t.size(2), Error);
  Tensor copy = t.clone();
  copy.data<float>()[0] = -1.0f;
  EXPECT_EQ(t.item(0), 0.0);
}

TEST(Tensor, WrappedMemoryIsReadOnlyUnlessSaidOtherwise) {
  static float backing[4] = {1, 2, 3, 4};
  Tensor ro(Storage::wrap(backing, sizeof(backing), Device::cpu(), nullptr), 0, {4}, DType::F32);
  EXPECT_FALSE(ro.writable());
  EXPECT_THROW(ro.zero_(), Error);
  EXPECT_THROW(ro.copy_from(Tensor::from_f32({4}, {0, 0, 0, 0})), Error);
  Tensor copy = ro.clone();
  EXPECT_TRUE(copy.writable());
  copy.zero_();
  Tensor rw(Storage::wrap(backing, sizeof(backing), Device::cpu(), nullptr, /*writable=*/true), 0, {4}, DType::F32);
  rw.copy_from(copy);
  EXPECT_EQ(backing[2], 0.0f);
}

TEST(Tensor, DTypeConversionRoundTrip) {
  Tensor t = Tensor::from_f32({4}, {1.0f, -2.5f, 3.140625f, 65504.0f});
  Tensor h = t.to_dtype(DType::F16);
  Tensor b = t.to_dtype(DType::BF16);
  Tensor back = h.to_dtype(DType::F32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.item(i), t.item(i));
  EXPECT_EQ(b.item(1), -2.5);
  EXPECT_THROW(Tensor::from_i32({1}, {1}).to_dtype(DType::F32), Error);
}

TEST(Memory, AccountingByCategory) {
  const int w = static_cast<int>(MemoryCategory::Weights);
  int64_t before = memory_stats(0).current[w];
  {
    Tensor t = Tensor::empty({1000}, DType::F32, Device::cpu(), MemoryCategory::Weights);
    EXPECT_EQ(memory_stats(0).current[w] - before, 4000);
    EXPECT_GE(memory_stats(0).peak[w] - before, 4000);
  }
  EXPECT_EQ(memory_stats(0).current[w], before);
  EXPECT_NE(memory_report(0).find("weights"), std::string::npos);
}

TEST(Memory, RecordsEachCategoryAtTheTotalsPeak) {
  // The totals' peak is reached with the workspace tensor alive and the weights tensor freed: the snapshot holds
  // that moment, not each category's own peak. Counters are process-wide: other tests' live tensors count in both.
  constexpr int w = static_cast<int>(MemoryCategory::Weights), s = static_cast<int>(MemoryCategory::Workspace);
  memory_reset_peaks(0);
  const MemoryStats before = memory_stats(0);
  {
    Tensor weights = Tensor::empty({1 << 20}, DType::F32, Device::cpu(), MemoryCategory::Weights);
  }
  Tensor workspace = Tensor::empty({3 << 20}, DType::F32, Device::cpu(), MemoryCategory::Workspace);
  const MemoryStats after = memory_stats(0);
  EXPECT_EQ(after.total_peak - before.total_current, int64_t{12} << 20);
  EXPECT_EQ(after.at_total_peak[s] - before.current[s], int64_t{12} << 20);
  EXPECT_EQ(after.at_total_peak[w], before.current[w]);
  EXPECT_NE(memory_report(0).find("at the total's peak"), std::string::npos);
}

TEST(Device, CudaWithoutBackendSaysSo) {
  if (device_backend_available(DeviceType::CUDA)) GTEST_SKIP() << "a CUDA backend is registered";
  try {
    Tensor::empty({4}, DType::F32, Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backend"), std::string::npos) << e.what();
  }
}

TEST(MappedFile, MapsAndReportsMissingFiles) {
  std::string path = testing::TempDir() + "/swift_mapped.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "hello";
  }
  auto file = MappedFile::open(path);
  ASSERT_EQ(file->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), 5), "hello");
  try {
    MappedFile::open(path + ".missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("swift_mapped.bin.missing"), std::string::npos);
  }
  std::remove(path.c_str());
}

TEST(ByteLevel, AlphabetIsABijection) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string encoded = text::byte_level_encode(all);
  EXPECT_EQ(text::byte_level_decode(encoded), all);
  EXPECT_EQ(text::byte_level_encode(" hi\n"), "\xC4\xA0hi\xC4\x8A");  // "Ġhi" + "Ċ"
  EXPECT_THROW(text::byte_level_decode("\xE4\xBD\xA0"), Error);    // a CJK character is not in the alphabet
}

}  // namespace
}  // namespace swift
