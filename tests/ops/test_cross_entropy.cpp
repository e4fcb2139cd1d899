// tests/ops/test_cross_entropy.cpp — the chunked LM-head cross-entropy and token log-probabilities: chunked ==
// unchunked reference for many block sizes (vocabulary not a multiple of the block, one-token blocks), ignored
// labels and all-ignored batches, every head dtype, loss / accuracy counts, dhidden and dhead, finite
// differences, and argument errors.
//
// Invariants:
//  - The reference keeps every logit of a token in double; the fast op never holds more than one
//    token_block x vocab_block tile, so agreement across block sizes shows the online log-sum-exp is right.
//  - dhidden is guarded and starts as NaN (rows of ignored tokens must be written as 0); dhead starts random
//    (it accumulates).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

#include "grad_check.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kEps = 1.1920929e-7;
// Per-token loss lse - z_label in fp32: logits are C-term fp32 dots of |h| <= 1, |W| <= 1 (error ~C eps), lse
// adds an fp32 online sum of V exponentials (relative error ~V eps / 2 of a value >= 1, i.e. absolute in lse).
double loss_tol(int64_t c, int64_t v) { return 2.0 * kEps * static_cast<double>(c + v); }
// dhidden = s (E_p[W] - W_label): an fp32 V-term weighted average of |W| <= 1 (sgemm, online rescaling by
// exp_approx factors): ~V eps absolute per unit of s, with 4x margin.
double dhidden_tol(int64_t v, float scale) { return 4.0 * kEps * static_cast<double>(v) * std::fabs(scale) + 1e-7; }
// dhead: a sum over valid tokens of s (p - onehot) h: ~T eps per unit of s, plus the += of the old value.
double dhead_tol(int64_t t, float scale) { return 4.0 * kEps * static_cast<double>(t + 8) * std::fabs(scale); }
constexpr double kFdRel = 2e-6;
constexpr double kFdRtol = 1e-5;

struct CeCase {
  int64_t t, c, v;
  int64_t token_block, vocab_block;
  double ignored_fraction;
};

std::string describe(const CeCase& c) {
  return "T=" + std::to_string(c.t) + " C=" + std::to_string(c.c) + " V=" + std::to_string(c.v) + " blocks " +
         std::to_string(c.token_block) + "x" + std::to_string(c.vocab_block) + " ignored " +
         std::to_string(c.ignored_fraction);
}

Tensor make_labels(int64_t t, int64_t v, double ignored_fraction, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> lab(static_cast<size_t>(t));
  for (auto& l : lab) {
    const double u = static_cast<double>(gen() >> 8) / 16777216.0;
    l = u < ignored_fraction ? -100 : static_cast<int32_t>(gen() % static_cast<uint32_t>(v));
  }
  return Tensor::from_i32({t}, lab);
}

