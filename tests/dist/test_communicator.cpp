// tests/dist/test_communicator.cpp — every collective of the CPU communicators against the serial computation,
// for world sizes 1-4, odd sizes and small staging slots (many chunks); errors, timeouts and aborts.
//
// Invariants: F32 results equal the serial rank-order loop bit for bit; BF16 results equal the serial fp32 loop
// over the bf16 inputs rounded once. Timeouts are short (0.3 s) and no test waits for the default one.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/communicator.h"
#include "dist/dist_test_util.h"
#include "dist/init.h"

namespace swift::dist {
namespace {

// Deterministic, rank-dependent values with varied magnitudes (so the summation order matters in fp32).
float value(int rank, int64_t i) {
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank) * std::pow(10.0, (i * 7 + rank * 3) % 9 - 4);
  return static_cast<float>(x);
}

Tensor make_input(int rank, int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, i);
  Tensor t = Tensor::from_f32({n}, v);
  return dtype == DType::F32 ? t : t.to_dtype(dtype);
}

float read(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::F32) return t.data<float>()[i];
  return bf16_to_f32(t.data<uint16_t>()[i]);
}

// The serial reference: acc = x0; acc += x1; ...; average: acc / n; BF16 rounded once.
std::vector<float> serial_reduce(int world, int64_t n, DType dtype, ReduceOp op) {
  std::vector<float> acc(static_cast<size_t>(n));
  std::vector<Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(make_input(r, n, dtype));
  for (int64_t i = 0; i < n; ++i) {
    float a = read(inputs[0], i);
    for (int r = 1; r < world; ++r) a += read(inputs[static_cast<size_t>(r)], i);
    if (op == ReduceOp::Average) a /= static_cast<float>(world);
    acc[static_cast<size_t>(i)] = dtype == DType::BF16 ? bf16_to_f32(f32_to_bf16(a)) : a;
  }
  return acc;
}

void expect_bits(const Tensor& t, int64_t offset, const std::vector<float>& expected, int rank, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float got = read(t, i), want = expected[static_cast<size_t>(offset + i)];
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << what << ": rank " << rank << " element " << i << ": " << got << " vs " << want;
  }
}

struct Sizes {
  int world;
  int64_t slot_bytes;
};

class CollectiveTest : public ::testing::TestWithParam<Sizes> {};

TEST_P(CollectiveTest, AllReduceEqualsSerialLoop) {
  const auto [world, slot] = GetParam();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1001}}) {
        const std::vector<float> want = serial_reduce(world, n, dtype, op);
        run_ranks(
            world,
            [&](Communicator& c) {
              Tensor t = make_input(c.rank(), n, dtype);
              c.all_reduce(t, op);
              expect_bits(t, 0, want, c.rank(), "all_reduce");
            },
            CommOptions{5.0, slot});
      }
    }
  }
}

TEST_P(CollectiveTest, ReduceScatterEqualsSerialShards) {
  const auto [world, slot] = GetParam();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t shard : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{300}}) {
      const int64_t n = shard * world;
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
        const std::vector<float> want = serial_reduce(world, n, dtype, op);
        run_ranks(
            world,
            [&](Communicator& c) {
              Tensor in = make_input(c.rank(), n, dtype);
              Tensor out = Tensor::zeros({shard}, dtype);
              c.reduce_scatter(in, out, op);
              expect_bits(out, c.rank() * shard, want, c.rank(), "reduce_scatter");
              // In place: the output is the input's own shard (NCCL's layout).
              Tensor in2 = make_input(c.rank(), n, dtype);
              Tensor own = in2.slice_rows(c.rank() * shard, (c.rank() + 1) * shard);
              c.reduce_scatter(in2, own, op);
              expect_bits(own, c.rank() * shard, want, c.rank(), "reduce_scatter in place");
            },
            CommOptions{5.0, slot});
      }
    }
  }
}

TEST_P(CollectiveTest, AllGatherConcatenatesInRankOrder) {
  const auto [world, slot] = GetParam();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{37}, int64_t{1001}}) {
      run_ranks(
          world,
          [&](Communicator& c) {
            Tensor in = make_input(c.rank(), m, dtype);
            Tensor out = Tensor::zeros({m * world}, dtype);
            c.all_gather(in, out);
            Tensor inplace = Tensor::zeros({m * world}, dtype);
            Tensor own = inplace.slice_rows(c.rank() * m, (c.rank() + 1) * m);
            own.copy_from(make_input(c.rank(), m, dtype));
            c.all_gather(own, inplace);
            for (int r = 0; r < world; ++r) {
              Tensor ref = make_input(r, m, dtype);
              for (int64_t i = 0; i < m; ++i) {
                ASSERT_EQ(read(out, r * m + i), read(ref, i)) << "rank " << c.rank() << " from " << r << " at " << i;
                ASSERT_EQ(read(inplace, r * m + i), read(ref, i)) << "in place, rank " << c.rank();
              }
            }
          },
          CommOptions{5.0, slot});
    }
  }
}

