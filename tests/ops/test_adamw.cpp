// tests/ops/test_adamw.cpp — AdamW, gradient norm and clipping against torch (fixture written by
// scripts/golden/make_adamw_fixture.py: torch.optim.AdamW(foreach=False) for 5 steps with a changing lr and
// weight decay, a beta1 < 0.5 case, and clip_grad_norm_), the fast kernel against the reference (AdamW, norm,
// scale_gradients: GradScaler's unscale multiply), and errors.
//
// Invariants:
//  - exp_avg and exp_avg_sq must equal torch's bit for bit (same fp32 operations, same fused multiply-adds).
//  - params may differ by kParamUlp: torch's CPU sqrt (MKL) is not correctly rounded (1 ulp off for ~0.6% of
//    inputs); a 1-ulp denominator moves the update by ~1e-7 relative, which reaches the param's last bit rarely.
//  - The total norm is summed in fp64 by us and as fp32 per-tensor norms by torch: within kNormUlp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr int64_t kParamUlp = 1;
constexpr int64_t kNormUlp = 2;

nlohmann::json load_fixture() {
  const std::string path = std::string(SWIFT_FIXTURES_DIR) + "/adamw_steps.json";
  std::ifstream in(path);
  if (!in) throw Error("cannot open " + path + " (run scripts/golden/make_adamw_fixture.py)");
  return nlohmann::json::parse(in);
}

Tensor tensor_of(const nlohmann::json& values, const Shape& shape) {
  return Tensor::from_f32(shape, values.get<std::vector<float>>());
}

// Largest ulp distance between a tensor and fixture values.
int64_t max_ulp(const Tensor& t, const nlohmann::json& values) {
  const std::vector<float> v = values.get<std::vector<float>>();
  int64_t worst = 0;
  for (int64_t i = 0; i < t.numel(); ++i) worst = std::max(worst, ulp_distance(t.data<float>()[i], v[static_cast<size_t>(i)]));
  return worst;
}

TEST(OpsAdamW, FiveStepsMatchTorch) {
  const nlohmann::json fixture = load_fixture();
  for (const nlohmann::json& c : fixture["adamw"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    ops::AdamWConfig config;
    config.beta1 = c["betas"][0].get<double>();
    config.beta2 = c["betas"][1].get<double>();
    config.eps = c["eps"].get<double>();
    config.weight_decay = c["weight_decay"].get<double>();
    std::vector<Shape> shapes;
    for (const auto& s : c["shapes"]) shapes.push_back(s.get<Shape>());
    std::vector<ops::AdamWTensor> fast, ref;
    for (size_t i = 0; i < shapes.size(); ++i) {
      for (auto* list : {&fast, &ref}) {
        list->push_back({tensor_of(c["init"][i], shapes[i]), Tensor::zeros(shapes[i], DType::F32),
                         Tensor::zeros(shapes[i], DType::F32), Tensor::zeros(shapes[i], DType::F32)});
      }
    }
    int64_t step = 0, exact = 0, total = 0;
    for (const nlohmann::json& s : c["steps"]) {
      ++step;
      SCOPED_TRACE("step " + std::to_string(step));
      config.lr = s["lr"].get<double>();
      for (size_t i = 0; i < shapes.size(); ++i) {
        fast[i].grad.copy_from(tensor_of(s["grads"][i], shapes[i]));
        ref[i].grad.copy_from(fast[i].grad);
      }
      ops::adamw_step(fast, config, step);
      ops::ref::adamw_step(ref, config, step);
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_LE(max_ulp(fast[i].param, s["params"][i]), kParamUlp) << "tensor " << i;
        EXPECT_TRUE(bit_equal(fast[i].param, ref[i].param));
        const std::vector<float> expected = s["params"][i].get<std::vector<float>>();
        for (int64_t e = 0; e < fast[i].param.numel(); ++e) {
          exact += fast[i].param.data<float>()[e] == expected[static_cast<size_t>(e)];
          ++total;
        }
      }
    }
    // Most params are bit-identical (the 1-ulp slack is for torch's sqrt only).
    std::printf("[ adamw    ] %s: %lld of %lld param values bit-identical to torch over %lld steps\n",
                c["name"].get<std::string>().c_str(), static_cast<long long>(exact), static_cast<long long>(total),
                static_cast<long long>(step));
    EXPECT_GE(exact, total * 95 / 100);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(max_ulp(fast[i].exp_avg, c["exp_avg"][i]), 0) << "exp_avg " << i;
      EXPECT_EQ(max_ulp(fast[i].exp_avg_sq, c["exp_avg_sq"][i]), 0) << "exp_avg_sq " << i;
      EXPECT_TRUE(bit_equal(fast[i].exp_avg, ref[i].exp_avg));
      EXPECT_TRUE(bit_equal(fast[i].exp_avg_sq, ref[i].exp_avg_sq));
    }
  }
}

