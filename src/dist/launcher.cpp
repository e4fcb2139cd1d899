// dist/launcher.cpp — starts the ranks of one node, forwards signals, stops everyone when one fails.
//
// Invariants:
//  - Everything a child needs (argv, envp, log file descriptors) is built before fork(); between fork() and
//    execve() the child calls only async-signal-safe functions.
//  - The launcher blocks SIGINT/SIGTERM/SIGHUP/SIGCHLD in the calling thread while it runs and takes them with
//    sigtimedwait (no handlers), polling waitpid on its own children only; the signal mask and the SIGCHLD
//    disposition are restored before launch() returns, so it can run inside a test process.
#include "dist/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace swift::dist {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kLaunchVariables[] = {"RANK",   "LOCAL_RANK",  "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NNODES",
                                        "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::string log;  // empty for the rank that keeps the terminal
};

std::string describe_status(int rank, int status) {
  if (WIFEXITED(status)) return fmt::format("rank {} exited with status {}", rank, WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return fmt::format("rank {} was killed by signal {} ({})", rank, sig, name ? name : "?");
  }
  return fmt::format("rank {} ended with wait status {}", rank, status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

std::string log_tail(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(0, size - 4096);
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> all;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    all.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  if (start > 0 && !all.empty()) all.erase(all.begin());  // partial first line
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - static_cast<size_t>(lines) : 0; i < all.size();
       ++i) {
    out += all[i] + "\n";
  }
  return out;
}

void signal_children(std::vector<Child>& children, int sig) {
  for (Child& c : children) {
    if (!c.running) continue;
    if (kill(-c.pid, sig) != 0) kill(c.pid, sig);  // the group, or the process if it has not set it yet
  }
}

}  // namespace