TEST_P(CollectiveTest, BroadcastFromEveryRoot) {
  const auto [world, slot] = GetParam();
  for (int root = 0; root < world; ++root) {
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{999}}) {
      run_ranks(
          world,
          [&](Communicator& c) {
            Tensor t = make_input(c.rank(), n, DType::BF16);
            c.broadcast(t, root);
            Tensor ref = make_input(root, n, DType::BF16);
            ASSERT_EQ(std::memcmp(t.raw(), ref.raw(), t.nbytes()), 0) << "rank " << c.rank() << " root " << root;
          },
          CommOptions{5.0, slot});
    }
  }
}

TEST_P(CollectiveTest, AllToAllExchangesChunks) {
  const auto [world, slot] = GetParam();
  for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{250}}) {
    const int64_t n = chunk * world;
    run_ranks(
        world,
        [&](Communicator& c) {
          std::vector<int32_t> v(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = c.rank() * 100000 + static_cast<int32_t>(i);
          Tensor in = Tensor::from_i32({n}, v);
          Tensor out = Tensor::zeros({n}, DType::I32);
          c.all_to_all(in, out);
          for (int s = 0; s < world; ++s) {
            for (int64_t i = 0; i < chunk; ++i) {
              // output chunk s = input chunk `rank` of rank s
              ASSERT_EQ(out.data<int32_t>()[s * chunk + i], s * 100000 + c.rank() * chunk + i)
                  << "rank " << c.rank() << " chunk " << s << " element " << i;
            }
          }
        },
        CommOptions{5.0, slot});
  }
}

TEST_P(CollectiveTest, ManyCollectivesInARowAndBarrier) {
  const auto [world, slot] = GetParam();
  run_ranks(
      world,
      [&](Communicator& c) {
        for (int step = 0; step < 50; ++step) {
          Tensor t = Tensor::from_f32({3}, {1.0f * c.rank(), 2.0f, static_cast<float>(step)});
          c.all_reduce(t);
          ASSERT_EQ(t.data<float>()[0], static_cast<float>(world * (world - 1) / 2));
          ASSERT_EQ(t.data<float>()[2], static_cast<float>(step * world));
          c.barrier();
        }
      },
      CommOptions{5.0, slot});
}

INSTANTIATE_TEST_SUITE_P(Worlds, CollectiveTest,
                         ::testing::Values(Sizes{1, 4 << 20}, Sizes{2, 4 << 20}, Sizes{3, 4 << 20}, Sizes{4, 4 << 20},
                                           Sizes{2, 256}, Sizes{3, 320}, Sizes{4, 256}),
                         [](const ::testing::TestParamInfo<Sizes>& info) {
                           return "world" + std::to_string(info.param.world) +
                                  (info.param.slot_bytes < 4096 ? "_small_slots" : "");
                         });

// ---- argument errors ----------------------------------------------------------------------------------------

