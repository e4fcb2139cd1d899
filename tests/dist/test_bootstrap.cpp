// tests/dist/test_bootstrap.cpp — launch environments of torchrun, mpirun and srun (good and bad values), Slurm
// node lists, and the TCP rendezvous (exchanges, and the timeouts when a peer is missing).
//
// Invariants: no test reads or changes the real environment (EnvLookup over a map); ports are picked free.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "core/error.h"
#include "dist/bootstrap.h"
#include "dist/dist_test_util.h"
#include "dist/launcher.h"

namespace swift::dist {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    detect_launch_env(env_of(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, NoLauncherIsOneProcess) {
  const LaunchEnv e = detect_launch_env(env_of({}));
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = detect_launch_env(env_of({{"RANK", "5"},
                                                {"WORLD_SIZE", "8"},
                                                {"LOCAL_RANK", "1"},
                                                {"LOCAL_WORLD_SIZE", "4"},
                                                {"NNODES", "2"},
                                                {"NODE_RANK", "1"},
                                                {"MASTER_ADDR", "10.0.0.7"},
                                                {"MASTER_PORT", "29555"}}));
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.nnodes, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29555);
  EXPECT_EQ(e.str(), "rank 5/8 (local 1/4, node 1/2) via torchrun, master 10.0.0.7:29555");
}

TEST(LaunchEnv, TorchrunDefaults) {
  const LaunchEnv e = detect_launch_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}));
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.nnodes, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, TorchrunBadValues) {
  EXPECT_NE(error_of({{"RANK", "abc"}, {"WORLD_SIZE", "4"}}).find("RANK='abc' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("RANK=4 is outside 0..3 (WORLD_SIZE=4)"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}}).find("WORLD_SIZE is not set, but RANK is"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                      {"NNODES", "2"}, {"MASTER_ADDR", "h"}})
                .find("LOCAL_RANK=2 is outside 0..1 (LOCAL_WORLD_SIZE=2)"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "1"}, {"WORLD_SIZE", "6"}, {"LOCAL_WORLD_SIZE", "4"}, {"NNODES", "2"},
                      {"MASTER_ADDR", "h"}})
                .find("WORLD_SIZE=6 but NNODES x LOCAL_WORLD_SIZE = 2 x 4 = 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})
                .find("MASTER_PORT=70000 is not a TCP port"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"NNODES", "2"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0"), std::string::npos);
}

TEST(LaunchEnv, Mpirun) {
  const LaunchEnv e = detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.nnodes, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  const LaunchEnv two = detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "5"},
                                                  {"OMPI_COMM_WORLD_SIZE", "8"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                                  {"MASTER_ADDR", "gpu01"},
                                                  {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(two.nnodes, 2);
  EXPECT_EQ(two.node_rank, 1);
  EXPECT_EQ(two.master_addr, "gpu01");
  EXPECT_EQ(two.master_port, 1234);
}

TEST(LaunchEnv, MpirunBadValues) {
  std::string e = error_of({{"OMPI_COMM_WORLD_RANK", "5"},
                            {"OMPI_COMM_WORLD_SIZE", "8"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_NE(e.find("needs MASTER_ADDR"), std::string::npos) << e;
  e = error_of({{"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_NE(e.find("OMPI_COMM_WORLD_SIZE is not set"), std::string::npos) << e;
  e = error_of({{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(e.find("OMPI_COMM_WORLD_RANK=9 is outside 0..3"), std::string::npos) << e;
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = detect_launch_env(env_of({{"SLURM_PROCID", "5"},
                                                {"SLURM_NTASKS", "8"},
                                                {"SLURM_LOCALID", "1"},
                                                {"SLURM_NNODES", "2"},
                                                {"SLURM_NODEID", "1"},
                                                {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                {"SLURM_NODELIST", "node[01-04],gpu7"}}));
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.nnodes, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, 29500);
  // MASTER_ADDR wins over the node list; uneven tasks per node.
  const LaunchEnv u = detect_launch_env(env_of({{"SLURM_PROCID", "4"},
                                                {"SLURM_NTASKS", "5"},
                                                {"SLURM_LOCALID", "0"},
                                                {"SLURM_NNODES", "2"},
                                                {"SLURM_NODEID", "1"},
                                                {"SLURM_TASKS_PER_NODE", "4,1"},
                                                {"SLURM_NODELIST", "a,b"},
                                                {"MASTER_ADDR", "10.1.1.1"}}));
  EXPECT_EQ(u.local_world_size, 1);
  EXPECT_EQ(u.master_addr, "10.1.1.1");
}

TEST(LaunchEnv, SlurmBadValues) {
  std::string e = error_of({{"SLURM_PROCID", "0"}});
  EXPECT_NE(e.find("SLURM_NTASKS is not"), std::string::npos) << e;
  e = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_NNODES", "2"}, {"SLURM_TASKS_PER_NODE", "4,3"},
                {"SLURM_NODELIST", "n[1-2]"}});
  EXPECT_NE(e.find("SLURM_TASKS_PER_NODE='4,3' adds up to 7 tasks but SLURM_NTASKS=8"), std::string::npos) << e;
  e = error_of({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "8"}});
  EXPECT_NE(e.find("SLURM_PROCID='x1' is not an integer"), std::string::npos) << e;
  e = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "node[01-"}});
  EXPECT_NE(e.find("'[' without ']'"), std::string::npos) << e;
}

TEST(LaunchEnv, PrecedenceTorchrunThenMpiThenSlurm) {
  EXPECT_EQ(detect_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                                      {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}))
                .launcher,
            "torchrun");
  EXPECT_EQ(detect_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}))
                .launcher,
            "mpirun");
}

TEST(SlurmNodelist, Expands) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node[01-04],gpu7"), (V{"node01", "node02", "node03", "node04", "gpu7"}));
  EXPECT_EQ(expand_slurm_nodelist("a,b"), (V{"a", "b"}));
  EXPECT_EQ(expand_slurm_nodelist("n[08-10]"), (V{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("n[1,3-4,7]"), (V{"n1", "n3", "n4", "n7"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu-[3-4]-ib"), (V{"gpu-3-ib", "gpu-4-ib"}));
}

TEST(SlurmNodelist, BadLists) {
  for (const char* bad : {"n[1-", "n]", "n[3-1]", "n[a]", "n[]", "a,,b"}) {
    EXPECT_THROW(expand_slurm_nodelist(bad), Error) << bad;
  }
}

// ---- launch options from the environment ----------------------------------------------------------------

TEST(LaunchOptionsFromEnv, NprocPerNode) {
  char arg0[] = "swift", arg1[] = "sft";
  char* argv[] = {arg0, arg1};
  LaunchOptions o;
  EXPECT_FALSE(launch_options_from_env(2, argv, env_of({}), &o));
  EXPECT_FALSE(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "1"}}), &o));
  EXPECT_FALSE(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "4"}, {"RANK", "0"}}), &o));
  ASSERT_TRUE(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "4"}}), &o));
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.master_port, 0);  // a free one is picked at launch
  EXPECT_EQ(o.argv, (std::vector<std::string>{"swift", "sft"}));
  ASSERT_TRUE(launch_options_from_env(
      2, argv, env_of({{"NPROC_PER_NODE", "8"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"},
                       {"SLURM_NODELIST", "node[07-08]"}}),
      &o));
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "node07");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_THROW(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "four"}}), &o), Error);
  EXPECT_THROW(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "0"}}), &o), Error);
  EXPECT_THROW(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "2"}, {"NNODES", "2"}}), &o), Error);
  EXPECT_THROW(launch_options_from_env(2, argv, env_of({{"NPROC_PER_NODE", "2"}, {"NNODES", "2"}, {"NODE_RANK", "2"},
                                                        {"MASTER_ADDR", "h"}}),
                                       &o),
               Error);
}

