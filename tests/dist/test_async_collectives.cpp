// tests/dist/test_async_collectives.cpp — started (asynchronous) collectives of the CPU communicators: the same bits
// as the serial computation, several in flight mixed with blocking calls, issue order, and errors (a bad argument at
// the call, mismatched order, a rank that never comes, an abort) that name the collective and the rank.
//
// Invariants: timeouts are short (0.3-0.5 s) and no test waits for the default one; F32 results are compared bit for
// bit with the serial rank-order loop.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace swift::dist {
namespace {

// Rank-dependent values with varied magnitudes, so the summation order shows in fp32.
float value(int rank, int64_t i, int salt) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + salt) *
                            std::pow(10.0, (i * 7 + rank * 3 + salt) % 9 - 4));
}

Tensor input(int rank, int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, i, salt);
  return Tensor::from_f32({n}, v);
}

// acc = x0; acc += x1; ... (the communicator's documented order).
std::vector<float> serial_sum(int world, int64_t n, int salt) {
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float a = value(0, i, salt);
    for (int r = 1; r < world; ++r) a += value(r, i, salt);
    acc[static_cast<size_t>(i)] = a;
  }
  return acc;
}

void expect_bits(const Tensor& t, int64_t offset, const std::vector<float>& want, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float got = t.data<float>()[i], w = want[static_cast<size_t>(offset + i)];
    ASSERT_EQ(std::memcmp(&got, &w, 4), 0) << what << " element " << i << ": " << got << " vs " << w;
  }
}

CommOptions short_timeout(double seconds) {
  CommOptions o;
  o.timeout_s = seconds;
  return o;
}

// Several started collectives of each kind in flight at once, a blocking one in between, waited out of order;
// small staging slots so each runs in many chunks. Every rank gets the serial results bit for bit.
TEST(AsyncCollectives, SeveralInFlightEqualTheSerialComputation) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t slot : {int64_t{256}, int64_t{4} << 20}) {
      CommOptions options;
      options.slot_bytes = std::max<int64_t>(slot, 64 * world);
      const int64_t n = 1001 * world;  // divisible by the world size (reduce_scatter)
      run_ranks(world, [&](Communicator& c) {
        const std::string tag = "world " + std::to_string(world) + " rank " + std::to_string(c.rank());
        std::vector<Tensor> sums;
        std::vector<std::unique_ptr<CollectiveHandle>> handles;
        for (int k = 0; k < 6; ++k) {
          sums.push_back(input(c.rank(), n, k));
          handles.push_back(c.start_all_reduce(sums.back()));
        }
        Tensor scatter_in = input(c.rank(), n, 10), scatter_out = Tensor::empty({n / world}, DType::F32);
        handles.push_back(c.start_reduce_scatter(scatter_in, scatter_out));
        Tensor blocking = input(c.rank(), 37, 20);
        c.all_reduce(blocking);  // waits for the started ones first: issue order
        Tensor mine = input(c.rank(), 13, 30), gathered = Tensor::empty({13 * world}, DType::F32);
        handles.push_back(c.start_all_gather(mine, gathered));
        // In place, as the reducer does: the output is the own shard of the input.
        Tensor in_place = input(c.rank(), n, 40);
        Tensor own_shard = in_place.slice_rows(c.rank() * (n / world), (c.rank() + 1) * (n / world));
        handles.push_back(c.start_reduce_scatter(in_place, own_shard));
        for (size_t h = handles.size(); h-- > 0;) handles[h]->wait();  // out of order
        for (int k = 0; k < 6; ++k) {
          expect_bits(sums[static_cast<size_t>(k)], 0, serial_sum(world, n, k), tag + " all_reduce");
        }
        expect_bits(scatter_out, c.rank() * (n / world), serial_sum(world, n, 10), tag + " reduce_scatter");
        expect_bits(blocking, 0, serial_sum(world, 37, 20), tag + " blocking all_reduce");
        for (int r = 0; r < world; ++r) {
          for (int64_t i = 0; i < 13; ++i) {
            ASSERT_EQ(gathered.data<float>()[r * 13 + i], value(r, i, 30)) << tag << " all_gather from rank " << r;
          }
        }
        expect_bits(own_shard, c.rank() * (n / world), serial_sum(world, n, 40), tag + " in-place reduce_scatter");
      }, options);
    }
  }
}

