// dist/launcher.h — `NPROC_PER_NODE=N swift sft ...`: start N ranks of this executable on this node (what
// torchrun does for ms-swift), watch them, stop them all when one fails.
//
// Invariants:
//  - Each child gets the parent's environment plus RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NNODES,
//    NODE_RANK, MASTER_ADDR, MASTER_PORT (a free port on one node when unset), and OMP_NUM_THREADS = cores / N
//    when unset. The CUDA device is the child's business (LOCAL_RANK).
//  - Rank 0 (the node's first rank) keeps the terminal: its stdout/stderr are the launcher's. Every other rank
//    writes stdout+stderr to <log dir>/rank<R>.log, log dir = $SWIFT_DIST_LOG_DIR or /tmp/swift-dist-<launcher
//    pid>; the launcher says where when it starts, and prints the tail of a failed rank's log.
//  - Children run in their own process groups and die with the launcher (PR_SET_PDEATHSIG). SIGINT / SIGTERM /
//    SIGHUP to the launcher are forwarded to every child's group; a second one sends SIGKILL.
//  - When a rank exits non-zero or by a signal, the others get SIGTERM, then SIGKILL after the grace period; the
//    launcher reports "rank R exited with status S" (or "was killed by signal N (name)") and returns S
//    (128 + N for a signal, 130 after Ctrl-C). All ranks exiting 0 returns 0.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dist/bootstrap.h"

namespace swift::dist {

struct LaunchOptions {
  std::string executable = "/proc/self/exe";
  std::vector<std::string> argv;  // argv[0] included
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;     // 0: a free port (one node only)
  std::string log_dir;     // "": $SWIFT_DIST_LOG_DIR or /tmp/swift-dist-<pid>
  double kill_grace_s = 5.0;
  bool announce = true;    // print where the logs go when starting
  std::vector<std::pair<std::string, std::string>> extra_env;  // set in every child after the launch variables
};

struct LaunchResult {
  int exit_code = 0;      // what main() should return
  int failed_rank = -1;   // the first rank that failed, or -1
  bool interrupted = false;
  std::string message;    // "rank 1 exited with status 3; stopped the other ranks"; empty on success
  std::string log_dir;
};

// Starts the ranks and waits for them (see the invariants). Throws swift::Error on bad options or when a
// child cannot be started.
LaunchResult launch(const LaunchOptions& options);

// The launch options from NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (NNODES / NODE_RANK /
// MASTER_ADDR fall back on Slurm's SLURM_NNODES / SLURM_NODEID / first host of SLURM_NODELIST). Returns false
// when this process should not launch: NPROC_PER_NODE unset, or RANK already set (it is a launched rank), or
// one process on one node.
bool launch_options_from_env(int argc, char** argv, const EnvLookup& env, LaunchOptions* options);

// For main(): launches and returns the exit code when NPROC_PER_NODE asks for it, else -1 (carry on as a
// single process or as a launched rank). Errors are printed ("swift: error: ...") and return 2.
int maybe_launch(int argc, char** argv);

}  // namespace swift::dist
