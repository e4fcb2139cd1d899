// tests/ops/test_backward.cpp — backward of embedding, linear, rmsnorm, rope and swiglu: each against finite
// differences of a double-precision forward (grad_check.h), and the fast CPU kernels against the reference on odd
// shapes and every weight dtype; accumulate / in-place semantics; argument errors.
//
// Invariants:
//  - Outputs are guarded and start as NaN (written outputs) or random values (accumulated outputs), so a missed
//    element, an overrun or `=` instead of `+=` fails.
//  - FD tolerance (kFdRel, kFdRtol): the FD gradient is exact to ~1e-8 (grad_check.h); the fp32 backward differs
//    from the exact gradient by a few fp32 roundings of the summed terms (observed <= ~1e-7 relative to the
//    largest gradient on these O(1) problems). 2e-6 of the largest |gradient| absolute plus 1e-5 relative
//    leaves >10x margin and fails any wrong formula term, which is off by O(10%) or more.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "grad_check.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kFdRel = 2e-6;
constexpr double kFdRtol = 1e-5;
constexpr double kEps = 1.1920929e-7;  // fp32 machine epsilon
// Sums of L fp32 terms of magnitude <= ~1 against a double sum (see test_ops.cpp): 2 L eps absolute, 4 eps
// relative for the final += of the old value.
double sum_tol(int64_t terms) { return 2.0 * kEps * static_cast<double>(std::max<int64_t>(terms, 1)); }
constexpr double kFinalAddRtol = 4.0 * kEps;

const DType kWeightDTypes[] = {DType::F32, DType::BF16, DType::F16};
std::string dname(DType d) { return dtype_name(d); }

// ---- embedding -----------------------------------------------------------------------------------------------
TEST(OpsEmbeddingBackward, MatchesReferenceAndSkipsPadding) {
  Margin margin;
  for (auto [vocab, c, tokens] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 5, 13}, {33, 64, 200},
                                  {1000, 576, 129}, {50, 33, 5000}}) {
    for (int64_t padding : {int64_t{-1}, int64_t{3}}) {
      SCOPED_TRACE("V=" + std::to_string(vocab) + " C=" + std::to_string(c) + " T=" + std::to_string(tokens) +
                   " padding=" + std::to_string(padding));
      std::vector<int32_t> id(static_cast<size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t) id[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + t / 3) % vocab);
      if (tokens > 4 && vocab > 3) id[2] = 3;  // the padding id occurs
      Tensor ids = Tensor::from_i32({tokens}, id);
      Tensor dout = random_tensor({tokens, c}, DType::F32, 11);
      Tensor init = random_tensor({vocab, c}, DType::F32, 12);
      Guarded fast({vocab, c}, DType::F32), ref({vocab, c}, DType::F32);
      fast.set(init);
      ref.set(init);
      ops::embedding_backward(dout, ids, fast.tensor, padding);
      ops::ref::embedding_backward(dout, ids, ref.tensor, padding);
      EXPECT_TRUE(fast.guards_intact());
      EXPECT_TRUE(all_finite(fast.tensor));
      EXPECT_TRUE(close_in(margin, fast.tensor, ref.tensor, sum_tol(tokens), kFinalAddRtol));
      if (padding >= 0 && padding < vocab) {
        EXPECT_TRUE(bit_equal(fast.tensor.slice_rows(padding, padding + 1), init.slice_rows(padding, padding + 1)));
      }
    }
  }
}

TEST(OpsEmbeddingBackward, FiniteDifferences) {
  Margin margin;
  const int64_t vocab = 7, c = 5, tokens = 9;
  const std::vector<int32_t> id = {3, 1, 3, 6, 0, 3, 2, 1, 5};
  Tensor table = random_tensor({vocab, c}, DType::F32, 1), dout = random_tensor({tokens, c}, DType::F32, 2);
  const Vec dy = to_vec(dout);
  auto loss = [&](const Vec& tab) {
    double s = 0.0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < c; ++j) s += dy[static_cast<size_t>(t * c + j)] * tab[static_cast<size_t>(id[static_cast<size_t>(t)] * c + j)];
    }
    return s;
  };
  const Vec fd = numeric_gradient(loss, to_vec(table));
  Tensor grad = Tensor::zeros({vocab, c}, DType::F32), grad_ref = Tensor::zeros({vocab, c}, DType::F32);
  ops::embedding_backward(dout, Tensor::from_i32({tokens}, id), grad);
  ops::ref::embedding_backward(dout, Tensor::from_i32({tokens}, id), grad_ref);
  EXPECT_TRUE(matches_fd(margin, grad, fd, kFdRel, kFdRtol));
  EXPECT_TRUE(matches_fd(margin, grad_ref, fd, kFdRel, kFdRtol));
}