// A handle destroyed without wait() waits itself; the collectives after it still line up.
TEST(AsyncCollectives, DroppedHandleStillCompletes) {
  run_ranks(3, [](Communicator& c) {
    Tensor a = input(c.rank(), 500, 1);
    c.start_all_reduce(a).reset();
    expect_bits(a, 0, serial_sum(3, 500, 1), "dropped handle");
    Tensor b = input(c.rank(), 7, 2);
    c.all_reduce(b);
    expect_bits(b, 0, serial_sum(3, 7, 2), "after it");
  });
}

// Collectives run in issue order: ranks that start them in different orders get an error naming both ranks.
TEST(AsyncCollectives, DifferentOrderOnTwoRanksIsNamed) {
  std::vector<std::string> errors(2);
  EXPECT_THROW(run_ranks(2, [&](Communicator& c) {
    Tensor x = input(c.rank(), 8, 0), y = input(c.rank(), 4, 0), gathered = Tensor::empty({8}, DType::F32);
    std::unique_ptr<CollectiveHandle> first, second;
    if (c.rank() == 0) {
      first = c.start_all_reduce(x);
      second = c.start_all_gather(y, gathered);
    } else {
      first = c.start_all_gather(y, gathered);
      second = c.start_all_reduce(x);
    }
    try {
      first->wait();
      second->wait();
    } catch (const Error& e) {
      errors[static_cast<size_t>(c.rank())] = e.what();
      throw;
    }
  }, short_timeout(5)), Error);
  const std::string& e = !errors[0].empty() ? errors[0] : errors[1];
  EXPECT_NE(e.find("collective mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("all_reduce"), std::string::npos) << e;
  EXPECT_NE(e.find("all_gather"), std::string::npos) << e;
}

// A rank that never issues the collective: the started one times out, naming the collective and the missing rank.
TEST(AsyncCollectives, TimeoutNamesTheMissingRank) {
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never calls; leaves after rank 0 gave up
      return;
    }
    Tensor x = input(0, 100, 0);
    std::unique_ptr<CollectiveHandle> h = c.start_all_reduce(x);
    try {
      h->wait();
    } catch (const Error& e) {
      error = e.what();
      throw;
    }
  }, short_timeout(0.3)), Error);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error.find("all_reduce(F32, 100 elements) #1"), std::string::npos) << error;
  EXPECT_NE(error.find("timed out after 0.3 s waiting for rank(s) 1"), std::string::npos) << error;
  EXPECT_LT(seconds, 10.0);
}

// An abort on one rank reaches the other's started collective at once, with the reason and the rank.
TEST(AsyncCollectives, AbortReachesAStartedCollective) {
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("bad sample in shard 1");
      return;
    }
    Tensor x = input(0, 100, 0), y = input(0, 100, 1);
    std::unique_ptr<CollectiveHandle> a = c.start_all_reduce(x), b = c.start_all_reduce(y);
    try {
      a->wait();
    } catch (const Error& e) {
      error = e.what();
      EXPECT_THROW(b->wait(), Error);  // the one queued behind it fails too
      throw;
    }
  }, short_timeout(30)), Error);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(error.find("aborted by rank 1: bad sample in shard 1"), std::string::npos) << error;
  EXPECT_LT(seconds, 10.0) << "the abort should not wait for the 30 s timeout";
}

// A bad argument fails at the call (not later in wait), naming the collective, and aborts the group.
TEST(AsyncCollectives, BadArgumentFailsAtTheCall) {
  std::string error;
  EXPECT_THROW(run_ranks(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      Tensor in = Tensor::zeros({7}, DType::F32), out = Tensor::zeros({3}, DType::F32);
      try {
        c.start_reduce_scatter(in, out);
      } catch (const Error& e) {
        error = e.what();
        throw;
      }
      return;
    }
    Tensor x = input(1, 10, 0);
    c.start_all_reduce(x)->wait();  // fails through the abort, not the timeout
  }, short_timeout(30)), Error);
  EXPECT_NE(error.find("reduce_scatter: input has 7 elements, not divisible by the world size 2"), std::string::npos)
      << error;
}

TEST(AsyncCollectives, SoloIsTheIdentity) {
  std::unique_ptr<Communicator> solo = make_solo_communicator();
  Tensor x = input(0, 5, 0), out = Tensor::empty({5}, DType::F32);
  solo->start_all_reduce(x)->wait();
  solo->start_all_gather(x, out)->wait();
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(x.data<float>()[i], value(0, i, 0));
    EXPECT_EQ(out.data<float>()[i], value(0, i, 0));
  }
}

}  // namespace
}  // namespace swift::dist