TEST(OpsAdamW, ClipGradNormMatchesTorch) {
  const nlohmann::json fixture = load_fixture();
  const std::vector<Shape> shapes = {{7}, {3, 5}, {40}};
  for (const nlohmann::json& c : fixture["clip"]) {
    std::vector<Tensor> grads, grads_ref;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(tensor_of(c["grads"][i], shapes[i]));
      grads_ref.push_back(grads.back().clone());
    }
    const float norm_before = ops::grad_norm(grads);
    const float total = ops::clip_grad_norm(grads, c["max_norm"].get<double>());
    const float total_ref = ops::ref::clip_grad_norm(grads_ref, c["max_norm"].get<double>());
    SCOPED_TRACE("total norm " + std::to_string(total));
    EXPECT_EQ(total, norm_before);
    EXPECT_LE(ulp_distance(total, c["total_norm"].get<float>()), kNormUlp);
    EXPECT_EQ(total, total_ref);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_LE(max_ulp(grads[i], c["clipped"][i]), kNormUlp) << "grad " << i;
      EXPECT_TRUE(bit_equal(grads[i], grads_ref[i]));
    }
  }
}

TEST(OpsAdamW, ManyTensorsMatchReferenceAndNormIsDeterministic) {
  // Sizes across the chunking (16384 elements per work item): small LoRA-like tensors and a large one.
  const std::vector<int64_t> sizes = {1, 5, 7, 13, 33, 16384, 16385, 100003, 4608, 1536};
  std::vector<ops::AdamWTensor> fast, ref;
  std::vector<Tensor> grads;
  uint32_t seed = 10;
  for (int64_t n : sizes) {
    Tensor p = random_tensor({n}, DType::F32, ++seed), g = random_tensor({n}, DType::F32, ++seed, -1e-2f, 1e-2f);
    fast.push_back({p, g, Tensor::zeros({n}, DType::F32), Tensor::zeros({n}, DType::F32)});
    ref.push_back({p.clone(), g.clone(), Tensor::zeros({n}, DType::F32), Tensor::zeros({n}, DType::F32)});
    grads.push_back(g);
  }
  ops::AdamWConfig config;
  config.lr = 3e-4;
  config.weight_decay = 0.01;
  for (int64_t step = 1; step <= 3; ++step) {
    ops::adamw_step(fast, config, step);
    ops::ref::adamw_step(ref, config, step);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(bit_equal(fast[i].param, ref[i].param)) << sizes[i];
    EXPECT_TRUE(bit_equal(fast[i].exp_avg_sq, ref[i].exp_avg_sq)) << sizes[i];
  }
  const float norm = ops::grad_norm(grads);
  EXPECT_LE(ulp_distance(norm, ops::ref::grad_norm(grads)), 1);
  for (int run = 0; run < 3; ++run) EXPECT_EQ(ops::grad_norm(grads), norm);
  // Empty list: norm 0, nothing to do.
  EXPECT_EQ(ops::grad_norm(std::vector<Tensor>{}), 0.0f);
  EXPECT_NO_THROW(ops::adamw_step(std::vector<ops::AdamWTensor>{}, config, 1));
}