void check_case(Margin& margin, const CeCase& cc, DType head_dtype, uint32_t seed) {
  SCOPED_TRACE(describe(cc) + " head " + dtype_name(head_dtype));
  Tensor hidden = random_tensor({cc.t, cc.c}, DType::F32, seed, -2.0f, 2.0f);
  Tensor head = random_tensor({cc.v, cc.c}, head_dtype, seed + 1);
  Tensor labels = make_labels(cc.t, cc.v, cc.ignored_fraction, seed + 2);
  ops::CrossEntropyOptions opt;
  opt.token_block = cc.token_block;
  opt.vocab_block = cc.vocab_block;
  const float scale = 0.37f;
  Tensor dhead0 = random_tensor({cc.v, cc.c}, DType::F32, seed + 3);
  Guarded dh({cc.t, cc.c}, DType::F32), dw({cc.v, cc.c}, DType::F32);
  Tensor dh_ref = Tensor::empty({cc.t, cc.c}, DType::F32), dw_ref = dhead0.clone();
  dw.set(dhead0);
  const ops::CrossEntropyStats s = ops::cross_entropy(hidden, head, labels, scale, dh.tensor, dw.tensor, opt);
  const ops::CrossEntropyStats r = ops::ref::cross_entropy(hidden, head, labels, scale, dh_ref, dw_ref, opt);
  EXPECT_TRUE(dh.guards_intact());
  EXPECT_TRUE(dw.guards_intact());
  EXPECT_TRUE(all_finite(dh.tensor));
  EXPECT_TRUE(all_finite(dw.tensor));
  EXPECT_EQ(s.tokens, r.tokens);
  EXPECT_EQ(s.correct, r.correct);
  EXPECT_NEAR(s.loss_sum, r.loss_sum, loss_tol(cc.c, cc.v) * 4.0 * static_cast<double>(std::max<int64_t>(r.tokens, 1)));
  EXPECT_TRUE(close_in(margin, dh.tensor, dh_ref, dhidden_tol(cc.v, scale), 1e-5));
  EXPECT_TRUE(close_in(margin, dw.tensor, dw_ref, dhead_tol(cc.t, scale), 1e-5));
  // Loss only (no gradients): the same stats bit for bit.
  Tensor none;
  const ops::CrossEntropyStats s2 = ops::cross_entropy(hidden, head, labels, scale, none, none, opt);
  EXPECT_EQ(s2.loss_sum, s.loss_sum);
  EXPECT_EQ(s2.correct, s.correct);
  // token_logprobs: per token, and its sum is -loss.
  Guarded logp({cc.t}, DType::F32);
  Tensor logp_ref = Tensor::empty({cc.t}, DType::F32);
  ops::token_logprobs(hidden, head, labels, logp.tensor, opt);
  ops::ref::token_logprobs(hidden, head, labels, logp_ref, opt);
  EXPECT_TRUE(logp.guards_intact());
  EXPECT_TRUE(close_in(margin, logp.tensor, logp_ref, loss_tol(cc.c, cc.v) * 4.0, 1e-6));
  double sum = 0.0;
  for (int64_t i = 0; i < cc.t; ++i) sum += logp.tensor.item(i);
  EXPECT_NEAR(-sum, s.loss_sum, 1e-9 * std::max(1.0, std::fabs(s.loss_sum)) + 1e-6);
  // token_logprobs_backward with per-token weights: against the reference.
  Tensor dlogp = random_tensor({cc.t}, DType::F32, seed + 4);
  Guarded gh({cc.t, cc.c}, DType::F32), gw({cc.v, cc.c}, DType::F32);
  gw.set(dhead0);
  Tensor gh_ref = Tensor::empty({cc.t, cc.c}, DType::F32), gw_ref = dhead0.clone();
  ops::token_logprobs_backward(hidden, head, labels, dlogp, gh.tensor, gw.tensor, opt);
  ops::ref::token_logprobs_backward(hidden, head, labels, dlogp, gh_ref, gw_ref, opt);
  EXPECT_TRUE(gh.guards_intact());
  EXPECT_TRUE(close_in(margin, gh.tensor, gh_ref, dhidden_tol(cc.v, 1.0f), 1e-5));
  EXPECT_TRUE(close_in(margin, gw.tensor, gw_ref, dhead_tol(cc.t, 1.0f), 1e-5));
}

TEST(OpsCrossEntropy, ChunkedMatchesUnchunkedReference) {
  Margin margin;
  const CeCase cases[] = {
      {1, 1, 1, 128, 256, 0.0},       // one token, one class: loss 0
      {5, 7, 13, 128, 256, 0.0},      // a single block
      {13, 33, 97, 4, 16, 0.3},       // V not a multiple of the block; token blocks of 4
      {33, 64, 1000, 7, 100, 0.5},
      {40, 20, 333, 1, 1, 0.2},       // one-token, one-row blocks: the online lse at its finest
      {200, 45, 777, 64, 128, 0.0},   // several items per thread
      {129, 48, 4099, 128, 256, 0.1},
  };
  uint32_t seed = 6000;
  for (const CeCase& c : cases) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) check_case(margin, c, dt, seed += 10);
  }
}

