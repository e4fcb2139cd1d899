// tests/ops/test_dropout_map.cpp — dropout masks of a block of a tensor (ops.h Dropout::map, ops/philox.h
// DropoutMap): what sequence- and tensor-parallel ranks draw for their share of a one-process tensor.
//
// What must hold: a (rows, cols) block of a full (R, C) tensor, with the map of its place, gets exactly the full
// tensor's mask on that block, in ops::dropout (fast, with its AVX-512 runs, and the reference): whole-width row
// blocks (full_cols 0 or C) and column blocks at offsets that are and are not multiples of 4. The LoRA linear (fast
// and reference) applies that mask: on a block with w = 0, xa and da equal those of the block dropped beforehand
// with p = 0, and dx equals the block's multipliers times the p = 0 term. A map that does not place the block inside
// the full tensor is refused, naming the op.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/philox.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// Rows [r0, r1) and columns [c0, c1) of a 2-D F32 tensor, as a new tensor.
Tensor block_of(const Tensor& full, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t C = full.size(1), w = c1 - c0;
  Tensor out = Tensor::empty({r1 - r0, w}, DType::F32);
  for (int64_t i = 0; i < r1 - r0; ++i) {
    for (int64_t j = 0; j < w; ++j) out.data<float>()[i * w + j] = full.data<float>()[(r0 + i) * C + c0 + j];
  }
  return out;
}

struct Block {
  int64_t r0, r1, c0, c1;
  bool explicit_width;  // a whole-width block with full_cols = C (else 0)
};

ops::DropoutMap map_of(const Block& b, int64_t C) {
  const bool whole_width = b.c0 == 0 && b.c1 == C;
  return {b.r0, whole_width && !b.explicit_width ? 0 : C, b.c0};
}

TEST(OpsDropoutMap, ABlockDrawsTheFullTensorsMask) {
  uint32_t seed = 300;
  for (auto [R, C] : {std::pair<int64_t, int64_t>{11, 13}, {37, 200}, {5, 4096}}) {
    const Tensor full = random_tensor({R, C}, DType::F32, ++seed, 0.5f, 1.5f);  // never zero
    const ops::Dropout whole{0.3f, 77 + seed};
    Tensor full_out = Tensor::empty({R, C}, DType::F32), full_ref = Tensor::empty({R, C}, DType::F32);
    ops::dropout(full, whole, full_out);
    ops::ref::dropout(full, whole, full_ref);
    ASSERT_TRUE(bit_equal(full_out, full_ref));
    const std::vector<Block> blocks = {{0, R, 0, C, false},     {3, R, 0, C, false},         {R / 2, R, 0, C, true},
                                       {1, R - 1, 5, C - 2, false}, {2, 4, C / 2, C, false}, {0, 1, 3, 4, false},
                                       {R - 1, R, 1, C, false}};
    for (const Block& b : blocks) {
      SCOPED_TRACE("R=" + std::to_string(R) + " C=" + std::to_string(C) + " rows [" + std::to_string(b.r0) + ", " +
                   std::to_string(b.r1) + ") cols [" + std::to_string(b.c0) + ", " + std::to_string(b.c1) + ")");
      ops::Dropout d = whole;
      d.map = map_of(b, C);
      const Tensor x = block_of(full, b.r0, b.r1, b.c0, b.c1), expected = block_of(full_out, b.r0, b.r1, b.c0, b.c1);
      Guarded out({b.r1 - b.r0, b.c1 - b.c0}, DType::F32);
      Tensor ref = Tensor::empty(x.shape(), DType::F32), in_place = x.clone();
      ops::dropout(x, d, out.tensor);
      ops::ref::dropout(x, d, ref);
      ops::dropout(in_place, d, in_place);
      EXPECT_TRUE(out.guards_intact());
      EXPECT_TRUE(bit_equal(out.tensor, expected));
      EXPECT_TRUE(bit_equal(ref, expected));
      EXPECT_TRUE(bit_equal(in_place, expected));
    }
  }
}