// AdamWConfig::grad_scale: a step reading grad * clip_coefficient gives the bits of clip_grad_norm then a plain step
// (fast kernel and reference; sizes across the vector widths and chunks), and leaves the gradients untouched.
TEST(OpsAdamW, GradScaleIsTheClipFoldedIn) {
  const std::vector<int64_t> sizes = {1, 7, 13, 16, 33, 16385, 4608};
  for (bool use_ref : {false, true}) {
    SCOPED_TRACE(use_ref ? "reference" : "fast");
    std::vector<ops::AdamWTensor> clipped, folded;
    std::vector<Tensor> clipped_grads, folded_grads;
    uint32_t seed = 70;
    for (int64_t n : sizes) {
      Tensor p = random_tensor({n}, DType::F32, ++seed), g = random_tensor({n}, DType::F32, ++seed, -3.0f, 3.0f);
      clipped.push_back({p.clone(), g.clone(), Tensor::zeros({n}, DType::F32), Tensor::zeros({n}, DType::F32)});
      folded.push_back({p.clone(), g.clone(), Tensor::zeros({n}, DType::F32), Tensor::zeros({n}, DType::F32)});
      clipped_grads.push_back(clipped.back().grad);
      folded_grads.push_back(folded.back().grad);
    }
    ops::AdamWConfig config;
    config.lr = 1e-3;
    config.weight_decay = 0.01;
    const std::vector<Tensor> before = [&] {
      std::vector<Tensor> copies;
      for (const Tensor& g : folded_grads) copies.push_back(g.clone());
      return copies;
    }();
    for (int64_t step = 1; step <= 2; ++step) {
      // Each step's gradients as the backward leaves them: the in-place clip of the last step undone.
      for (size_t i = 0; i < sizes.size(); ++i) clipped_grads[i].copy_from(before[i]);
      const float total = use_ref ? ops::ref::clip_grad_norm(clipped_grads, 1.0) : ops::clip_grad_norm(clipped_grads, 1.0);
      ops::AdamWConfig with_scale = config;
      with_scale.grad_scale =
          ops::clip_coefficient(use_ref ? ops::ref::grad_norm(folded_grads) : ops::grad_norm(folded_grads), 1.0);
      ASSERT_LT(with_scale.grad_scale, 1.0f) << "the gradients must be large enough to clip (norm " << total << ")";
      if (use_ref) {
        ops::ref::adamw_step(clipped, config, step);
        ops::ref::adamw_step(folded, with_scale, step);
      } else {
        ops::adamw_step(clipped, config, step);
        ops::adamw_step(folded, with_scale, step);
      }
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(bit_equal(folded[i].param, clipped[i].param)) << sizes[i];
      EXPECT_TRUE(bit_equal(folded[i].exp_avg, clipped[i].exp_avg)) << sizes[i];
      EXPECT_TRUE(bit_equal(folded[i].exp_avg_sq, clipped[i].exp_avg_sq)) << sizes[i];
      EXPECT_TRUE(bit_equal(folded_grads[i], before[i])) << "the folded step reads the gradients only";
    }
  }
  EXPECT_EQ(ops::clip_coefficient(0.5f, 1.0), 1.0f);
  EXPECT_TRUE(std::isnan(ops::clip_coefficient(std::nanf(""), 1.0)));
  EXPECT_EQ(ops::clip_coefficient(std::numeric_limits<float>::infinity(), 1.0), 0.0f);
}

TEST(OpsAdamW, NonFiniteNormPropagatesAsTorch) {
  std::vector<Tensor> grads = {Tensor::from_f32({3}, {1.0f, std::nanf(""), 2.0f}), Tensor::from_f32({2}, {3.0f, 4.0f})};
  const float total = ops::clip_grad_norm(grads, 1.0);
  EXPECT_TRUE(std::isnan(total));
  EXPECT_TRUE(std::isnan(grads[1].item(0)));  // torch multiplies by the NaN coefficient too
}

TEST(OpsAdamW, ScaleGradientsMatchesReferenceAndUnscalesExactly) {
  // Sizes across the CPU chunking; one multiply per element: the fast kernel equals the reference bit for bit.
  const std::vector<int64_t> sizes = {1, 0, 7, 16385, 100003};
  for (const float factor : {0.37f, 65536.0f}) {
    std::vector<Tensor> fast, ref, original;
    uint32_t seed = 70;
    for (int64_t n : sizes) {
      original.push_back(random_tensor({n}, DType::F32, ++seed, -1e-3f, 1e-3f));
      fast.push_back(original.back().clone());
      ref.push_back(original.back().clone());
    }
    ops::scale_gradients(fast, factor);
    ops::ref::scale_gradients(ref, factor);
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(bit_equal(fast[i], ref[i])) << factor << " " << sizes[i];
    if (factor == 65536.0f) {  // a power of two and back (the loss scaler's unscale): the original bits
      ops::scale_gradients(fast, 1.0f / 65536.0f);
      for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(bit_equal(fast[i], original[i])) << sizes[i];
    }
  }
  // A non-finite element stays non-finite, so the norm the trainer checks is not finite.
  std::vector<Tensor> grads = {Tensor::from_f32({3}, {1.0f, std::numeric_limits<float>::infinity(), 2.0f})};
  ops::scale_gradients(grads, 1.0f / 65536.0f);
  EXPECT_FALSE(std::isfinite(ops::grad_norm(grads)));
  EXPECT_TRUE(throws_error([&] { ops::scale_gradients(grads, std::nanf("")); }, {"scale_gradients", "factor"}));
  std::vector<Tensor> bf16 = {Tensor::zeros({4}, DType::BF16)};
  EXPECT_TRUE(throws_error([&] { ops::scale_gradients(bf16, 0.5f); }, {"scale_gradients", "grads[0]", "F32"}));
}