LaunchResult launch(const LaunchOptions& o) {
  if (o.nproc_per_node < 1) fail("NPROC_PER_NODE={}: it must be at least 1", o.nproc_per_node);
  if (o.nnodes < 1) fail("NNODES={}: it must be at least 1", o.nnodes);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail("NODE_RANK={} is outside 0..{} (NNODES={})", o.node_rank, o.nnodes - 1, o.nnodes);
  }
  if (o.argv.empty()) fail("launch: argv is empty (argv[0] is needed)");
  if (o.nnodes > 1 && o.master_port == 0) fail("launch on {} nodes: set MASTER_PORT (the same on every node)", o.nnodes);
  const int world = o.nproc_per_node * o.nnodes;
  const int port = o.master_port != 0 ? o.master_port : pick_free_port();
  if (port < 1 || port > 65535) fail("MASTER_PORT={} is not a TCP port (1..65535)", port);

  LaunchResult result;
  result.log_dir = o.log_dir;
  if (result.log_dir.empty()) {
    const char* env_dir = std::getenv("SWIFT_DIST_LOG_DIR");
    result.log_dir = env_dir != nullptr && *env_dir != '\0' ? std::string(env_dir)
                                                            : fmt::format("/tmp/swift-dist-{}", getpid());
  }
  std::error_code ec;
  std::filesystem::create_directories(result.log_dir, ec);
  if (ec) fail("launch: cannot create the log directory '{}': {}; set SWIFT_DIST_LOG_DIR", result.log_dir, ec.message());

  // Environment shared by all children, without the variables we set per rank.
  std::vector<std::string> base_env;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  bool has_omp = false;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (key == "OMP_NUM_THREADS") has_omp = true;
    bool ours = false;
    for (const char* v : kLaunchVariables) ours = ours || key == v;
    for (const auto& [k, v] : o.extra_env) ours = ours || key == k;
    if (!ours) base_env.push_back(entry);
  }
  if (!has_omp) base_env.push_back(fmt::format("OMP_NUM_THREADS={}", std::max(1u, cores / o.nproc_per_node)));

  std::vector<Child> children(static_cast<size_t>(o.nproc_per_node));
  std::vector<std::vector<std::string>> envs(children.size());
  std::vector<int> log_fds(children.size(), -1);
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Child& c = children[static_cast<size_t>(local)];
    c.rank = o.node_rank * o.nproc_per_node + local;
    std::vector<std::string>& env = envs[static_cast<size_t>(local)];
    env = base_env;
    env.push_back(fmt::format("RANK={}", c.rank));
    env.push_back(fmt::format("LOCAL_RANK={}", local));
    env.push_back(fmt::format("WORLD_SIZE={}", world));
    env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", o.nproc_per_node));
    env.push_back(fmt::format("NNODES={}", o.nnodes));
    env.push_back(fmt::format("NODE_RANK={}", o.node_rank));
    env.push_back(fmt::format("MASTER_ADDR={}", o.master_addr));
    env.push_back(fmt::format("MASTER_PORT={}", port));
    for (const auto& [k, v] : o.extra_env) env.push_back(k + "=" + v);
    if (local > 0) {
      c.log = fmt::format("{}/rank{}.log", result.log_dir, c.rank);
      log_fds[static_cast<size_t>(local)] = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fds[static_cast<size_t>(local)] < 0) {
        const int err = errno;
        for (int fd : log_fds) {
          if (fd >= 0) close(fd);
        }
        fail("launch: cannot write the log '{}': {}; set SWIFT_DIST_LOG_DIR", c.log, std::strerror(err));
      }
    }
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (o.announce) {
    std::fprintf(stderr, "swift: starting %d ranks on this node (node %d of %d, world size %d), master %s:%d",
                 o.nproc_per_node, o.node_rank, o.nnodes, world, o.master_addr.c_str(), port);
    if (o.nproc_per_node > 1) {
      std::fprintf(stderr, "; ranks %d-%d log to %s/rank<N>.log", children[1].rank, children.back().rank,
                   result.log_dir.c_str());
    }
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
  std::fflush(stdout);

  // Block the signals we wait for; make sure SIGCHLD is not ignored (children must stay reapable).
  sigset_t waited, old_mask;
  sigemptyset(&waited);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&waited, s);
  pthread_sigmask(SIG_BLOCK, &waited, &old_mask);
  struct sigaction default_chld{}, old_chld{};
  default_chld.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &default_chld, &old_chld);

  const pid_t parent = getpid();
  std::vector<char*> argv_ptrs;
  for (const std::string& a : o.argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  std::string start_error;
  for (size_t i = 0; i < children.size(); ++i) {
    std::vector<char*> env_ptrs;
    for (const std::string& e : envs[i]) env_ptrs.push_back(const_cast<char*>(e.c_str()));
    env_ptrs.push_back(nullptr);
    const int log_fd = log_fds[i];
    const pid_t pid = fork();
    if (pid < 0) {
      start_error = fmt::format("launch: fork() for rank {} failed: {}", children[i].rank, std::strerror(errno));
      break;
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &dfl, nullptr);
      sigaction(SIGCHLD, &old_chld, nullptr);
      pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
      if (log_fd >= 0) {
        if (devnull >= 0) dup2(devnull, 0);
        dup2(log_fd, 1);
        dup2(log_fd, 2);
      }
      execve(o.executable.c_str(), argv_ptrs.data(), env_ptrs.data());
      const char msg[] = "swift launcher: execve failed for the rank's executable\n";
      ssize_t ignored = write(2, msg, sizeof(msg) - 1);
      (void)ignored;
      _exit(127);
    }
    setpgid(pid, pid);
    children[i].pid = pid;
    children[i].running = true;
  }
  for (int fd : log_fds) {
    if (fd >= 0) close(fd);
  }
  if (devnull >= 0) close(devnull);

  int interrupts = 0;
  bool stopping = false;
  Clock::time_point kill_at{};
  std::vector<int> stopped;  // ranks still running when we began stopping
  auto begin_stop = [&](int sig) {
    stopping = true;
    for (const Child& c : children) {
      if (c.running) stopped.push_back(c.rank);
    }
    signal_children(children, sig);
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.kill_grace_s));
  };
  if (!start_error.empty()) {
    result.exit_code = 1;
    result.message = start_error;
    begin_stop(SIGTERM);
  }

  while (true) {
    // Reap.
    bool any_running = false;
    for (Child& c : children) {
      if (!c.running) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.running = false;
        c.status = r == c.pid ? status : 0;
        if (failed(c.status) && result.failed_rank < 0 && !result.interrupted && start_error.empty() &&
            !(stopping && std::find(stopped.begin(), stopped.end(), c.rank) != stopped.end())) {
          result.failed_rank = c.rank;
          result.exit_code = exit_code_of(c.status);
          result.message = describe_status(c.rank, c.status);
          begin_stop(SIGTERM);
        }
      } else {
        any_running = true;
      }
    }
    if (!any_running) break;
    if (stopping && Clock::now() >= kill_at) {
      signal_children(children, SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(24);
    }
    timespec wait_time{0, 100 * 1000 * 1000};
    siginfo_t info{};
    const int sig = sigtimedwait(&waited, &info, &wait_time);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      ++interrupts;
      if (interrupts == 1) {
        if (!result.interrupted && result.failed_rank < 0) {
          result.interrupted = true;
          result.exit_code = 128 + sig;
          result.message = fmt::format("interrupted by signal {} ({}); forwarded it to every rank", sig, strsignal(sig));
        }
        if (!stopping) {
          begin_stop(sig);
        } else {
          signal_children(children, sig);
        }
      } else {
        signal_children(children, SIGKILL);
      }
    }
  }
  sigaction(SIGCHLD, &old_chld, nullptr);
  // Drop signals of ours still pending (SIGCHLD), then restore the mask.
  {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGCHLD)) {
      timespec zero{0, 0};
      sigset_t only_chld;
      sigemptyset(&only_chld);
      sigaddset(&only_chld, SIGCHLD);
      sigtimedwait(&only_chld, nullptr, &zero);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

  if (result.failed_rank >= 0) {
    std::string others;
    for (int r : stopped) {
      if (r != result.failed_rank) others += fmt::format("{}{}", others.empty() ? "" : ", ", r);
    }
    if (!others.empty()) result.message += fmt::format("; stopped rank(s) {}", others);
    const Child* bad = nullptr;
    for (const Child& c : children) {
      if (c.rank == result.failed_rank) bad = &c;
    }
    std::fprintf(stderr, "swift: %s\n", result.message.c_str());
    if (bad != nullptr && !bad->log.empty()) {
      const std::string tail = log_tail(bad->log, 20);
      std::fprintf(stderr, "swift: last lines of %s:\n", bad->log.c_str());
      if (tail.empty()) std::fprintf(stderr, "  [rank %d] (the log is empty)\n", bad->rank);
      if (!tail.empty()) {
        size_t pos = 0;
        while (pos < tail.size()) {
          const size_t nl = tail.find('\n', pos);
          std::fprintf(stderr, "  [rank %d] %s\n", bad->rank, tail.substr(pos, nl - pos).c_str());
          pos = nl + 1;
        }
      }
    }
  } else if (!result.message.empty()) {
    std::fprintf(stderr, "swift: %s\n", result.message.c_str());
  }
  std::fflush(stderr);
  return result;
}

