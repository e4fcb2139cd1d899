// tests/data/test_loader.cpp — the DataLoader: batch layout, epochs and their seeded shuffles, identical
// batches for any worker count, resume at (epoch, step), ranks, drop_last, preference batches.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "data/loader.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

std::shared_ptr<const TokenizedDataset> dataset(int n, bool preference = false) {
  TokenizedDataset::Parts p;
  if (preference) p.rejected_offsets.push_back(0);
  for (int s = 0; s < n; ++s) {
    int len = 2 + s % 9;
    for (int j = 0; j < len; ++j) {
      p.ids.push_back(s * 100 + j);
      p.loss_mask.push_back(j > 0);
    }
    p.offsets.push_back(static_cast<int64_t>(p.ids.size()));
    p.sample_index.push_back(1000 + s);
    p.label.push_back(static_cast<int8_t>(s % 2));
    if (preference) {
      for (int j = 0; j < 3; ++j) {
        p.rejected_ids.push_back(-(s * 100 + j) - 1);
        p.rejected_loss_mask.push_back(j > 0);
      }
      p.rejected_offsets.push_back(static_cast<int64_t>(p.rejected_ids.size()));
    }
  }
  return std::make_shared<const TokenizedDataset>(TokenizedDataset::from_parts(std::move(p)));
}

std::vector<int32_t> ids_of(const Batch& b) {
  const int32_t* p = b.ids.data<int32_t>();
  return {p, p + b.ids.numel()};
}

// All batches of `epochs` epochs as (sequence lists, ids).
std::vector<std::pair<std::vector<int64_t>, std::vector<int32_t>>> run(DataLoader& loader, int epochs) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int32_t>>> out;
  for (int e = 0; e < epochs; ++e) {
    loader.start(e);
    int64_t step = 0;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->epoch, e);
      EXPECT_EQ(b->step, step++);
      out.emplace_back(b->sequences, ids_of(*b));
    }
    EXPECT_EQ(step, loader.steps_per_epoch());
  }
  return out;
}

TEST(Loader, MakeBatchLayout) {
  auto d = dataset(3);
  Batch b = make_batch(*d, {2, 0});
  // Sequence 2 has 4 tokens, sequence 0 has 2.
  EXPECT_EQ(ids_of(b), (std::vector<int32_t>{200, 201, 202, 203, 0, 1}));
  const int32_t* pos = b.positions.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(pos, pos + 6), (std::vector<int32_t>{0, 1, 2, 3, 0, 1}));
  const int32_t* cu = b.cu_seqlens.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(cu, cu + 3), (std::vector<int32_t>{0, 4, 6}));
  const int32_t* lab = b.labels.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(lab, lab + 6), (std::vector<int32_t>{-100, 201, 202, 203, -100, 1}));
  const int32_t* tgt = b.targets.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(tgt, tgt + 6), (std::vector<int32_t>{201, 202, 203, -100, 1, -100}));
  EXPECT_EQ(b.num_tokens, 6);
  EXPECT_EQ(b.num_target_tokens, 4);
  EXPECT_EQ(b.max_seqlen, 4);
  EXPECT_EQ(b.samples, (std::vector<int64_t>{1002, 1000}));
  EXPECT_EQ(b.kto_labels, (std::vector<int8_t>{0, 0}));
  EXPECT_EQ(b.ids.dtype(), DType::I32);
}

TEST(Loader, PreferenceBatchesPutRejectedAfterChosen) {
  auto d = dataset(4, true);
  Batch b = make_batch(*d, {1, 3});
  EXPECT_TRUE(b.preference);
  EXPECT_EQ(b.sequences, (std::vector<int64_t>{1, 3, 1, 3}));
  EXPECT_EQ(b.cu_seqlens.numel(), 5);
  EXPECT_EQ(ids_of(b), (std::vector<int32_t>{100, 101, 102, 300, 301, 302, 303, 304, -101, -102, -103, -301, -302, -303}));
}