TEST(OpsEmbeddingBackward, Errors) {
  Tensor dout = Tensor::zeros({3, 4}, DType::F32), table = Tensor::zeros({10, 4}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::embedding_backward(dout, Tensor::from_i32({3}, {1, 10, 2}), table); },
                           {"embedding_backward", "10", "position 1"}));
  EXPECT_NO_THROW(ops::embedding_backward(dout, Tensor::from_i32({3}, {1, -1, 2}), table, -1));  // skipped
  Tensor bf16 = Tensor::zeros({10, 4}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::embedding_backward(dout, Tensor::from_i32({3}, {1, 2, 3}), bf16); },
                           {"embedding_backward: dtable", "F32"}));
}

// ---- linear --------------------------------------------------------------------------------------------------
struct LinearShape {
  int64_t n, k, m;
};
const LinearShape kLinearShapes[] = {{1, 1, 1},     {1, 5, 7},      {5, 7, 13},     {13, 33, 5},  {33, 64, 200},
                                     {64, 200, 33}, {3, 576, 1536}, {20, 576, 1000}, {300, 200, 40}, {129, 13, 257}};

class OpsLinearBackward : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(OpsLinearBackward, MatchesReference) {
  Margin margin;
  auto [wdtype, accumulate] = GetParam();
  uint32_t seed = 300;
  for (const LinearShape& s : kLinearShapes) {
    SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " M=" + std::to_string(s.m));
    Tensor dy = random_tensor({s.n, s.m}, DType::F32, ++seed), x = random_tensor({s.n, s.k}, DType::F32, ++seed);
    Tensor w = random_tensor({s.m, s.k}, wdtype, ++seed);
    Tensor dx0 = random_tensor({s.n, s.k}, DType::F32, ++seed), dw0 = random_tensor({s.m, s.k}, DType::F32, ++seed);
    Tensor db0 = random_tensor({s.m}, DType::F32, ++seed);
    Guarded dx({s.n, s.k}, DType::F32), dx_ref({s.n, s.k}, DType::F32), dw({s.m, s.k}, DType::F32),
        dw_ref({s.m, s.k}, DType::F32), db({s.m}, DType::F32), db_ref({s.m}, DType::F32);
    if (accumulate) {
      dx.set(dx0);
      dx_ref.set(dx0);
    }
    for (Guarded* g : {&dw, &dw_ref}) g->set(dw0);
    for (Guarded* g : {&db, &db_ref}) g->set(db0);
    ops::linear_backward(dy, x, w, dx.tensor, dw.tensor, db.tensor, accumulate);
    ops::ref::linear_backward(dy, x, w, dx_ref.tensor, dw_ref.tensor, db_ref.tensor, accumulate);
    for (Guarded* g : {&dx, &dw, &db}) {
      EXPECT_TRUE(g->guards_intact());
      EXPECT_TRUE(all_finite(g->tensor));
    }
    EXPECT_TRUE(close_in(margin, dx.tensor, dx_ref.tensor, sum_tol(s.m), kFinalAddRtol));
    EXPECT_TRUE(close_in(margin, dw.tensor, dw_ref.tensor, sum_tol(s.n), kFinalAddRtol));
    EXPECT_TRUE(close_in(margin, db.tensor, db_ref.tensor, sum_tol(s.n), kFinalAddRtol));
    // dx alone (frozen weight, no x): the same values.
    Guarded dx_only({s.n, s.k}, DType::F32);
    if (accumulate) dx_only.set(dx0);
    Tensor none;
    ops::linear_backward(dy, Tensor(), w, dx_only.tensor, none, none, accumulate);
    EXPECT_TRUE(bit_equal(dx_only.tensor, dx.tensor));
    // dw written (=, accumulate_dw false) over stale values: the reference's, and the bits of += onto zeros.
    Guarded dw_set({s.m, s.k}, DType::F32), dw_set_ref({s.m, s.k}, DType::F32), dw_zero({s.m, s.k}, DType::F32);
    dw_set.set(dw0);
    dw_set_ref.set(dw0);
    dw_zero.set(Tensor::zeros({s.m, s.k}, DType::F32));
    ops::linear_backward(dy, x, w, none, dw_set.tensor, none, false, /*accumulate_dw=*/false);
    ops::ref::linear_backward(dy, x, w, none, dw_set_ref.tensor, none, false, /*accumulate_dw=*/false);
    ops::linear_backward(dy, x, w, none, dw_zero.tensor, none, false);
    EXPECT_TRUE(dw_set.guards_intact());
    EXPECT_TRUE(close_in(margin, dw_set.tensor, dw_set_ref.tensor, sum_tol(s.n), kFinalAddRtol));
    for (int64_t i = 0; i < dw_set.tensor.numel(); ++i) {
      ASSERT_EQ(dw_set.tensor.item(i), dw_zero.tensor.item(i)) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightsAccumulate, OpsLinearBackward,
                         ::testing::Combine(::testing::ValuesIn(kWeightDTypes), ::testing::Bool()),
                         [](const auto& info) {
                           return dname(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_accumulate" : "_assign");
                         });

TEST(OpsLinearBackwardFd, FiniteDifferences) {
  Margin margin;
  const int64_t n = 5, k = 7, m = 13;
  Tensor x = random_tensor({n, k}, DType::F32, 1), w = random_tensor({m, k}, DType::F32, 2);
  Tensor b = random_tensor({m}, DType::F32, 3), dy = random_tensor({n, m}, DType::F32, 4);
  const Vec vx = to_vec(x), vw = to_vec(w), vb = to_vec(b), vdy = to_vec(dy);
  const Vec fd_x = numeric_gradient([&](const Vec& p) { return dot(vdy, linear_d(p, vw, vb, n, k, m)); }, vx);
  const Vec fd_w = numeric_gradient([&](const Vec& p) { return dot(vdy, linear_d(vx, p, vb, n, k, m)); }, vw);
  const Vec fd_b = numeric_gradient([&](const Vec& p) { return dot(vdy, linear_d(vx, vw, p, n, k, m)); }, vb);
  for (bool use_ref : {false, true}) {
    SCOPED_TRACE(use_ref ? "reference" : "fast");
    Tensor dx = Tensor::empty({n, k}, DType::F32), dw = Tensor::zeros({m, k}, DType::F32), db = Tensor::zeros({m}, DType::F32);
    (use_ref ? ops::ref::linear_backward : ops::linear_backward)(dy, x, w, dx, dw, db, false, true);
    EXPECT_TRUE(matches_fd(margin, dx, fd_x, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, dw, fd_w, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, db, fd_b, kFdRel, kFdRtol));
  }
}

TEST(OpsLinearBackwardFd, Errors) {
  Tensor dy = Tensor::zeros({3, 7}, DType::F32), x = Tensor::zeros({3, 5}, DType::F32), w = Tensor::zeros({7, 5}, DType::BF16);
  Tensor dx = Tensor::zeros({3, 5}, DType::F32), dw = Tensor::zeros({7, 5}, DType::F32), none;
  EXPECT_TRUE(throws_error([&] { ops::linear_backward(dy, Tensor(), w, dx, dw, none); }, {"linear_backward", "needs x"}));
  Tensor dw16 = Tensor::zeros({7, 5}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::linear_backward(dy, x, w, dx, dw16, none); }, {"linear_backward: dw", "F32"}));
  Tensor dx_bad = Tensor::zeros({3, 6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear_backward(dy, x, w, dx_bad, none, none); }, {"linear_backward: dx", "(N, K)"}));
  EXPECT_TRUE(throws_error([&] { ops::linear_backward(dy, x, w, dy, none, none); }, {"linear_backward: dx"}));
  Tensor db = Tensor::zeros({6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear_backward(dy, x, w, dx, none, db); }, {"linear_backward: dbias"}));
}