// zero_gradients: every element of every tensor +0 (NaN and -0 too), views of a larger buffer leave its other rows;
// non-F32 or undefined tensors are named.
TEST(OpsAdamW, ZeroGradientsZeroesEveryElementAndNothingElse) {
  std::vector<Tensor> grads;
  uint32_t seed = 90;
  for (int64_t n : {int64_t{1}, int64_t{0}, int64_t{7}, int64_t{16385}, int64_t{100003}}) {
    grads.push_back(random_tensor({n}, DType::F32, ++seed));
  }
  grads[2].data<float>()[1] = std::nanf("");
  grads[2].data<float>()[2] = -0.0f;
  const Tensor whole = random_tensor({6, 5}, DType::F32, ++seed), before = whole.clone();
  grads.push_back(whole.slice_rows(2, 4));
  ops::zero_gradients(grads);
  for (size_t i = 0; i + 1 < grads.size(); ++i) {
    EXPECT_TRUE(bit_equal(grads[i], Tensor::zeros(grads[i].shape(), DType::F32))) << i;
  }
  for (int64_t r = 0; r < 6; ++r) {
    const Tensor want = r >= 2 && r < 4 ? Tensor::zeros({1, 5}, DType::F32) : before.slice_rows(r, r + 1);
    EXPECT_TRUE(bit_equal(whole.slice_rows(r, r + 1), want)) << "row " << r;
  }
  std::vector<Tensor> bf16 = {Tensor::zeros({4}, DType::BF16)};
  EXPECT_TRUE(throws_error([&] { ops::zero_gradients(bf16); }, {"zero_gradients", "grads[0]", "F32"}));
  std::vector<Tensor> undefined = {Tensor::zeros({4}, DType::F32), Tensor()};
  EXPECT_TRUE(throws_error([&] { ops::zero_gradients(undefined); }, {"zero_gradients", "grads[1]"}));
}

TEST(OpsAdamW, Errors) {
  Tensor p = Tensor::zeros({4}, DType::F32), g = Tensor::zeros({4}, DType::F32), m = Tensor::zeros({4}, DType::F32);
  Tensor v = Tensor::zeros({4}, DType::F32), short_v = Tensor::zeros({3}, DType::F32);
  ops::AdamWConfig config;
  std::vector<ops::AdamWTensor> ok = {{p, g, m, v}};
  EXPECT_TRUE(throws_error([&] { ops::adamw_step(ok, config, 0); }, {"adamw_step", "step = 0"}));
  std::vector<ops::AdamWTensor> bad_shape = {{p, g, m, short_v}};
  EXPECT_TRUE(throws_error([&] { ops::adamw_step(bad_shape, config, 1); }, {"adamw_step (tensor 0)", "exp_avg_sq"}));
  std::vector<ops::AdamWTensor> alias = {{p, g, p, v}};
  EXPECT_TRUE(throws_error([&] { ops::adamw_step(alias, config, 1); }, {"adamw_step (tensor 0)", "overlaps"}));
  std::vector<ops::AdamWTensor> bf16 = {{Tensor::zeros({4}, DType::BF16), g, m, v}};
  EXPECT_TRUE(throws_error([&] { ops::adamw_step(bf16, config, 1); }, {"adamw_step (tensor 0)", "param", "F32"}));
  config.beta1 = 1.0;
  EXPECT_TRUE(throws_error([&] { ops::adamw_step(ok, config, 1); }, {"adamw_step", "beta1"}));
  std::vector<Tensor> grads = {g};
  EXPECT_TRUE(throws_error([&] { ops::clip_grad_norm(grads, 0.0); }, {"clip_grad_norm", "max_norm"}));
}

}  // namespace
}  // namespace swift::test