std::string error_of(int world, const std::function<void(Communicator&)>& fn, double timeout = 5.0) {
  try {
    run_ranks(world, fn, CommOptions{timeout, 4 << 20});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CommunicatorErrors, ReduceScatterNotDivisible) {
  const std::string e = error_of(3, [](Communicator& c) {
    Tensor in = Tensor::zeros({10}, DType::F32);
    Tensor out = Tensor::zeros({3}, DType::F32);
    c.reduce_scatter(in, out);
  });
  EXPECT_NE(e.find("reduce_scatter: input has 10 elements, not divisible by the world size 3"), std::string::npos) << e;
}

TEST(CommunicatorErrors, AllToAllNotDivisible) {
  const std::string e = error_of(4, [](Communicator& c) {
    Tensor in = Tensor::zeros({6}, DType::F32);
    Tensor out = Tensor::zeros({6}, DType::F32);
    c.all_to_all(in, out);
  });
  EXPECT_NE(e.find("all_to_all: input has 6 elements, not divisible by the world size 4"), std::string::npos) << e;
}

TEST(CommunicatorErrors, WrongOutputSizeAndDtype) {
  std::string e = error_of(2, [](Communicator& c) {
    Tensor in = Tensor::zeros({5}, DType::F32);
    Tensor out = Tensor::zeros({9}, DType::F32);
    c.all_gather(in, out);
  });
  EXPECT_NE(e.find("all_gather: output has 9 elements; expected world size x input elements = 2 x 5 = 10"),
            std::string::npos)
      << e;
  e = error_of(2, [](Communicator& c) {
    Tensor t = Tensor::zeros({4}, DType::I32);
    c.all_reduce(t);
  });
  EXPECT_NE(e.find("all_reduce: the tensor has dtype"), std::string::npos) << e;
  e = error_of(2, [](Communicator& c) {
    Tensor t = Tensor::zeros({4}, DType::F32);
    c.broadcast(t, 2);
  });
  EXPECT_NE(e.find("broadcast: root 2 is not a rank of this group (0..1)"), std::string::npos) << e;
}

TEST(CommunicatorErrors, MismatchedCollectivesAreNamed) {
  const std::string e = error_of(2, [](Communicator& c) {
    Tensor t = Tensor::zeros({8}, DType::F32);
    if (c.rank() == 0) {
      c.all_reduce(t);
    } else {
      Tensor out = Tensor::zeros({16}, DType::F32);
      c.all_gather(t, out);
    }
  });
  EXPECT_NE(e.find("collective mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("all_reduce(F32, 8 elements)"), std::string::npos) << e;
  EXPECT_NE(e.find("all_gather(F32, 8 elements)"), std::string::npos) << e;
}

TEST(CommunicatorErrors, SizeMismatchIsNamed) {
  const std::string e = error_of(2, [](Communicator& c) {
    Tensor t = Tensor::zeros({c.rank() == 0 ? 8 : 9}, DType::F32);
    c.all_reduce(t);
  });
  EXPECT_NE(e.find("collective mismatch"), std::string::npos) << e;
}

// ---- timeouts, departures, aborts ----------------------------------------------------------------------------

TEST(CommunicatorTimeout, RankThatNeverJoinsIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of(
      3,
      [](Communicator& c) {
        if (c.rank() == 2) return;  // never calls the collective (its communicator stays alive)
        Tensor t = Tensor::zeros({4}, DType::F32);
        c.all_reduce(t);
      },
      0.3);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Rank 0 times out itself, or rank 1 did first and aborted the group with the same message.
  EXPECT_EQ(e.rfind("rank 0: all_reduce(F32, 4 elements) #1: ", 0), 0u) << e;
  EXPECT_NE(e.find("all_reduce(F32, 4 elements) #1: timed out after 0.3 s waiting for rank(s) 2 to arrive"),
            std::string::npos)
      << e;
  EXPECT_LT(seconds, 3.0);
}

TEST(CommunicatorTimeout, RankThatLeftIsNamed) {
  auto comms = make_thread_group(2, CommOptions{30.0, 4096});
  comms[1].reset();
  Tensor t = Tensor::zeros({4}, DType::F32);
  try {
    comms[0]->all_reduce(t);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 left the group"), std::string::npos) << e.what();
  }
  // The group is aborted now: later calls fail at once.
  EXPECT_THROW(comms[0]->barrier(), Error);
}

TEST(CommunicatorTimeout, AbortReachesThePeersAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of(
      3,
      [](Communicator& c) {
        if (c.rank() == 1) fail("bad batch in the data loader");
        Tensor t = Tensor::zeros({4}, DType::F32);
        c.all_reduce(t);
      },
      30.0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find("rank 0: all_reduce(F32, 4 elements) #1: the group was aborted by rank 1: bad batch in the data "
                   "loader"),
            std::string::npos)
      << e;
  EXPECT_LT(seconds, 5.0);
}

TEST(CommunicatorTimeout, TimeoutFromEnvironment) {
  setenv("SWIFT_DIST_TIMEOUT", "12.5", 1);
  EXPECT_DOUBLE_EQ(resolve_timeout(CommOptions{}), 12.5);
  EXPECT_DOUBLE_EQ(resolve_timeout(CommOptions{3.0, 4096}), 3.0);
  setenv("SWIFT_DIST_TIMEOUT", "soon", 1);
  try {
    resolve_timeout(CommOptions{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SWIFT_DIST_TIMEOUT='soon' is not a positive number"), std::string::npos);
  }
  unsetenv("SWIFT_DIST_TIMEOUT");
  EXPECT_DOUBLE_EQ(resolve_timeout(CommOptions{}), 600.0);
}

TEST(SoloCommunicator, CollectivesAreIdentities) {
  auto c = make_solo_communicator();
  EXPECT_EQ(c->world_size(), 1);
  Tensor t = Tensor::from_f32({3}, {1, 2, 3});
  c->all_reduce(t, ReduceOp::Average);
  EXPECT_EQ(t.data<float>()[2], 3.0f);
  Tensor out = Tensor::zeros({3}, DType::F32);
  c->all_gather(t, out);
  EXPECT_EQ(out.data<float>()[1], 2.0f);
  c->barrier();
}

// ---- the process-group setup path (rendezvous + POSIX shared memory), here with one thread per rank ----------

TEST(ShmCommunicator, SetupThroughRendezvousAndShm) {
  const int world = 3;
  const int port = pick_free_port();
  const std::vector<std::string> errors = test::run_rank_threads(world, [&](int r) {
    auto comm = init_communicator(test::local_launch_env(r, world, port), Device::cpu(), "cpu", CommOptions{10.0, 512});
    if (comm->backend() != "cpu-shm") throw Error("backend " + comm->backend());
    Tensor t = make_input(r, 301, DType::F32);
    comm->all_reduce(t);
    const std::vector<float> want = serial_reduce(world, 301, DType::F32, ReduceOp::Sum);
    for (int64_t i = 0; i < 301; ++i) {
      if (t.data<float>()[i] != want[static_cast<size_t>(i)]) throw Error("mismatch at " + std::to_string(i));
    }
    comm->barrier();
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(ShmCommunicator, RefusesSeveralNodes) {
  LaunchEnv env;
  env.rank = 0;
  env.world_size = 4;
  env.local_world_size = 2;
  env.nnodes = 2;
  try {
    init_communicator(env, Device::cpu(), "cpu", CommOptions{0.2, 4096});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU communicator needs every rank on one machine"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace swift::dist