TEST(OpsDropoutMap, LoraLinearOnABlockUsesTheBlocksMask) {
  const int64_t N = 23, K = 41, m = 7, r = 3;
  uint32_t seed = 700;
  for (const Block& blk : {Block{4, 19, 6, 35, false}, Block{9, 23, 0, K, false}, Block{0, 12, 20, K, false}}) {
    SCOPED_TRACE("rows [" + std::to_string(blk.r0) + ", " + std::to_string(blk.r1) + ") cols [" +
                 std::to_string(blk.c0) + ", " + std::to_string(blk.c1) + ")");
    const int64_t n = blk.r1 - blk.r0, k = blk.c1 - blk.c0;
    const float scale = 2.5f;
    ops::Dropout d{0.3f, 99 + seed};
    d.map = map_of(blk, K);
    // The block's multipliers: the full tensor's dropout of ones, cut to the block.
    Tensor ones = Tensor::empty({N, K}, DType::F32), mult_full = Tensor::empty({N, K}, DType::F32);
    for (int64_t i = 0; i < ones.numel(); ++i) ones.data<float>()[i] = 1.0f;
    ops::ref::dropout(ones, {d.p, d.seed}, mult_full);
    const Tensor mult = block_of(mult_full, blk.r0, blk.r1, blk.c0, blk.c1);
    const Tensor x = random_tensor({n, k}, DType::F32, ++seed);
    Tensor xd = x.clone();
    for (int64_t i = 0; i < xd.numel(); ++i) xd.data<float>()[i] *= mult.data<float>()[i];
    const Tensor w = Tensor::zeros({m, k}, DType::F32), none;
    const Tensor a = random_tensor({r, k}, DType::F32, ++seed), b = random_tensor({m, r}, DType::F32, ++seed);
    const Tensor dy = random_tensor({n, m}, DType::F32, ++seed);
    for (bool fast : {true, false}) {
      SCOPED_TRACE(fast ? "fast" : "reference");
      auto forward = [&](const Tensor& in, const ops::Dropout& drop, Tensor& y, Tensor& xa) {
        fast ? ops::lora_linear(in, w, none, a, b, scale, drop, y, xa)
             : ops::ref::lora_linear(in, w, none, a, b, scale, drop, y, xa);
      };
      auto backward = [&](const Tensor& in, const Tensor& xa, const ops::Dropout& drop, Tensor& dx, Tensor& da,
                          Tensor& db) {
        fast ? ops::lora_linear_backward(dy, in, w, a, b, xa, scale, drop, dx, da, db)
             : ops::ref::lora_linear_backward(dy, in, w, a, b, xa, scale, drop, dx, da, db);
      };
      Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32);
      Tensor y0 = Tensor::empty({n, m}, DType::F32), xa0 = Tensor::empty({n, r}, DType::F32);
      forward(x, d, y, xa);
      forward(xd, {}, y0, xa0);
      EXPECT_TRUE(all_close(xa, xa0, 1e-6, 1e-5));
      EXPECT_TRUE(all_close(y, y0, 1e-6, 1e-5));
      Tensor dx = Tensor::empty({n, k}, DType::F32), da = Tensor::zeros({r, k}, DType::F32);
      Tensor db = Tensor::zeros({m, r}, DType::F32);
      Tensor dx0 = Tensor::empty({n, k}, DType::F32), da0 = Tensor::zeros({r, k}, DType::F32);
      Tensor db0 = Tensor::zeros({m, r}, DType::F32);
      backward(x, xa, d, dx, da, db);
      backward(xd, xa0, {}, dx0, da0, db0);
      EXPECT_TRUE(all_close(da, da0, 1e-6, 1e-5));
      EXPECT_TRUE(all_close(db, db0, 1e-6, 1e-5));
      for (int64_t i = 0; i < dx0.numel(); ++i) dx0.data<float>()[i] *= mult.data<float>()[i];
      EXPECT_TRUE(all_close(dx, dx0, 1e-6, 1e-5));
    }
  }
}

TEST(OpsDropoutMap, AMapOutsideTheFullTensorIsRefused) {
  const Tensor x = random_tensor({3, 8}, DType::F32, 5);
  Tensor out = Tensor::empty({3, 8}, DType::F32);
  ops::Dropout d{0.1f, 1};
  d.map = {0, 10, 5};  // columns [5, 13) of a tensor 10 wide
  EXPECT_TRUE(throws_error([&] { ops::dropout(x, d, out); }, {"dropout", "dropout map", "8 columns"}));
  d.map = {0, 0, 2};  // a column offset without the full width
  EXPECT_TRUE(throws_error([&] { ops::dropout(x, d, out); }, {"dropout", "dropout map"}));
  d.map = {-1, 0, 0};
  EXPECT_TRUE(throws_error([&] { ops::dropout(x, d, out); }, {"dropout", "dropout map"}));
  const Tensor w = Tensor::zeros({4, 8}, DType::F32), a = Tensor::zeros({2, 8}, DType::F32),
               b = Tensor::zeros({4, 2}, DType::F32), none;
  Tensor y = Tensor::empty({3, 4}, DType::F32), xa = Tensor::empty({3, 2}, DType::F32);
  d.map = {0, 12, 6};
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, none, a, b, 1.0f, d, y, xa); }, {"lora_linear", "dropout map"}));
}

}  // namespace
}  // namespace swift::test