TEST(Loader, EpochOrderIsSeededAndCoversEveryUnit) {
  auto d = dataset(23);
  LoaderOptions o;
  o.batch_size = 4;
  DataLoader loader(d, o);
  EXPECT_EQ(loader.steps_per_epoch(), 6);
  auto batches = run(loader, 2);
  ASSERT_EQ(batches.size(), 12u);
  std::vector<int64_t> e0, e1;
  for (size_t i = 0; i < 6; ++i) e0.insert(e0.end(), batches[i].first.begin(), batches[i].first.end());
  for (size_t i = 6; i < 12; ++i) e1.insert(e1.end(), batches[i].first.begin(), batches[i].first.end());
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 23u);
  EXPECT_EQ(e0.size(), 23u);
  EXPECT_NE(e0, e1);  // a new order each epoch
  DataLoader again(d, o);
  EXPECT_EQ(run(again, 2), batches);  // same seed, same batches
  o.seed = 43;
  DataLoader other(d, o);
  EXPECT_NE(run(other, 1)[0].first, batches[0].first);
  o.shuffle = false;
  DataLoader ordered(d, o);
  auto b = run(ordered, 1);
  EXPECT_EQ(b[0].first, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(b[5].first, (std::vector<int64_t>{20, 21, 22}));
}

TEST(Loader, SameBatchesForAnyWorkerCount) {
  auto d = dataset(101);
  auto plan = std::make_shared<const PackPlan>(pack_best_fit_decreasing(d->lengths(), 16));
  for (bool packed : {false, true}) {
    LoaderOptions o;
    o.batch_size = 3;
    o.num_workers = 0;
    DataLoader base(d, o, packed ? plan : nullptr);
    auto want = run(base, 3);
    for (int workers : {1, 2, 5}) {
      for (int prefetch : {1, 4}) {
        o.num_workers = workers;
        o.prefetch_factor = prefetch;
        DataLoader l(d, o, packed ? plan : nullptr);
        ASSERT_EQ(run(l, 3), want) << "workers " << workers << " prefetch " << prefetch << " packed " << packed;
      }
    }
  }
}

TEST(Loader, ResumeAtAnyStepMatchesTheUninterruptedRun) {
  auto d = dataset(50);
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  DataLoader full(d, o);
  auto want = run(full, 2);
  const int64_t steps = full.steps_per_epoch();
  for (int64_t epoch : {0, 1}) {
    for (int64_t step : {int64_t{0}, int64_t{5}, steps - 1, steps}) {
      DataLoader resumed(d, o);
      resumed.start(epoch, step);
      for (int64_t s = step; s < steps; ++s) {
        auto b = resumed.next();
        ASSERT_TRUE(b.has_value());
        ASSERT_EQ(b->sequences, want[static_cast<size_t>(epoch * steps + s)].first);
        ASSERT_EQ(resumed.step(), s + 1);
      }
      EXPECT_FALSE(resumed.next().has_value());
      EXPECT_EQ(full.batch_at(epoch, std::min(step, steps - 1)).sequences,
                want[static_cast<size_t>(epoch * steps + std::min(step, steps - 1))].first);
    }
  }
  DataLoader bad(d, o);
  EXPECT_THROW(bad.start(0, steps + 1), Error);
  EXPECT_THROW(bad.batch_at(0, steps), Error);
}

TEST(Loader, StopsWorkersMidEpoch) {
  auto d = dataset(200);
  LoaderOptions o;
  o.num_workers = 4;
  o.prefetch_factor = 2;
  {
    DataLoader l(d, o);
    l.start(0);
    ASSERT_TRUE(l.next().has_value());
    l.start(1, 3);  // restart while workers are blocked on full queues
    auto b = l.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->epoch, 1);
    EXPECT_EQ(b->step, 3);
  }  // destructor joins the workers
}

TEST(Loader, RanksSplitTheEpoch) {
  auto d = dataset(10);
  LoaderOptions o;
  o.batch_size = 2;
  o.world_size = 3;
  std::vector<int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    DataLoader l(d, o);
    EXPECT_EQ(l.units_per_rank(), 4);  // 10 padded to 12
    EXPECT_EQ(l.steps_per_epoch(), 2);
    for (auto& [seqs, ids] : run(l, 1)) seen.insert(seen.end(), seqs.begin(), seqs.end());
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
  o.drop_last = true;
  o.rank = 0;
  DataLoader cut(d, o);
  EXPECT_EQ(cut.units_per_rank(), 3);
  EXPECT_EQ(cut.steps_per_epoch(), 1);
  o.world_size = 1;
  o.batch_size = 4;
  DataLoader dl(d, o);
  EXPECT_EQ(dl.steps_per_epoch(), 2);  // 10 / 4, the last 2 dropped
  o.batch_size = 11;
  EXPECT_THROW(DataLoader(d, o), Error);
  o.batch_size = 0;
  EXPECT_THROW(DataLoader(d, o), Error);
}

}  // namespace
}  // namespace swift::data
