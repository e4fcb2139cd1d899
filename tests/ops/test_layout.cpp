// tests/ops/test_layout.cpp — swap_outer_axes (the Ulysses head exchange's packing, tensor parallelism's shard
// join) and copy_columns (the packed q/k/v split): the CPU kernel against the element-by-element reference on odd shapes (A, B, E in 1..13) for byte widths
// 1, 2 and 4, with guard bytes around the output, and the argument errors.
//
// Tolerance: none. The op copies bytes; the CPU result must equal the reference bit for bit, and the reference is
// itself checked against the index formula y[b][a][e] = x[a][b][e].
#include <gtest/gtest.h>

#include <cstring>

#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// Bytes that differ between every element: element i of x holds the low bytes of i * 2654435761 + seed.
Tensor patterned(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u + seed) >> 7);
  return t;
}

TEST(SwapOuterAxes, CpuEqualsReferenceOnOddShapes) {
  for (DType dtype : {DType::F32, DType::BF16, DType::U8, DType::I32}) {
    for (int64_t A : {1, 2, 3, 7}) {
      for (int64_t B : {1, 2, 5, 13}) {
        for (int64_t E : {1, 3, 11}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " A=" + std::to_string(A) + " B=" + std::to_string(B) +
                       " E=" + std::to_string(E));
          const Tensor x = patterned({A, B, E}, dtype, static_cast<uint32_t>(A * 131 + B * 17 + E));
          Guarded fast({B, A, E}, dtype), ref({B, A, E}, dtype);
          ops::swap_outer_axes(x, fast.tensor);
          ops::ref::swap_outer_axes(x, ref.tensor);
          EXPECT_TRUE(fast.guards_intact());
          EXPECT_TRUE(ref.guards_intact());
          ASSERT_EQ(std::memcmp(fast.tensor.raw(), ref.tensor.raw(), x.nbytes()), 0);
          const size_t elem = dtype_bytes(dtype, 1);
          const auto* in = static_cast<const unsigned char*>(x.raw());
          const auto* out = static_cast<const unsigned char*>(ref.tensor.raw());
          for (int64_t a = 0; a < A; ++a) {
            for (int64_t b = 0; b < B; ++b) {
              ASSERT_EQ(std::memcmp(out + (b * A + a) * E * static_cast<int64_t>(elem),
                                    in + (a * B + b) * E * static_cast<int64_t>(elem), E * elem), 0)
                  << "a " << a << " b " << b;
            }
          }
        }
      }
    }
  }
}

TEST(SwapOuterAxes, SwappingTwiceGivesTheInputBack) {
  const Tensor x = patterned({6, 4, 5}, DType::F32, 3);
  Tensor y = Tensor::empty({4, 6, 5}, DType::F32), z = Tensor::empty({6, 4, 5}, DType::F32);
  ops::swap_outer_axes(x, y);
  ops::swap_outer_axes(y, z);
  EXPECT_TRUE(bit_equal(z, x));
}

TEST(SwapOuterAxes, ArgumentErrorsNameTheOpAndTheTensor) {
  const Tensor x = patterned({2, 3, 4}, DType::F32, 1);
  Tensor wrong_shape = Tensor::empty({2, 3, 4}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::swap_outer_axes(x, wrong_shape); }, {"swap_outer_axes", "(B, A, E)"}));
  Tensor flat = Tensor::empty({24}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::swap_outer_axes(x, flat); }, {"swap_outer_axes", "y", "3 dimensions"}));
  Tensor other_dtype = Tensor::empty({3, 2, 4}, DType::I32);
  EXPECT_TRUE(throws_error([&] { ops::swap_outer_axes(x, other_dtype); }, {"swap_outer_axes", "same dtype"}));
  Tensor buffer = Tensor::empty({48}, DType::F32);
  Tensor in = buffer.slice_rows(0, 24).view({2, 3, 4}), out = buffer.slice_rows(12, 36).view({3, 2, 4});
  EXPECT_TRUE(throws_error([&] { ops::swap_outer_axes(in, out); }, {"swap_outer_axes", "overlaps"}));
}