// ---- rendezvous ------------------------------------------------------------------------------------------

LaunchEnv local_env(int rank, int world, int port) { return test::local_launch_env(rank, world, port); }

TEST(Rendezvous, ExchangesBlobsInRankOrder) {
  const int world = 4;
  const int port = pick_free_port();
  std::vector<std::vector<std::string>> gathered(world);
  std::vector<std::string> broadcasts(world);
  const std::vector<std::string> errors = test::run_rank_threads(world, [&](int r) {
    Rendezvous rv(local_env(r, world, port), 10.0);
    gathered[static_cast<size_t>(r)] = rv.all_gather(std::string(static_cast<size_t>(r) * 3, 'a' + r), "test");
    std::string id(128, '\0');
    for (int i = 0; i < 128; ++i) id[static_cast<size_t>(i)] = static_cast<char>(i * 7);
    broadcasts[static_cast<size_t>(r)] = rv.broadcast(r == 2 ? id : std::string("ignored"), 2, "unique id");
    rv.barrier("end");
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    ASSERT_EQ(gathered[static_cast<size_t>(r)].size(), 4u);
    for (int q = 0; q < world; ++q) {
      EXPECT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(q)], std::string(static_cast<size_t>(q) * 3, 'a' + q));
    }
    ASSERT_EQ(broadcasts[static_cast<size_t>(r)].size(), 128u);
    EXPECT_EQ(broadcasts[static_cast<size_t>(r)][5], static_cast<char>(35));
  }
}

TEST(Rendezvous, MissingRankIsNamed) {
  try {
    Rendezvous rv(local_env(0, 3, pick_free_port()), 0.3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2 did not connect within 0.3 s"), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, UnreachableMasterIsNamed) {
  const int port = pick_free_port();  // nobody listens there
  try {
    Rendezvous rv(local_env(1, 2, port), 0.3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
  }
}

TEST(Rendezvous, PeerThatDiesIsNamed) {
  const int port = pick_free_port();
  std::string error;
  std::thread master([&] {
    try {
      Rendezvous rv(local_env(0, 2, port), 5.0);
      rv.all_gather("x", "after setup");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  {
    Rendezvous rv(local_env(1, 2, port), 5.0);
  }  // rank 1 leaves without taking part in the exchange
  master.join();
  EXPECT_NE(error.find("rendezvous 'after setup': rank 0 waiting for rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("closed the connection"), std::string::npos) << error;
}

}  // namespace
}  // namespace swift::dist
