// tests/ops/test_vocab_shard.cpp — the vocabulary-parallel ops (ops.h: embedding_shard, embedding_shard_backward,
// cross_entropy_shard_stats, cross_entropy_shard_backward): fast CPU against the CPU reference on every shard of odd
// vocabularies split over 2, 3 and 4 ranks (uneven shards: the rows [r*V/N, (r+1)*V/N)), and the shards put together
// (the lookup summed, the statistics combined as model/parallel.cpp does, dhidden summed, dhead concatenated) against
// the whole-vocabulary reference ops.
//
// Tolerances: the lookup is a copy: bit-equal. Its gradient adds a token's rows in token order (fp32; the reference
// sums in double): 1e-6 relative. Shard
// statistics and gradients: fp32 logits of C-term dots and online fp32 log-sum-exp (as test_cross_entropy.cpp's
// loss_tol / dhidden_tol); combined losses within 1e-6 relative of the whole reference.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

#include "model/parallel.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kEps = 1.1920929e-7;

Tensor shard_labels(int64_t t, int64_t v, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> lab(static_cast<size_t>(t));
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = i % 5 == 3 ? -100 : static_cast<int32_t>(gen() % v);
  return Tensor::from_i32({t}, lab);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.item(i)));
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.item(i) - b.item(i)));
  return m;
}

TEST(VocabShard, EmbeddingShardsSumToTheWholeLookup) {
  for (int64_t V : {13, 97}) {
    for (int N : {2, 3, 4}) {
      const int64_t T = 19, C = 7;
      Tensor table = random_tensor({V, C}, DType::F32, 3);
      std::vector<int32_t> id(T);
      for (int64_t t = 0; t < T; ++t) id[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % V);
      const Tensor ids = Tensor::from_i32({T}, id);
      Tensor whole = Tensor::empty({T, C}, DType::F32);
      ops::ref::embedding(table, ids, whole);
      Tensor sum = Tensor::zeros({T, C}, DType::F32);
      Tensor dout = random_tensor({T, C}, DType::F32, 5);
      const int64_t pad = id[2];  // a padding id that occurs
      Tensor dwhole = Tensor::zeros({V, C}, DType::F32);
      ops::ref::embedding_backward(dout, ids, dwhole, pad);
      for (int r = 0; r < N; ++r) {
        SCOPED_TRACE("V=" + std::to_string(V) + " N=" + std::to_string(N) + " r=" + std::to_string(r));
        const model::VocabRange range = model::vocab_shard_range(V, r, N);
        const Tensor shard = table.slice_rows(range.first, range.first + range.count).clone();
        Tensor fast = Tensor::empty({T, C}, DType::F32), ref = Tensor::empty({T, C}, DType::F32);
        ops::embedding_shard(shard, ids, range.first, fast);
        ops::ref::embedding_shard(shard, ids, range.first, ref);
        EXPECT_TRUE(bit_equal(fast, ref));
        ops::add(sum, fast, sum);
        Tensor dfast = random_tensor({range.count, C}, DType::F32, 9), dref = dfast.clone();
        const Tensor d0 = dfast.clone();
        ops::embedding_shard_backward(dout, ids, range.first, dfast, pad);
        ops::ref::embedding_shard_backward(dout, ids, range.first, dref, pad);
        EXPECT_LE(max_diff(dfast, dref), 1e-6 * (1 + max_abs(dref)));
        // dfast - d0 is this shard's rows of the whole gradient.
        for (int64_t i = 0; i < range.count * C; ++i) {
          EXPECT_NEAR(dfast.item(i) - d0.item(i), dwhole.item(range.first * C + i), 1e-6) << i;
        }
      }
      EXPECT_TRUE(bit_equal(sum, whole)) << "V=" << V << " N=" << N;
    }
  }
  // Negative ids are refused (any other id is another shard's).
  Tensor table = random_tensor({4, 3}, DType::F32, 1), out = Tensor::empty({2, 3}, DType::F32);
  EXPECT_THROW(ops::embedding_shard(table, Tensor::from_i32({2}, {1, -1}), 0, out), Error);
}

struct Combined {
  double loss = 0;
  int64_t correct = 0;
  std::vector<float> lse;
};

// The shards' statistics combined as vocab_parallel_cross_entropy does.
Combined combine(const std::vector<std::array<Tensor, 4>>& shard, const Tensor& labels) {
  const int64_t T = labels.numel();
  Combined c;
  c.lse.assign(static_cast<size_t>(T), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    if (labels.data<int32_t>()[t] == -100) continue;
    double m = -INFINITY, sum = 0;
    for (const auto& s : shard) m = std::max(m, static_cast<double>(s[0].data<float>()[t]));
    float label = 0;
    size_t best = 0;
    for (size_t r = 0; r < shard.size(); ++r) {
      sum += std::exp(static_cast<double>(shard[r][0].data<float>()[t]) - m);
      label += shard[r][1].data<float>()[t];
      if (shard[r][2].data<float>()[t] > shard[best][2].data<float>()[t]) best = r;
    }
    const float l = static_cast<float>(m + std::log(sum));
    c.lse[static_cast<size_t>(t)] = l;
    c.loss += static_cast<double>(l - label);
    c.correct += shard[best][3].data<int32_t>()[t] == labels.data<int32_t>()[t] ? 1 : 0;
  }
  return c;
}