// ---- rmsnorm -------------------------------------------------------------------------------------------------
// dx = g rstd + x coef: each term a few fp32 roundings (g = dy w, g rstd, x coef, the sum) of values <= ~4:
// 8 eps of 4 absolute, plus a few eps relative. dweight: an fp64 sum of N fp32 products (one rounding each).
constexpr double kNormBwdAtol = 4e-6;
constexpr double kNormBwdRtol = 1e-6;

class OpsRmsnormBackward : public ::testing::TestWithParam<DType> {};

TEST_P(OpsRmsnormBackward, MatchesReferenceAccumulateAndInPlace) {
  Margin margin;
  const DType wdtype = GetParam();
  uint32_t seed = 700;
  for (const Shape& shape : {Shape{1, 1}, Shape{5, 7}, Shape{13, 33}, Shape{64, 576}, Shape{200, 64}, Shape{3, 1537}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t n = shape[0], c = shape[1];
    Tensor x = random_tensor(shape, DType::F32, ++seed, -4.0f, 4.0f), w = random_tensor({c}, wdtype, ++seed, 0.5f, 1.5f);
    Tensor y = Tensor::empty(shape, DType::F32), rstd = Tensor::empty({n}, DType::F32);
    ops::rmsnorm(x, w, 1e-5f, y, rstd);
    Tensor dy = random_tensor(shape, DType::F32, ++seed);
    Tensor dx0 = random_tensor(shape, DType::F32, ++seed), dw0 = random_tensor({c}, DType::F32, ++seed);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "assign");
      Guarded dx(shape, DType::F32), dx_ref(shape, DType::F32), dw({c}, DType::F32), dw_ref({c}, DType::F32);
      if (accumulate) {
        dx.set(dx0);
        dx_ref.set(dx0);
      }
      dw.set(dw0);
      dw_ref.set(dw0);
      ops::rmsnorm_backward(dy, x, w, rstd, dx.tensor, dw.tensor, accumulate);
      ops::ref::rmsnorm_backward(dy, x, w, rstd, dx_ref.tensor, dw_ref.tensor, accumulate);
      EXPECT_TRUE(dx.guards_intact());
      EXPECT_TRUE(dw.guards_intact());
      EXPECT_TRUE(all_finite(dx.tensor));
      EXPECT_TRUE(close_in(margin, dx.tensor, dx_ref.tensor, kNormBwdAtol, kNormBwdRtol));
      EXPECT_TRUE(close_in(margin, dw.tensor, dw_ref.tensor, sum_tol(n) * 4.0, kFinalAddRtol));  // |terms| <= 4
    }
    // In place (dx is dy), frozen weight (no dweight): the same dx.
    Tensor inplace = dy.clone(), none;
    Tensor expected = Tensor::empty(shape, DType::F32);
    ops::rmsnorm_backward(dy, x, w, rstd, expected, none);
    ops::rmsnorm_backward(inplace, x, w, rstd, inplace, none);
    EXPECT_TRUE(bit_equal(inplace, expected));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightDTypes, OpsRmsnormBackward, ::testing::ValuesIn(kWeightDTypes),
                         [](const auto& info) { return dname(info.param); });

