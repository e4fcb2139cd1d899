// tests/dist/test_communicator_split.cpp — Communicator::split (the sequence / tensor / data-parallel groups of a
// world): sub-groups of the thread group and of the shared-memory process group (rendezvous path, one thread per
// rank) run their collectives independently of each other and of the parent, in parent-rank order; nested splits;
// a bad color fails every rank naming the one at fault; the solo communicator splits into a solo one.
//
// Invariants: F32 sums equal the serial loop over the group's members in their order, bit for bit (the CPU
// communicators' contract); timeouts are short so a broken split fails instead of hanging.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "dist/communicator.h"
#include "dist/dist_test_util.h"
#include "dist/init.h"

namespace swift::dist {
namespace {

float value(int rank, int64_t i) { return static_cast<float>(0.1 * (i + 1) + 1.7 * rank) * (i % 2 ? -1.0f : 1.0f); }

// Checks all_reduce, all_gather and all_to_all of `group` whose members are these parent ranks, in this order.
void check_group(Communicator& group, const std::vector<int>& members, int parent_rank) {
  ASSERT_EQ(group.world_size(), static_cast<int>(members.size()));
  ASSERT_EQ(members[static_cast<size_t>(group.rank())], parent_rank);
  const int64_t n = 37;
  Tensor t = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(parent_rank, i);
  group.all_reduce(t);
  for (int64_t i = 0; i < n; ++i) {
    float want = value(members[0], i);
    for (size_t m = 1; m < members.size(); ++m) want += value(members[m], i);
    ASSERT_EQ(t.data<float>()[i], want) << "element " << i;
  }
  Tensor mine = Tensor::from_f32({1}, {static_cast<float>(parent_rank)});
  Tensor all = Tensor::empty({group.world_size()}, DType::F32);
  group.all_gather(mine, all);
  for (int g = 0; g < group.world_size(); ++g) EXPECT_EQ(all.data<float>()[g], static_cast<float>(members[static_cast<size_t>(g)]));
  const int W = group.world_size();
  Tensor in = Tensor::empty({W * 2}, DType::F32), out = Tensor::empty({W * 2}, DType::F32);
  for (int d = 0; d < W; ++d) {
    in.data<float>()[2 * d] = static_cast<float>(100 * parent_rank + d);
    in.data<float>()[2 * d + 1] = -1.0f;
  }
  group.all_to_all(in, out);
  for (int s = 0; s < W; ++s) EXPECT_EQ(out.data<float>()[2 * s], static_cast<float>(100 * members[static_cast<size_t>(s)] + group.rank()));
}

std::vector<int> members_of(int world, int color, int (*color_of)(int)) {
  std::vector<int> m;
  for (int r = 0; r < world; ++r) {
    if (color_of(r) == color) m.push_back(r);
  }
  return m;
}

TEST(CommunicatorSplit, ThreadGroupsInterleavedAndBlocked) {
  for (int world : {4, 6}) {
    run_ranks(world, [world](Communicator& comm) {
      const int r = comm.rank();
      auto parity = +[](int rank) { return rank % 2; };
      auto block = +[](int rank) { return rank / 2; };
      std::unique_ptr<Communicator> odd_even = comm.split(parity(r));
      std::unique_ptr<Communicator> pairs = comm.split(block(r));
      check_group(*odd_even, members_of(world, parity(r), parity), r);
      // The groups are independent: group 0 runs extra collectives the others do not.
      if (parity(r) == 0) {
        for (int k = 0; k < 3; ++k) odd_even->barrier();
      }
      check_group(*pairs, members_of(world, block(r), block), r);
      // Nested: split the pair again into singletons; the parent still works afterwards.
      std::unique_ptr<Communicator> alone = pairs->split(pairs->rank());
      check_group(*alone, {r}, r);
      check_group(comm, members_of(world, 0, +[](int) { return 0; }), r);
    }, CommOptions{10.0, 4096});
  }
}

// The process-group setup path (rendezvous, POSIX shared memory) with one thread per rank: split maps a new
// shared-memory arena per group and unlinks its name once every member mapped it.
TEST(CommunicatorSplit, SharedMemoryProcessGroup) {
  const int world = 4;
  const int port = pick_free_port();
  const std::vector<std::string> errors = test::run_rank_threads(world, [&](int r) {
    auto comm = init_communicator(test::local_launch_env(r, world, port), Device::cpu(), "cpu", CommOptions{10.0, 1024});
    auto sub = comm->split(r < 2 ? 0 : 1);
    if (sub->backend() != "cpu-shm") throw Error("backend " + sub->backend());
    check_group(*sub, r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, r);
    sub->barrier();
    comm->barrier();
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  // No shared-memory name of this process is left behind.
  const std::string prefix = "swift-dist-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) EXPECT_NE(std::string(e->d_name).rfind(prefix, 0), 0u) << e->d_name;
    closedir(d);
  }
}

TEST(CommunicatorSplit, ANegativeColorFailsEveryRankNamingIt) {
  std::vector<std::string> errors(3);
  try {
    run_ranks(3, [&](Communicator& comm) {
      try {
        comm.split(comm.rank() == 1 ? -1 : 0);
      } catch (const Error& e) {
        errors[static_cast<size_t>(comm.rank())] = e.what();
        throw;
      }
    }, CommOptions{5.0, 4096});
    FAIL() << "expected an error";
  } catch (const Error&) {
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 1 passed color -1"), std::string::npos) << errors[static_cast<size_t>(r)];
  }
}

TEST(CommunicatorSplit, SoloSplitsIntoSolo) {
  auto solo = make_solo_communicator();
  auto sub = solo->split(3);
  EXPECT_EQ(sub->backend(), "solo");
  EXPECT_EQ(sub->world_size(), 1);
  EXPECT_THROW(solo->split(-2), Error);
}

}  // namespace
}  // namespace swift::dist