// copy_columns: every column block of a packed (N, 7 + 2 + 2) row (the q/k/v split) and back, odd widths, byte widths
// 1, 2 and 4, guard bytes around the output; columns outside the block keep their bytes; bad ranges are refused.
TEST(CopyColumns, CpuEqualsReferenceAndLeavesTheOtherColumns) {
  for (DType dtype : {DType::F32, DType::BF16, DType::U8}) {
    for (int64_t N : {1, 3, 17}) {
      const Tensor packed = patterned({N, 11}, dtype, static_cast<uint32_t>(N));
      for (auto [col, cols] : {std::pair<int64_t, int64_t>{0, 7}, {7, 2}, {9, 2}, {3, 0}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " N=" + std::to_string(N) + " col=" + std::to_string(col));
        Guarded fast({N, cols}, dtype), ref({N, cols}, dtype);
        ops::copy_columns(packed, col, fast.tensor, 0, cols);
        ops::ref::copy_columns(packed, col, ref.tensor, 0, cols);
        EXPECT_TRUE(fast.guards_intact());
        ASSERT_EQ(std::memcmp(fast.tensor.raw(), ref.tensor.raw(), fast.tensor.nbytes()), 0);
        const size_t elem = dtype_bytes(dtype, 1);
        for (int64_t n = 0; n < N; ++n) {
          ASSERT_EQ(std::memcmp(static_cast<const char*>(ref.tensor.raw()) + n * cols * elem,
                                static_cast<const char*>(packed.raw()) + (n * 11 + col) * elem, cols * elem), 0);
        }
        // Back into a packed row of other bytes: only the block changes.
        Tensor back = patterned({N, 11}, dtype, 99), want = back.clone();
        ops::copy_columns(fast.tensor, 0, back, col, cols);
        ops::ref::copy_columns(ref.tensor, 0, want, col, cols);
        ASSERT_EQ(std::memcmp(back.raw(), want.raw(), back.nbytes()), 0);
      }
    }
  }
  Tensor x = Tensor::zeros({4, 6}, DType::F32), y = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::copy_columns(x, 4, y, 0, 3); }, {"copy_columns", "do not fit"}));
  Tensor rows = Tensor::zeros({5, 3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::copy_columns(x, 0, rows, 0, 3); }, {"copy_columns", "same rows"}));
  EXPECT_TRUE(throws_error([&] { ops::copy_columns(x, 0, x, 3, 3); }, {"copy_columns", "overlaps"}));
}

// The rope of the packed-layout tests: theta 10000, head dim d, tables for 64 positions; positions (t * step) % period.
ops::RopeFrequencies packed_rope_frequencies(int64_t d) {
  ops::RopeConfig config;
  config.theta = 10000.0;
  return ops::rope_frequencies(config, d, 64);
}
Tensor packed_rope_positions(int64_t tokens, int64_t step, int64_t period) {
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * step) % period);
  return Tensor::from_i32({tokens}, pos);
}

