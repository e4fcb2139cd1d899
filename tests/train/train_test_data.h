// tests/train/train_test_data.h — the small tokenized dataset the training tests share: n samples of 6..17 tokens
// with a learnable pattern (each token after the first is the previous + 1, modulo vocab), the first 1..3 tokens a
// prompt without loss. A function of (vocab, n, seed) only.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>

#include "data/encode.h"

namespace swift::test {

inline std::shared_ptr<const data::TokenizedDataset> random_dataset(int64_t vocab, int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  data::TokenizedDataset::Parts parts;
  for (int i = 0; i < n; ++i) {
    const int len = 6 + static_cast<int>(rng() % 12), prompt = 1 + static_cast<int>(rng() % 3);
    for (int t = 0; t < len; ++t) {
      const int32_t id = t == 0 ? static_cast<int32_t>(rng() % (vocab - 20)) : parts.ids.back() + 1;
      parts.ids.push_back(static_cast<int32_t>(id % vocab));
      parts.loss_mask.push_back(t >= prompt ? 1 : 0);
    }
    parts.offsets.push_back(static_cast<int64_t>(parts.ids.size()));
    parts.sample_index.push_back(i);
    parts.label.push_back(-1);
  }
  return std::make_shared<const data::TokenizedDataset>(data::TokenizedDataset::from_parts(std::move(parts)));
}

}  // namespace swift::test
