// tests/train/test_adamw_groups.cpp — train::AdamW keeps its decay groups' tensor lists between steps and rebuilds
// them when a tensor behind them changes: a moment replaced by a new tensor (not copied into), or a product copy
// made after the first step. Against a twin whose tensors change in place: the same parameters bit for bit.
// Label unit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/training.h"
#include "ops/backends.h"
#include "ops/op_test_util.h"
#include "train/optimizer.h"

namespace swift::test {
namespace {

std::vector<model::Parameter> twin_parameters(uint32_t seed) {
  std::vector<model::Parameter> params;
  for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{
           {"layers.0.mlp.lora_A.weight", 24}, {"layers.0.input_layernorm.weight", 7}, {"lm_head.weight", 40}}) {
    params.push_back({name, random_tensor({n}, DType::F32, ++seed), random_tensor({n}, DType::F32, ++seed)});
  }
  return params;
}

TEST(AdamWGroups, ReplacedMomentsAndNewProductCopiesAreTaken) {
  ops::init_backends();
  std::vector<model::Parameter> in_place = twin_parameters(10), replaced = twin_parameters(10);
  ops::AdamWConfig config;
  config.weight_decay = 0.1;  // two groups: the layernorm's weight takes no decay
  train::AdamW a(in_place, config), b(replaced, config);
  a.step(1e-2);
  b.step(1e-2);
  // The moments of parameter 0: copied into on one side, a new tensor on the other.
  const Tensor moment = random_tensor({24}, DType::F32, 99, 0.0f, 1e-2f);
  a.exp_avg_sq(0).copy_from(moment);
  b.exp_avg_sq(0) = moment.clone();
  // A product copy made after the first step: written with the update from now on.
  in_place[2].product = Tensor::zeros({40}, DType::BF16);
  replaced[2].product = Tensor::zeros({40}, DType::BF16);
  a.step(1e-2, 0.5f);
  b.step(1e-2, 0.5f);
  for (size_t i = 0; i < in_place.size(); ++i) {
    EXPECT_TRUE(bit_equal(replaced[i].value, in_place[i].value)) << in_place[i].name;
  }
  EXPECT_TRUE(bit_equal(b.exp_avg_sq(0), a.exp_avg_sq(0)));
  EXPECT_TRUE(bit_equal(replaced[2].product, in_place[2].product));
  EXPECT_TRUE(replaced[2].product_current);
  EXPECT_TRUE(bit_equal(replaced[2].product.to_dtype(DType::F32), replaced[2].value.to_dtype(DType::BF16).to_dtype(DType::F32)));
}

}  // namespace
}  // namespace swift::test