TEST(OpsRmsnormBackwardFd, FiniteDifferences) {
  Margin margin;
  const int64_t n = 5, c = 7;
  const float eps = 1e-5f;
  Tensor x = random_tensor({n, c}, DType::F32, 1, -2.0f, 2.0f), w = random_tensor({c}, DType::F32, 2, 0.5f, 1.5f);
  Tensor dy = random_tensor({n, c}, DType::F32, 3);
  const Vec vx = to_vec(x), vw = to_vec(w), vdy = to_vec(dy);
  const Vec fd_x = numeric_gradient([&](const Vec& p) { return dot(vdy, rmsnorm_d(p, vw, eps, n, c)); }, vx);
  const Vec fd_w = numeric_gradient([&](const Vec& p) { return dot(vdy, rmsnorm_d(vx, p, eps, n, c)); }, vw);
  Tensor y = Tensor::empty({n, c}, DType::F32), rstd = Tensor::empty({n}, DType::F32);
  ops::rmsnorm(x, w, eps, y, rstd);
  for (bool use_ref : {false, true}) {
    SCOPED_TRACE(use_ref ? "reference" : "fast");
    Tensor dx = Tensor::empty({n, c}, DType::F32), dw = Tensor::zeros({c}, DType::F32);
    (use_ref ? ops::ref::rmsnorm_backward : ops::rmsnorm_backward)(dy, x, w, rstd, dx, dw, false);
    EXPECT_TRUE(matches_fd(margin, dx, fd_x, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, dw, fd_w, kFdRel, kFdRtol));
  }
}