TEST(VocabShard, CrossEntropyShardsCombineToTheWholeLoss) {
  double worst_loss = 0, worst_dh = 0, worst_dw = 0;
  for (DType head_dtype : {DType::F32, DType::BF16}) {
    for (int64_t V : {13, 97}) {
      for (int N : {2, 3, 4}) {
        const int64_t T = 23, C = 11;
        const float scale = 0.37f;
        SCOPED_TRACE(std::string(dtype_name(head_dtype)) + " V=" + std::to_string(V) + " N=" + std::to_string(N));
        Tensor hidden = random_tensor({T, C}, DType::F32, 11, -2.0f, 2.0f);
        Tensor head = random_tensor({V, C}, head_dtype, 12);
        const Tensor labels = shard_labels(T, V, 13);
        ops::CrossEntropyOptions opt;
        opt.token_block = 4;
        opt.vocab_block = 5;
        Tensor dh_whole = Tensor::empty({T, C}, DType::F32), dw_whole = Tensor::zeros({V, C}, DType::F32);
        const ops::CrossEntropyStats whole = ops::ref::cross_entropy(hidden, head, labels, scale, dh_whole, dw_whole);
        std::vector<std::array<Tensor, 4>> fast(static_cast<size_t>(N));
        Tensor dh_sum = Tensor::zeros({T, C}, DType::F32);
        std::vector<Tensor> shards, dws;
        for (int r = 0; r < N; ++r) {
          const model::VocabRange range = model::vocab_shard_range(V, r, N);
          shards.push_back(head.slice_rows(range.first, range.first + range.count).clone());
          auto& f = fast[static_cast<size_t>(r)];
          std::array<Tensor, 4> ref;
          for (auto* a : {&f, &ref}) {
            for (int k = 0; k < 3; ++k) (*a)[static_cast<size_t>(k)] = Tensor::from_f32({T}, std::vector<float>(static_cast<size_t>(T), NAN));
            (*a)[3] = Tensor::from_i32({T}, std::vector<int32_t>(static_cast<size_t>(T), -7));
          }
          ops::cross_entropy_shard_stats(hidden, shards.back(), labels, range.first, f[0], f[1], f[2], f[3], opt);
          ops::ref::cross_entropy_shard_stats(hidden, shards.back(), labels, range.first, ref[0], ref[1], ref[2],
                                              ref[3]);
          for (int k = 0; k < 3; ++k) {
            EXPECT_TRUE(all_finite(f[static_cast<size_t>(k)])) << k;
            EXPECT_LE(max_diff(f[static_cast<size_t>(k)], ref[static_cast<size_t>(k)]),
                      2.0 * kEps * static_cast<double>(C + V) * 8) << "statistic " << k << " of shard " << r;
          }
          EXPECT_TRUE(bit_equal(f[3], ref[3])) << "argmax of shard " << r;
        }
        const Combined c = combine(fast, labels);
        EXPECT_EQ(c.correct, whole.correct);
        worst_loss = std::max(worst_loss, std::fabs(c.loss - whole.loss_sum) / std::fabs(whole.loss_sum));
        EXPECT_NEAR(c.loss, whole.loss_sum, 1e-6 * std::fabs(whole.loss_sum));
        const Tensor lse = Tensor::from_f32({T}, c.lse);
        for (int r = 0; r < N; ++r) {
          const model::VocabRange range = model::vocab_shard_range(V, r, N);
          Tensor dh = Tensor::from_f32({T, C}, std::vector<float>(static_cast<size_t>(T * C), NAN)), dh_ref = Tensor::empty({T, C}, DType::F32);
          Tensor dw = Tensor::zeros({range.count, C}, DType::F32), dw_ref = Tensor::zeros({range.count, C}, DType::F32);
          const Tensor& shard = shards[static_cast<size_t>(r)];
          ops::cross_entropy_shard_backward(hidden, shard, labels, range.first, lse, scale, dh, dw, opt);
          ops::ref::cross_entropy_shard_backward(hidden, shard, labels, range.first, lse, scale, dh_ref, dw_ref);
          EXPECT_TRUE(all_finite(dh));
          EXPECT_LE(max_diff(dh, dh_ref), 4.0 * kEps * static_cast<double>(V) * scale + 1e-6) << "dhidden " << r;
          EXPECT_LE(max_diff(dw, dw_ref), 4.0 * kEps * static_cast<double>(T + 8) * scale) << "dhead " << r;
          ops::add(dh_sum, dh, dh_sum);
          worst_dw = std::max(worst_dw, max_diff(dw, dw_whole.slice_rows(range.first, range.first + range.count)) /
                                            max_abs(dw_whole));
          EXPECT_LE(max_diff(dw, dw_whole.slice_rows(range.first, range.first + range.count)),
                    1e-5 * max_abs(dw_whole)) << "dhead rows of shard " << r;
        }
        worst_dh = std::max(worst_dh, max_diff(dh_sum, dh_whole) / max_abs(dh_whole));
        EXPECT_LE(max_diff(dh_sum, dh_whole), 1e-5 * max_abs(dh_whole)) << "summed dhidden";
      }
    }
  }
  std::printf("[ vocab shards ] combined loss vs whole: worst relative %.3g; dhidden %.3g, dhead %.3g of the largest\n",
              worst_loss, worst_dh, worst_dw);
}

}  // namespace
}  // namespace swift::test