// rope_columns: q's and k's blocks of a packed (T, 4*D + 2*2*D ...) row rotated out of it, and rotated back into it
// (backward): the same bits as copy_columns followed by rope / rope_backward in place; other columns untouched.
TEST(RopeColumns, IsCopyThenRopeInPlace) {
  const int64_t T = 9, D = 6, hq = 4, hkv = 2, width = (hq + 2 * hkv) * D;
  const ops::RopeFrequencies f = packed_rope_frequencies(D);
  const Tensor positions = packed_rope_positions(T, 7, 11);
  const Tensor packed = random_tensor({T, width}, DType::F32, 5);
  for (bool backward : {false, true}) {
    for (auto [col, heads] : {std::pair<int64_t, int64_t>{0, hq}, {hq * D, hkv}}) {
      SCOPED_TRACE(std::to_string(backward) + " col " + std::to_string(col));
      Tensor got = Tensor::empty({T, heads * D}, DType::F32), want = Tensor::empty({T, heads * D}, DType::F32);
      ops::rope_columns(packed, col, got, 0, heads, positions, f, backward);
      ops::copy_columns(packed, col, want, 0, heads * D);
      Tensor want3 = want.view({T, heads, D});
      backward ? ops::rope_backward(want3, positions, f) : ops::rope(want3, positions, f);
      ASSERT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
      // Back into a packed row: only the block changes.
      Tensor back = random_tensor({T, width}, DType::F32, 6), expect = back.clone();
      ops::rope_columns(got, 0, back, col, heads, positions, f, backward);
      Tensor rotated = got.clone();
      Tensor rotated3 = rotated.view({T, heads, D});
      backward ? ops::rope_backward(rotated3, positions, f) : ops::rope(rotated3, positions, f);
      ops::copy_columns(rotated, 0, expect, col, heads * D);
      ASSERT_EQ(std::memcmp(back.raw(), expect.raw(), back.nbytes()), 0);
    }
  }
  Tensor small = Tensor::zeros({T, D}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::rope_columns(packed, width - D, small, 0, 2, positions, f, false); },
                           {"rope_columns", "do not fit"}));
}

// rope_qkv: forward = q and k roped out of the packed row, v copied (rope_columns twice + copy_columns, bit for bit);
// backward writes every column of the packed row from dq, dk (rotated back) and dv; bad layouts are named.
TEST(RopeQkv, IsTwoRopeColumnsAndACopy) {
  const int64_t T = 7, D = 6, hq = 4, hkv = 2, nq = hq * D, nkv = hkv * D;
  const ops::RopeFrequencies f = packed_rope_frequencies(D);
  const Tensor positions = packed_rope_positions(T, 5, 9);
  for (bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "backward" : "forward");
    Tensor packed = random_tensor({T, nq + 2 * nkv}, DType::F32, 11);
    Tensor q = random_tensor({T, nq}, DType::F32, 12), k = random_tensor({T, nkv}, DType::F32, 13);
    Tensor v = random_tensor({T, nkv}, DType::F32, 14);
    Tensor want_packed = packed.clone(), want_q = q.clone(), want_k = k.clone(), want_v = v.clone();
    ops::rope_qkv(packed, q, k, v, positions, f, backward);
    rope_qkv_in_parts(want_packed, want_q, want_k, want_v, positions, f, backward);
    for (auto [got, want] : {std::pair{&packed, &want_packed}, {&q, &want_q}, {&k, &want_k}, {&v, &want_v}}) {
      ASSERT_EQ(std::memcmp(got->raw(), want->raw(), got->nbytes()), 0);
    }
  }
  Tensor packed = Tensor::zeros({T, nq + 2 * nkv}, DType::F32), q = Tensor::zeros({T, nq}, DType::F32);
  Tensor k = Tensor::zeros({T, nkv}, DType::F32), v = Tensor::zeros({T, nkv}, DType::F32);
  Tensor wide_v = Tensor::zeros({T, nkv + D}, DType::F32), odd_q = Tensor::zeros({T, nq - 1}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::rope_qkv(packed, q, k, wide_v, positions, f, false); }, {"rope_qkv", "side by side"}));
  EXPECT_TRUE(throws_error([&] { ops::rope_qkv(packed, odd_q, k, v, positions, f, false); }, {"rope_qkv", "heads of"}));
  const Tensor negative = Tensor::from_i32({T}, std::vector<int32_t>(static_cast<size_t>(T), -1));
  EXPECT_TRUE(throws_error([&] { ops::rope_qkv(packed, q, k, v, negative, f, false); },
                           {"rope_qkv", "position -1 at token 0 is negative"}));
  Tensor q16 = Tensor::zeros({T, nq}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::rope_qkv(packed, q16, k, v, positions, f, false); }, {"rope_qkv", "must be F32"}));
}

}  // namespace
}  // namespace swift::test
