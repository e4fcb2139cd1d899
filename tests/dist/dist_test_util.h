// tests/dist/dist_test_util.h — shared by the dist tests that run a one-node job's ranks as threads of this process
// (rendezvous over 127.0.0.1, POSIX shared memory): the launch environment of one rank, and a runner that collects
// each rank's error text so that a failing rank is reported by number instead of terminating the test binary.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dist/bootstrap.h"

namespace swift::test {

// Rank `rank` of a one-node job of `world` ranks that rendezvous on 127.0.0.1:`port` (launcher "test").
inline dist::LaunchEnv local_launch_env(int rank, int world, int port) {
  dist::LaunchEnv e;
  e.launcher = "test";
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.local_world_size = world;
  e.master_port = port;
  return e;
}

// Runs fn(rank) on `world` threads, joins them, and returns each rank's error text ("" when it returned normally).
inline std::vector<std::string> run_rank_threads(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace swift::test