bool launch_options_from_env(int argc, char** argv, const EnvLookup& env, LaunchOptions* options) {
  auto get = [&](const char* name) -> const char* {
    const char* v = env(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (get("RANK") != nullptr) return false;  // already a rank (launched by us, torchrun, ...)
  const char* nproc_s = get("NPROC_PER_NODE");
  if (nproc_s == nullptr) return false;
  auto parse = [](const char* name, const char* value) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || errno == ERANGE || v < 0 || v > 1000000) {
      fail("{}='{}' is not a non-negative integer", name, value);
    }
    return static_cast<int>(v);
  };
  LaunchOptions o;
  o.nproc_per_node = parse("NPROC_PER_NODE", nproc_s);
  if (o.nproc_per_node < 1) fail("NPROC_PER_NODE=0: it must be at least 1 (the number of processes on this node)");
  if (const char* v = get("NNODES")) {
    o.nnodes = parse("NNODES", v);
  } else if (const char* s = get("SLURM_NNODES")) {
    o.nnodes = parse("SLURM_NNODES", s);
  }
  if (o.nnodes < 1) fail("NNODES=0: it must be at least 1");
  if (const char* v = get("NODE_RANK")) {
    o.node_rank = parse("NODE_RANK", v);
  } else if (const char* s = get("SLURM_NODEID"); s != nullptr && o.nnodes > 1) {
    o.node_rank = parse("SLURM_NODEID", s);
  }
  if (o.node_rank >= o.nnodes) fail("NODE_RANK={} is outside 0..{} (NNODES={})", o.node_rank, o.nnodes - 1, o.nnodes);
  if (const char* v = get("MASTER_ADDR")) {
    o.master_addr = v;
  } else if (o.nnodes > 1) {
    const char* list = get("SLURM_NODELIST");
    if (list == nullptr) list = get("SLURM_JOB_NODELIST");
    if (list == nullptr) fail("NNODES={}: set MASTER_ADDR to the host name or address of node 0", o.nnodes);
    const std::vector<std::string> hosts = expand_slurm_nodelist(list);
    if (hosts.empty()) fail("SLURM_NODELIST='{}' names no host; set MASTER_ADDR", list);
    o.master_addr = hosts.front();
  }
  if (const char* v = get("MASTER_PORT")) {
    o.master_port = parse("MASTER_PORT", v);
    if (o.master_port < 1 || o.master_port > 65535) fail("MASTER_PORT={} is not a TCP port (1..65535)", o.master_port);
  } else if (o.nnodes > 1) {
    o.master_port = 29500;
  }
  if (o.nproc_per_node == 1 && o.nnodes == 1) return false;
  o.argv.assign(argv, argv + argc);
  *options = std::move(o);
  return true;
}

int maybe_launch(int argc, char** argv) {
  try {
    LaunchOptions options;
    if (!launch_options_from_env(argc, argv, process_env(), &options)) return -1;
    return launch(options).exit_code;
  } catch (const Error& e) {
    std::fprintf(stderr, "swift: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace swift::dist