TEST(OpsCrossEntropy, AllIgnoredAndIgnoredRowsAreZero) {
  Margin margin;
  const int64_t t = 9, c = 6, v = 11;
  Tensor hidden = random_tensor({t, c}, DType::F32, 1), head = random_tensor({v, c}, DType::F32, 2);
  Tensor labels = Tensor::from_i32({t}, std::vector<int32_t>(t, -100));
  Guarded dh({t, c}, DType::F32);
  Tensor dw = random_tensor({v, c}, DType::F32, 3), dw0 = dw.clone();
  const ops::CrossEntropyStats s = ops::cross_entropy(hidden, head, labels, 1.0f, dh.tensor, dw);
  EXPECT_EQ(s.tokens, 0);
  EXPECT_EQ(s.correct, 0);
  EXPECT_EQ(s.loss_sum, 0.0);
  EXPECT_TRUE(dh.guards_intact());
  for (int64_t i = 0; i < t * c; ++i) ASSERT_EQ(dh.tensor.item(i), 0.0);
  EXPECT_TRUE(bit_equal(dw, dw0));
  // A custom ignore_index: -100 is then a bad label; 5 is ignored.
  ops::CrossEntropyOptions opt;
  opt.ignore_index = 5;
  Tensor lab5 = Tensor::from_i32({t}, {5, 1, 5, 2, 5, 5, 0, 10, 5});
  Tensor dh5 = Tensor::empty({t, c}, DType::F32), dh5_ref = Tensor::empty({t, c}, DType::F32), none;
  const ops::CrossEntropyStats a = ops::cross_entropy(hidden, head, lab5, 1.0f, dh5, none, opt);
  const ops::CrossEntropyStats b = ops::ref::cross_entropy(hidden, head, lab5, 1.0f, dh5_ref, none, opt);
  EXPECT_EQ(a.tokens, 4);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-5);
  EXPECT_TRUE(close_in(margin, dh5, dh5_ref, dhidden_tol(v, 1.0f), 1e-5));
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, head, labels, 1.0f, dh5, none, opt); },
                           {"cross_entropy", "label -100 at position 0", "ignore_index 5"}));
}

TEST(OpsCrossEntropy, AccuracyCountsFirstArgmaxAndKnownLoss) {
  // Two classes with equal logits: loss log 2, argmax = the first (index 0) as torch.argmax.
  Tensor hidden = Tensor::from_f32({3, 1}, {1.0f, 1.0f, 2.0f});
  Tensor head = Tensor::from_f32({2, 1}, {0.5f, 0.5f});
  Tensor labels = Tensor::from_i32({3}, {0, 1, 1});
  ops::CrossEntropyOptions opt;
  opt.vocab_block = 1;  // the tie spans two blocks: the earlier block must win
  Tensor dh = Tensor::empty({3, 1}, DType::F32), none;
  const ops::CrossEntropyStats s = ops::cross_entropy(hidden, head, labels, 1.0f, dh, none, opt);
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.correct, 1);
  EXPECT_NEAR(s.loss_sum, 3.0 * std::log(2.0), 1e-6);
  EXPECT_NEAR(dh.item(0), 0.0, 1e-7);  // E_p[W] - W_label = 0.5 - 0.5
}