TEST(OpsRmsnormBackwardFd, Errors) {
  Tensor x = Tensor::zeros({3, 5}, DType::F32), w = Tensor::zeros({5}, DType::F32), rstd = Tensor::zeros({3}, DType::F32);
  Tensor dx = Tensor::zeros({3, 5}, DType::F32), none;
  EXPECT_TRUE(throws_error([&] { ops::rmsnorm_backward(x, x, w, Tensor::zeros({4}, DType::F32), dx, none); },
                           {"rmsnorm_backward: rstd"}));
  Tensor dy = Tensor::zeros({3, 5}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::rmsnorm_backward(dy, x, w, rstd, dy, none, true); },
                           {"rmsnorm_backward: dx", "overlaps dy"}));
  EXPECT_TRUE(throws_error([&] { ops::rmsnorm_backward(dy, x, w, rstd, x, none); }, {"rmsnorm_backward: dx", "overlaps x"}));
}

// ---- rope ----------------------------------------------------------------------------------------------------
// The transposed rotation in fp32: same bound as the forward's (test_rope.cpp, kRopeTol).
constexpr double kRopeBwdTol = 4e-6;

ops::RopeFrequencies yarn_freqs(int64_t d) {
  ops::RopeConfig rc;
  rc.type = ops::RopeType::Yarn;
  rc.factor = 4.0;
  rc.original_max_position_embeddings = 64;
  rc.max_position_embeddings = 256;
  return ops::rope_frequencies(rc, d, 256);
}

TEST(OpsRopeBackward, FiniteDifferencesAndReference) {
  Margin margin;
  const int64_t t = 5, h = 3, d = 8;
  const std::vector<int32_t> pos = {0, 1, 7, 2, 130};
  ops::RopeConfig plain;
  for (const ops::RopeFrequencies& f : {ops::rope_frequencies(plain, d, 256), yarn_freqs(d)}) {
    SCOPED_TRACE("attention_scaling " + std::to_string(f.attention_scaling));
    Tensor x = random_tensor({t, h, d}, DType::F32, 1), dy = random_tensor({t, h, d}, DType::F32, 2);
    const Vec vdy = to_vec(dy);
    const Vec fd = numeric_gradient([&](const Vec& p) { return dot(vdy, rope_d(p, pos, f, t, h, d)); }, to_vec(x));
    Tensor positions = Tensor::from_i32({t}, pos);
    Guarded fast({t, h, d}, DType::F32), ref({t, h, d}, DType::F32);
    fast.set(dy);
    ref.set(dy);
    ops::rope_backward(fast.tensor, positions, f);
    ops::ref::rope_backward(ref.tensor, positions, f);
    EXPECT_TRUE(fast.guards_intact());
    EXPECT_TRUE(matches_fd(margin, fast.tensor, fd, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, ref.tensor, fd, kFdRel, kFdRtol));
    EXPECT_TRUE(close_in(margin, fast.tensor, ref.tensor, kRopeBwdTol, kRopeBwdTol));
  }
}

TEST(OpsRopeBackward, UndoesTheForwardAndMatchesReferenceOnModelShapes) {
  Margin margin;
  ops::RopeConfig plain;
  const ops::RopeFrequencies f = ops::rope_frequencies(plain, 64, 512);
  Tensor x = random_tensor({129, 9, 64}, DType::F32, 5);
  std::vector<int32_t> pos(129);
  for (int32_t i = 0; i < 129; ++i) pos[static_cast<size_t>(i)] = (i * 37) % 500;
  Tensor positions = Tensor::from_i32({129}, pos);
  Tensor y = x.clone();
  ops::rope(y, positions, f);
  Tensor back = y.clone(), back_ref = y.clone();
  ops::rope_backward(back, positions, f);  // R^T R = I (attention_scaling 1)
  ops::ref::rope_backward(back_ref, positions, f);
  EXPECT_TRUE(close_in(margin, back, x, kRopeBwdTol, kRopeBwdTol));
  EXPECT_TRUE(close_in(margin, back, back_ref, kRopeBwdTol, kRopeBwdTol));
  Tensor bad = Tensor::from_i32({129}, std::vector<int32_t>(129, -1));
  EXPECT_TRUE(throws_error([&] { ops::rope_backward(back, bad, f); }, {"rope_backward", "negative"}));
}

// ---- swiglu --------------------------------------------------------------------------------------------------
// dgate = (dout up) sig (1 + g (1 - sig)): exp_approx (1 ulp) then ~6 fp32 roundings; 1 - sig cancels for
// large g (relative error of 1 - sig up to eps / (1 - sig)) but is multiplied by g (1 - sig) <= 0.28, so the
// absolute error stays a few eps of |dout up| <= 3. Bound: 4e-6 absolute + 2e-6 relative.
constexpr double kSwigluBwdAtol = 4e-6;
constexpr double kSwigluBwdRtol = 2e-6;

