// tests/data/test_streaming.cpp — --streaming: the same sequences as the in-memory path (file order), `#N`
// taking the first rows, the shuffle buffer's determinism and independence from chunking and threads, packing
// rounds, ranks, resume and the refusals.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "data/streaming.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::FakeChatEncoder;
using testing::FakeTokenizer;
using testing::fixtures_dir;
using testing::TempDir;

struct DataStreaming : ::testing::Test {
  FakeTokenizer tok;
  FakeChatEncoder chat{tok};
  TempDir dir;
  std::string a, b;
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 230; ++i) {
      text += (i % 41 == 7) ? "{\"unusable\": 1}\n"
                            : fmt::format("{{\"query\": \"question {}\", \"response\": \"{}\"}}\n", i, std::string(1 + i % 17, 'a'));
    }
    a = dir.write("a.jsonl", text);
    b = dir.write("b.csv", "question,answer\nq1,a1\nq2,\"a2, two\"\n");
  }
  DatasetOptions data(std::vector<std::string> files, bool shuffle) {
    DatasetOptions d;
    d.dataset = std::move(files);
    d.dataset_shuffle = shuffle;
    d.warn = [](const std::string&) {};
    return d;
  }
  EncodeOptions enc() {
    EncodeOptions e;
    e.chat = &chat;
    return e;
  }
  // Every batch of one pass: per batch, the ids of each sequence.
  std::vector<std::vector<std::vector<int32_t>>> pass(StreamingLoader& l, int64_t epoch = 0) {
    std::vector<std::vector<std::vector<int32_t>>> out;
    l.start(epoch);
    while (auto batch = l.next()) {
      std::vector<std::vector<int32_t>> seqs;
      const int32_t* ids = batch->ids.data<int32_t>();
      const int32_t* cu = batch->cu_seqlens.data<int32_t>();
      for (int64_t k = 0; k + 1 < batch->cu_seqlens.numel(); ++k) seqs.emplace_back(ids + cu[k], ids + cu[k + 1]);
      out.push_back(std::move(seqs));
    }
    return out;
  }
  static std::vector<std::vector<int32_t>> flat(const std::vector<std::vector<std::vector<int32_t>>>& batches) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

TEST_F(DataStreaming, UnshuffledStreamEqualsTheInMemoryPath) {
  auto d = data({a, b, fixtures_dir() + "/gsm8k-train-20.jsonl#4"}, false);
  StreamingLoader l(d, enc(), {.batch_size = 3, .chunk_rows = 16});
  auto streamed = flat(pass(l));
  auto splits = load_datasets(d);
  auto memory = encode_samples(splits.train, enc());
  ASSERT_EQ(static_cast<int64_t>(streamed.size()), memory.size());
  for (int64_t i = 0; i < memory.size(); ++i) {
    ASSERT_EQ(streamed[static_cast<size_t>(i)], std::vector<int32_t>(memory.ids(i).begin(), memory.ids(i).end()));
  }
  EXPECT_EQ(l.stats().sequences, memory.size());
  EXPECT_FALSE(l.next().has_value());
  EXPECT_EQ(l.step(), (memory.size() + 2) / 3);
}

TEST_F(DataStreaming, ShuffleBufferIsSeededAndIndependentOfChunksAndThreads) {
  auto d = data({a}, true);
  StreamingOptions o{.batch_size = 2, .shuffle_buffer_size = 50, .chunk_rows = 7};
  StreamingLoader base(d, enc(), o);
  auto want = pass(base);
  auto unshuffled = flat([&] {
    StreamingLoader plain(data({a}, false), enc(), o);
    return pass(plain);
  }());
  auto got = flat(want);
  EXPECT_NE(got, unshuffled);
  std::multiset<std::vector<int32_t>> m1(got.begin(), got.end()), m2(unshuffled.begin(), unshuffled.end());
  EXPECT_EQ(m1, m2);
  for (int threads : {1, 3}) {
    for (int64_t chunk : {int64_t{1}, int64_t{64}, int64_t{1000}}) {
      for (int prefetch : {0, 2}) {
        auto dd = d;
        dd.dataset_num_proc = threads;
        StreamingOptions oo = o;
        oo.chunk_rows = chunk;
        oo.prefetch = prefetch;
        StreamingLoader l(dd, enc(), oo);
        ASSERT_EQ(pass(l), want) << threads << " threads, chunk " << chunk << ", prefetch " << prefetch;
      }
    }
  }
  EXPECT_NE(pass(base, 1), want);  // another epoch, another order
  d.data_seed = 1;
  StreamingLoader other(d, enc(), o);
  EXPECT_NE(pass(other), want);
}

