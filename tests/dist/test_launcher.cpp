// tests/dist/test_launcher.cpp — the launcher and the CPU process group with real processes: the helper program
// (tests/dist/helper/dist_helper.cpp, path in SWIFT_DIST_HELPER) runs as the ranks.
//
// Invariants: every test finishes in a few seconds even when it fails (ranks that hang are killed by the
// launcher; waits here are bounded); logs go to a fresh directory per test; ports are picked free.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "dist/launcher.h"

namespace swift::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string fresh_dir(const std::string& name) {
  const std::string dir = fmt::format("{}/swift-dist-test-{}-{}", ::testing::TempDir(), getpid(), name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

LaunchOptions helper_options(int nproc, std::vector<std::string> args, const std::string& log_dir) {
  LaunchOptions o;
  o.executable = SWIFT_DIST_HELPER;
  o.argv = {"dist_helper"};
  for (auto& a : args) o.argv.push_back(a);
  o.nproc_per_node = nproc;
  o.log_dir = log_dir;
  o.kill_grace_s = 2.0;
  o.announce = false;
  return o;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Runs `env... helper args 2>&1` through the shell; returns the exit status and the output.
std::pair<int, std::string> run_helper(const std::string& env, const std::string& args) {
  const std::string cmd = fmt::format("env {} {} {} 2>&1", env, SWIFT_DIST_HELPER, args);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST(Launcher, AllRanksSucceed) {
  const std::string dir = fresh_dir("ok");
  const LaunchResult r = launch(helper_options(3, {"exit", "-1", "0"}, dir));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_EQ(r.message, "");
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank1.log"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank2.log"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank0.log"));  // rank 0 keeps the terminal
}

TEST(Launcher, FailingRankStopsTheOthers) {
  const std::string dir = fresh_dir("fail");
  const auto start = Clock::now();
  const LaunchResult r = launch(helper_options(3, {"exit", "1", "3", "hang"}, dir));
  EXPECT_LT(seconds_since(start), 8.0);  // the hanging ranks were stopped, not waited for
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.message.find("rank 1 exited with status 3"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("stopped rank(s) 0, 2"), std::string::npos) << r.message;
}

TEST(Launcher, RankKilledBySignal) {
  const std::string dir = fresh_dir("signal");
  const LaunchResult r = launch(helper_options(2, {"signal", "1"}, dir));
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.message.find("rank 1 was killed by signal 9"), std::string::npos) << r.message;
}

TEST(Launcher, MissingExecutableIsReported) {
  const std::string dir = fresh_dir("noexec");
  LaunchOptions o = helper_options(2, {"exit", "-1", "0"}, dir);
  o.executable = dir + "/does-not-exist";
  const LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.message.find("exited with status 127"), std::string::npos) << r.message;
}

TEST(Launcher, CtrlCIsForwarded) {
  const std::string dir = fresh_dir("ctrlc");
  // Everything the child needs is built before fork() (only execve runs in the child).
  const std::string nproc = "NPROC_PER_NODE=2", logs = "SWIFT_DIST_LOG_DIR=" + dir, path = "PATH=/usr/bin:/bin";
  char* envp[] = {const_cast<char*>(nproc.c_str()), const_cast<char*>(logs.c_str()), const_cast<char*>(path.c_str()),
                  nullptr};
  const std::string arg0 = "dist_helper", arg1 = "ready";
  char* argv[] = {const_cast<char*>(arg0.c_str()), const_cast<char*>(arg1.c_str()), const_cast<char*>(dir.c_str()),
                  nullptr};
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    execve(SWIFT_DIST_HELPER, argv, envp);
    _exit(127);
  }
  // Wait until both ranks run.
  std::vector<int> pids;
  const auto start = Clock::now();
  while (seconds_since(start) < 10.0) {
    pids.clear();
    for (int r = 0; r < 2; ++r) {
      std::ifstream in(fmt::format("{}/rank{}.pid", dir, r));
      int pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    if (pids.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(pids.size(), 2u) << "the ranks did not start";
  kill(launcher, SIGINT);
  int status = 0;
  const auto stop = Clock::now();
  pid_t done = 0;
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 && seconds_since(stop) < 10.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
    FAIL() << "the launcher did not stop after SIGINT";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  for (int pid : pids) EXPECT_NE(kill(pid, 0), 0) << "rank process " << pid << " survived";
}

// ---- the CPU process group with real processes, through maybe_launch as `swift` would start ----------------

TEST(ProcessGroup, AllReduceAcrossProcesses) {
  const std::string dir = fresh_dir("allreduce");
  const auto [status, out] = run_helper(fmt::format("NPROC_PER_NODE=3 SWIFT_DIST_LOG_DIR={}", dir), "allreduce");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("allreduce ok world 3 (rank 0, backend cpu-shm)"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks 1-2 log to " + dir), std::string::npos) << out;
  std::ifstream log(dir + "/rank2.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("allreduce ok world 3 (rank 2"), std::string::npos) << text;
}

TEST(ProcessGroup, PeerThatExitsIsNamed) {
  const std::string dir = fresh_dir("vanish");
  const auto start = Clock::now();
  const auto [status, out] =
      run_helper(fmt::format("NPROC_PER_NODE=2 SWIFT_DIST_LOG_DIR={} SWIFT_DIST_TIMEOUT=30", dir), "vanish");
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("rank 1 (pid"), std::string::npos) << out;
  EXPECT_NE(out.find("died before it could arrive"), std::string::npos) << out;
  EXPECT_NE(out.find("swift: rank 0 exited with status 1"), std::string::npos) << out;
}

TEST(ProcessGroup, StalledPeerTimesOut) {
  const std::string dir = fresh_dir("stall");
  const auto start = Clock::now();
  const auto [status, out] =
      run_helper(fmt::format("NPROC_PER_NODE=2 SWIFT_DIST_LOG_DIR={} SWIFT_DIST_TIMEOUT=0.5", dir), "stall");
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("all_reduce(F32, 16 elements) #1: timed out after 0.5 s waiting for rank(s) 1 to arrive"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stopped rank(s) 1"), std::string::npos) << out;
}

TEST(ProcessGroup, BadLaunchVariableIsAnError) {
  const auto [status, out] = run_helper("NPROC_PER_NODE=two", "exit -1 0");
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("NPROC_PER_NODE='two' is not a non-negative integer"), std::string::npos) << out;
}

}  // namespace
}  // namespace swift::dist