TEST(OpsSwigluBackward, MatchesReferenceInPlaceAndExtremes) {
  Margin margin;
  for (const Shape& shape : {Shape{1, 1}, Shape{5, 7}, Shape{13, 33}, Shape{64, 1536}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor gate = random_tensor(shape, DType::F32, 3, -12.0f, 12.0f), up = random_tensor(shape, DType::F32, 4, -3.0f, 3.0f);
    Tensor dout = random_tensor(shape, DType::F32, 5);
    Guarded dg(shape, DType::F32), du(shape, DType::F32), dg_ref(shape, DType::F32), du_ref(shape, DType::F32);
    ops::swiglu_backward(dout, gate, up, dg.tensor, du.tensor);
    ops::ref::swiglu_backward(dout, gate, up, dg_ref.tensor, du_ref.tensor);
    for (Guarded* g : {&dg, &du}) {
      EXPECT_TRUE(g->guards_intact());
      EXPECT_TRUE(all_finite(g->tensor));
    }
    EXPECT_TRUE(close_in(margin, dg.tensor, dg_ref.tensor, kSwigluBwdAtol, kSwigluBwdRtol));
    EXPECT_TRUE(close_in(margin, du.tensor, du_ref.tensor, kSwigluBwdAtol, kSwigluBwdRtol));
    // In place: dgate into dout and dup into up (as the model does), then dgate into gate.
    Tensor d1 = dout.clone(), u1 = up.clone();
    ops::swiglu_backward(d1, gate, u1, d1, u1);
    EXPECT_TRUE(bit_equal(d1, dg.tensor));
    EXPECT_TRUE(bit_equal(u1, du.tensor));
    Tensor g2 = gate.clone(), du2 = Tensor::empty(shape, DType::F32);
    ops::swiglu_backward(dout, g2, up, g2, du2);
    EXPECT_TRUE(bit_equal(g2, dg.tensor));
  }
  Tensor gate = Tensor::from_f32({8}, {-200.0f, -88.5f, -87.0f, -20.0f, 0.0f, 20.0f, 88.5f, 200.0f});
  Tensor up = Tensor::from_f32({8}, std::vector<float>(8, 1.5f)), dout = Tensor::from_f32({8}, std::vector<float>(8, -0.75f));
  Tensor dg = Tensor::empty({8}, DType::F32), du = Tensor::empty({8}, DType::F32);
  Tensor dg_ref = Tensor::empty({8}, DType::F32), du_ref = Tensor::empty({8}, DType::F32);
  ops::swiglu_backward(dout, gate, up, dg, du);
  ops::ref::swiglu_backward(dout, gate, up, dg_ref, du_ref);
  EXPECT_TRUE(all_finite(dg));
  EXPECT_TRUE(all_finite(du));
  EXPECT_TRUE(close_in(margin, dg, dg_ref, kSwigluBwdAtol, kSwigluBwdRtol));
  EXPECT_TRUE(close_in(margin, du, du_ref, kSwigluBwdAtol, kSwigluBwdRtol));
}

TEST(OpsSwigluBackward, FiniteDifferences) {
  Margin margin;
  const Shape shape{5, 7};
  Tensor gate = random_tensor(shape, DType::F32, 1, -5.0f, 5.0f), up = random_tensor(shape, DType::F32, 2, -2.0f, 2.0f);
  Tensor dout = random_tensor(shape, DType::F32, 3);
  const Vec vg = to_vec(gate), vu = to_vec(up), vd = to_vec(dout);
  const Vec fd_g = numeric_gradient([&](const Vec& p) { return dot(vd, swiglu_d(p, vu)); }, vg);
  const Vec fd_u = numeric_gradient([&](const Vec& p) { return dot(vd, swiglu_d(vg, p)); }, vu);
  for (bool use_ref : {false, true}) {
    SCOPED_TRACE(use_ref ? "reference" : "fast");
    Tensor dg = Tensor::empty(shape, DType::F32), du = Tensor::empty(shape, DType::F32);
    (use_ref ? ops::ref::swiglu_backward : ops::swiglu_backward)(dout, gate, up, dg, du);
    EXPECT_TRUE(matches_fd(margin, dg, fd_g, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, du, fd_u, kFdRel, kFdRtol));
  }
  Tensor a = Tensor::zeros(shape, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::swiglu_backward(dout, gate, up, a, a); }, {"swiglu_backward", "overlap"}));
}

}  // namespace
}  // namespace swift::test