TEST(OpsCrossEntropy, FiniteDifferences) {
  Margin margin;
  const int64_t t = 7, c = 5, v = 11;
  Tensor hidden = random_tensor({t, c}, DType::F32, 1, -2.0f, 2.0f), head = random_tensor({v, c}, DType::F32, 2);
  const std::vector<int32_t> lab = {3, -100, 10, 0, 3, -100, 7};
  Tensor labels = Tensor::from_i32({t}, lab);
  const Vec vh = to_vec(hidden), vw = to_vec(head);
  auto loss = [&](const Vec& h, const Vec& w) {
    const Vec lp = logprobs_d(h, w, lab, t, c, v, -100);
    return -std::accumulate(lp.begin(), lp.end(), 0.0);
  };
  const float scale = 0.5f;
  Vec fd_h = numeric_gradient([&](const Vec& p) { return loss(p, vw); }, vh);
  Vec fd_w = numeric_gradient([&](const Vec& p) { return loss(vh, p); }, vw);
  for (double& g : fd_h) g *= scale;
  for (double& g : fd_w) g *= scale;
  ops::CrossEntropyOptions opt;
  opt.token_block = 3;
  opt.vocab_block = 4;
  for (bool use_ref : {false, true}) {
    SCOPED_TRACE(use_ref ? "reference" : "fast");
    Tensor dh = Tensor::empty({t, c}, DType::F32), dw = Tensor::zeros({v, c}, DType::F32);
    const ops::CrossEntropyStats s = (use_ref ? ops::ref::cross_entropy : ops::cross_entropy)(hidden, head, labels, scale, dh, dw, opt);
    EXPECT_NEAR(s.loss_sum, loss(vh, vw), 1e-5);
    EXPECT_TRUE(matches_fd(margin, dh, fd_h, kFdRel, kFdRtol));
    EXPECT_TRUE(matches_fd(margin, dw, fd_w, kFdRel, kFdRtol));
    // token_logprobs_backward: d(sum_t g_t logp_t).
    Tensor dlogp = random_tensor({t}, DType::F32, 9);
    const Vec vg = to_vec(dlogp);
    const Vec fd_lh = numeric_gradient([&](const Vec& p) { return dot(vg, logprobs_d(p, vw, lab, t, c, v, -100)); }, vh);
    Tensor gh = Tensor::empty({t, c}, DType::F32), gw = Tensor::zeros({v, c}, DType::F32);
    (use_ref ? ops::ref::token_logprobs_backward : ops::token_logprobs_backward)(hidden, head, labels, dlogp, gh, gw, opt);
    EXPECT_TRUE(matches_fd(margin, gh, fd_lh, kFdRel, kFdRtol));
  }
}

TEST(OpsCrossEntropy, Errors) {
  Tensor hidden = Tensor::zeros({4, 3}, DType::F32), head = Tensor::zeros({5, 3}, DType::BF16), none;
  Tensor dh = Tensor::zeros({4, 3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, head, Tensor::from_i32({4}, {0, 5, 1, 1}), 1.0f, dh, none); },
                           {"cross_entropy", "label 5 at position 1", "[0, 5)"}));
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, Tensor::zeros({5, 2}, DType::F32), Tensor::from_i32({4}, {0, 1, 1, 1}), 1.0f, dh, none); },
                           {"cross_entropy", "disagree on C"}));
  Tensor dhead16 = Tensor::zeros({5, 3}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, head, Tensor::from_i32({4}, {0, 1, 1, 1}), 1.0f, dh, dhead16); },
                           {"cross_entropy: dhead", "F32"}));
  ops::CrossEntropyOptions bad;
  bad.vocab_block = 0;
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, head, Tensor::from_i32({4}, {0, 1, 1, 1}), 1.0f, dh, none, bad); },
                           {"cross_entropy", "vocab_block"}));
  EXPECT_TRUE(throws_error([&] { ops::cross_entropy(hidden, head, Tensor::from_i32({4}, {0, 1, 1, 1}), 1.0f, hidden, none); },
                           {"cross_entropy: dhidden", "overlaps hidden"}));
  Tensor logp = Tensor::zeros({3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::token_logprobs(hidden, head, Tensor::from_i32({4}, {0, 1, 1, 1}), logp); },
                           {"token_logprobs", "(T)"}));
}

}  // namespace
}  // namespace swift::test