TEST_F(DataStreaming, SampleCountTakesTheFirstRows) {
  auto d = data({a + "#5"}, false);
  StreamingLoader l(d, enc(), {.batch_size = 100});
  auto batches = pass(l);
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].size(), 5u);
  std::string first = tok.decode(batches[0][0]);
  EXPECT_NE(first.find("question 0"), std::string::npos) << first;
}

TEST_F(DataStreaming, PackingRoundsKeepEverySequenceOnce) {
  auto d = data({a}, true);
  StreamingOptions o{.batch_size = 1, .packing_length = 200, .packing_interval = 16};
  StreamingLoader l(d, enc(), o);
  auto rows = pass(l);
  std::multiset<std::vector<int32_t>> packed;
  for (const auto& row : rows) {
    int64_t total = 0;
    for (const auto& s : row) {
      total += static_cast<int64_t>(s.size());
      packed.insert(s);
    }
    ASSERT_LE(total, 200);
  }
  StreamingLoader plain(data({a}, false), enc(), {.batch_size = 1});
  auto all = flat(pass(plain));
  EXPECT_EQ(packed, std::multiset<std::vector<int32_t>>(all.begin(), all.end()));
  EXPECT_LT(rows.size(), all.size() / 3);
}

TEST_F(DataStreaming, RanksDealUnitsRoundRobin) {
  auto d = data({a}, true);
  std::multiset<std::vector<int32_t>> seen;
  size_t total = 0;
  for (int r = 0; r < 2; ++r) {
    StreamingLoader l(d, enc(), {.batch_size = 4, .world_size = 2, .rank = r});
    for (auto& s : flat(pass(l))) {
      seen.insert(s);
      ++total;
    }
  }
  StreamingLoader one(d, enc(), {.batch_size = 4});
  auto all = flat(pass(one));
  EXPECT_EQ(total, all.size());
  EXPECT_EQ(seen, std::multiset<std::vector<int32_t>>(all.begin(), all.end()));
}

TEST_F(DataStreaming, ResumeRebuildsTheSameBatches) {
  auto d = data({a}, true);
  StreamingOptions o{.batch_size = 5, .shuffle_buffer_size = 30, .prefetch = 2};
  StreamingLoader l(d, enc(), o);
  auto want = pass(l, 2);
  StreamingLoader resumed(d, enc(), o);
  resumed.start(2, 10);
  auto b = resumed.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->epoch, 2);
  EXPECT_EQ(b->step, 10);
  const int32_t* ids = b->ids.data<int32_t>();
  const int32_t* cu = b->cu_seqlens.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(ids + cu[0], ids + cu[1]), want[10][0]);
  EXPECT_THROW(resumed.start(0, 10000), Error);
}

TEST_F(DataStreaming, Refusals) {
  auto d = data({a}, true);
  d.split_dataset_ratio = 0.1;
  EXPECT_THROW(StreamingLoader(d, enc(), {}), Error);
  EXPECT_THROW(StreamingLoader(data({}, true), enc(), {}), Error);
  StreamingLoader empty(data({dir.write("none.jsonl", "{\"x\": 1}\n")}, false), enc(), {});
  try {
    empty.start(0);
    empty.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable samples in the stream"), std::string::npos) << e.what();
  }
  auto strict = data({a}, false);
  strict.strict = true;
  StreamingLoader s(strict, enc(), {});
  EXPECT_THROW(pass(s), Error);
}

}  // namespace
}  // namespace swift::data
