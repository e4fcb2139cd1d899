// dist/bootstrap.cpp — launch environment parsing, Slurm node lists, and the TCP rendezvous (see bootstrap.h).
//
// Invariants:
//  - Parsing never reads the process environment directly: everything goes through the EnvLookup (tests pass
//    a map). Missing optional values get torchrun's defaults; malformed values are errors naming the variable.
//  - Sockets are CLOEXEC (launched children never inherit them), TCP_NODELAY, and every blocking step is a
//    poll() against one deadline. Wire format: little-endian u32/u64 of this machine (all ranks run the same
//    build); each message starts with a magic word and the exchange's sequence number.
#include "dist/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "core/error.h"

namespace swift::dist {
namespace {

std::optional<long long> parse_integer(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || errno == ERANGE || v < INT_MIN || v > INT_MAX) {
    fail("{}='{}' is not an integer (the launcher sets it; check how this process was started)", name, value);
  }
  return v;
}

int need_integer(const EnvLookup& env, const char* name, const char* because) {
  auto v = parse_integer(env, name);
  if (!v) fail("{} is not set, but {} is; {}", name, because, "this launch environment is incomplete");
  return static_cast<int>(*v);
}

int integer_or(const EnvLookup& env, const char* name, int fallback) {
  auto v = parse_integer(env, name);
  return v ? static_cast<int>(*v) : fallback;
}

std::string string_or(const EnvLookup& env, const char* name, const std::string& fallback) {
  const char* v = env(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// "2(x3),1" -> {2, 2, 2, 1}
std::vector<int> parse_tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  size_t i = 0;
  auto bad = [&] { fail("SLURM_TASKS_PER_NODE='{}' is not a list like '4(x2),3'", text); };
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) bad();
    const int count = std::atoi(text.substr(i, j - i).c_str());
    int repeat = 1;
    if (j < text.size() && text[j] == '(') {
      if (j + 1 >= text.size() || text[j + 1] != 'x') bad();
      size_t k = j + 2;
      while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) ++k;
      if (k == j + 2 || k >= text.size() || text[k] != ')') bad();
      repeat = std::atoi(text.substr(j + 2, k - j - 2).c_str());
      j = k + 1;
    }
    for (int r = 0; r < repeat; ++r) counts.push_back(count);
    if (j < text.size()) {
      if (text[j] != ',') bad();
      ++j;
    }
    i = j;
  }
  return counts;
}

void check_env(const LaunchEnv& e, const char* rank_var, const char* world_var, const char* local_var,
               const char* local_world_var) {
  if (e.world_size < 1) fail("{}={}: the world size must be at least 1", world_var, e.world_size);
  if (e.rank < 0 || e.rank >= e.world_size) {
    fail("{}={} is outside 0..{} ({}={})", rank_var, e.rank, e.world_size - 1, world_var, e.world_size);
  }
  if (e.local_world_size < 1 || e.local_world_size > e.world_size) {
    fail("{}={} must be between 1 and {}={}", local_world_var, e.local_world_size, world_var, e.world_size);
  }
  if (e.local_rank < 0 || e.local_rank >= e.local_world_size) {
    fail("{}={} is outside 0..{} ({}={})", local_var, e.local_rank, e.local_world_size - 1, local_world_var,
         e.local_world_size);
  }
  if (e.nnodes < 1) fail("the number of nodes is {}; it must be at least 1", e.nnodes);
  if (e.node_rank < 0 || e.node_rank >= e.nnodes) {
    fail("the node rank {} is outside 0..{} (nodes: {})", e.node_rank, e.nnodes - 1, e.nnodes);
  }
  if (e.master_port < 1 || e.master_port > 65535) fail("MASTER_PORT={} is not a TCP port (1..65535)", e.master_port);
  if (e.master_addr.empty()) fail("MASTER_ADDR is empty; set it to rank 0's host name or address");
}

}  // namespace

std::string LaunchEnv::str() const {
  return fmt::format("rank {}/{} (local {}/{}, node {}/{}) via {}, master {}:{}", rank, world_size, local_rank,
                     local_world_size, node_rank, nnodes, launcher, master_addr, master_port);
}

EnvLookup process_env() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

LaunchEnv detect_launch_env(const EnvLookup& env) {
  LaunchEnv e;
  if (env("RANK") != nullptr && *env("RANK") != '\0') {
    e.launcher = "torchrun";
    e.rank = need_integer(env, "RANK", "RANK");
    e.world_size = need_integer(env, "WORLD_SIZE", "RANK");
    e.nnodes = integer_or(env, "NNODES", 1);
    if (e.nnodes < 1) fail("NNODES={}: the number of nodes must be at least 1", e.nnodes);
    const int default_local_world = e.world_size % e.nnodes == 0 ? e.world_size / e.nnodes : e.world_size;
    e.local_world_size = integer_or(env, "LOCAL_WORLD_SIZE", default_local_world);
    e.local_rank = integer_or(env, "LOCAL_RANK", e.local_world_size > 0 ? e.rank % e.local_world_size : 0);
    e.node_rank = integer_or(env, "NODE_RANK", integer_or(env, "GROUP_RANK", e.local_world_size > 0
                                                                                ? e.rank / e.local_world_size
                                                                                : 0));
    if (e.nnodes > 1 && env("MASTER_ADDR") == nullptr) {
      fail("NNODES={} but MASTER_ADDR is not set; set it to the host name or address of node 0", e.nnodes);
    }
    e.master_addr = string_or(env, "MASTER_ADDR", "127.0.0.1");
    e.master_port = integer_or(env, "MASTER_PORT", 29500);
    check_env(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    if (e.world_size != e.nnodes * e.local_world_size) {
      fail("WORLD_SIZE={} but NNODES x LOCAL_WORLD_SIZE = {} x {} = {}; every node must run the same number of ranks",
           e.world_size, e.nnodes, e.local_world_size, e.nnodes * e.local_world_size);
    }
    return e;
  }
  if (env("OMPI_COMM_WORLD_RANK") != nullptr) {
    e.launcher = "mpirun";
    e.rank = need_integer(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK");
    e.world_size = need_integer(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
    e.local_rank = integer_or(env, "OMPI_COMM_WORLD_LOCAL_RANK", e.rank);
    e.local_world_size = integer_or(env, "OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size);
    if (e.local_world_size >= 1 && e.world_size % e.local_world_size == 0) {
      e.nnodes = e.world_size / e.local_world_size;
      e.node_rank = e.rank / e.local_world_size;
    } else {
      e.nnodes = 2;  // uneven placement over several nodes: the exact count only matters for messages
      e.node_rank = 0;
    }
    if (e.nnodes > 1 && env("MASTER_ADDR") == nullptr) {
      fail("mpirun with ranks on several nodes ({} ranks, {} on this node) needs MASTER_ADDR: pass the host of rank 0 "
           "with `mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> ...`",
           e.world_size, e.local_world_size);
    }
    e.master_addr = string_or(env, "MASTER_ADDR", "127.0.0.1");
    e.master_port = integer_or(env, "MASTER_PORT", 29500);
    check_env(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_SIZE");
    return e;
  }
  if (env("SLURM_PROCID") != nullptr) {
    e.launcher = "slurm";
    e.rank = need_integer(env, "SLURM_PROCID", "SLURM_PROCID");
    auto ntasks = parse_integer(env, "SLURM_NTASKS");
    if (!ntasks) ntasks = parse_integer(env, "SLURM_NPROCS");
    if (!ntasks) fail("SLURM_PROCID is set but SLURM_NTASKS is not; start the ranks with `srun --ntasks=N ...`");
    e.world_size = static_cast<int>(*ntasks);
    e.local_rank = integer_or(env, "SLURM_LOCALID", 0);
    e.node_rank = integer_or(env, "SLURM_NODEID", 0);
    e.nnodes = integer_or(env, "SLURM_NNODES", integer_or(env, "SLURM_JOB_NUM_NODES", 1));
    const std::string tasks_per_node = string_or(env, "SLURM_STEP_TASKS_PER_NODE", string_or(env, "SLURM_TASKS_PER_NODE", ""));
    e.local_world_size = e.nnodes == 1 ? e.world_size : 1;
    if (!tasks_per_node.empty()) {
      std::vector<int> counts = parse_tasks_per_node(tasks_per_node);
      long long total = 0;
      for (int c : counts) total += c;
      if (total != e.world_size) {
        fail("SLURM_TASKS_PER_NODE='{}' adds up to {} tasks but SLURM_NTASKS={}", tasks_per_node, total, e.world_size);
      }
      if (e.node_rank >= 0 && e.node_rank < static_cast<int>(counts.size())) {
        e.local_world_size = counts[static_cast<size_t>(e.node_rank)];
      }
      if (static_cast<int>(counts.size()) != e.nnodes) {
        fail("SLURM_TASKS_PER_NODE='{}' lists {} nodes but SLURM_NNODES={}", tasks_per_node, counts.size(), e.nnodes);
      }
    } else if (e.nnodes > 1 && e.world_size % e.nnodes == 0) {
      e.local_world_size = e.world_size / e.nnodes;
    }
    if (const char* addr = env("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
      e.master_addr = addr;
    } else {
      std::string list = string_or(env, "SLURM_STEP_NODELIST", string_or(env, "SLURM_NODELIST",
                                                                         string_or(env, "SLURM_JOB_NODELIST", "")));
      if (list.empty()) {
        if (e.nnodes > 1) fail("Slurm launch on {} nodes without SLURM_NODELIST or MASTER_ADDR; set MASTER_ADDR", e.nnodes);
      } else {
        std::vector<std::string> hosts = expand_slurm_nodelist(list);
        if (hosts.empty()) fail("SLURM_NODELIST='{}' names no host", list);
        e.master_addr = hosts.front();
      }
    }
    e.master_port = integer_or(env, "MASTER_PORT", 29500);
    check_env(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "the tasks on this node (SLURM_TASKS_PER_NODE)");
    return e;
  }
  return e;
}

// ---- Slurm node lists --------------------------------------------------------------------------------------
namespace {

std::vector<std::string> expand_name(std::string_view item, std::string_view whole) {
  const size_t open = item.find('[');
  if (open == std::string_view::npos) {
    if (item.find(']') != std::string_view::npos) fail("Slurm node list '{}': ']' without '['", whole);
    return {std::string(item)};
  }
  const size_t close = item.find(']', open);
  if (close == std::string_view::npos) fail("Slurm node list '{}': '[' without ']'", whole);
  const std::string_view prefix = item.substr(0, open);
  const std::string_view inside = item.substr(open + 1, close - open - 1);
  std::vector<std::string> rests = expand_name(item.substr(close + 1), whole);
  if (inside.empty()) fail("Slurm node list '{}': empty brackets", whole);
  std::vector<std::string> numbers;
  size_t i = 0;
  while (i <= inside.size()) {
    size_t comma = inside.find(',', i);
    if (comma == std::string_view::npos) comma = inside.size();
    const std::string_view part = inside.substr(i, comma - i);
    const size_t dash = part.find('-');
    auto is_number = [](std::string_view s) {
      if (s.empty() || s.size() > 9) return false;
      for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      }
      return true;
    };
    if (dash == std::string_view::npos) {
      if (!is_number(part)) fail("Slurm node list '{}': '{}' is not a number or a range like 01-04", whole, part);
      numbers.emplace_back(part);
    } else {
      const std::string_view lo_s = part.substr(0, dash), hi_s = part.substr(dash + 1);
      if (!is_number(lo_s) || !is_number(hi_s)) fail("Slurm node list '{}': bad range '{}'", whole, part);
      const long lo = std::stol(std::string(lo_s)), hi = std::stol(std::string(hi_s));
      if (hi < lo) fail("Slurm node list '{}': range '{}' runs backwards", whole, part);
      if (hi - lo > 100000) fail("Slurm node list '{}': range '{}' is too large", whole, part);
      const int width = static_cast<int>(lo_s.size());
      for (long v = lo; v <= hi; ++v) numbers.push_back(fmt::format("{:0{}}", v, width));
    }
    i = comma + 1;
  }
  std::vector<std::string> out;
  for (const std::string& n : numbers) {
    for (const std::string& r : rests) out.push_back(std::string(prefix) + n + r);
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(std::string_view list) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) fail("Slurm node list '{}': ']' without '['", list);
    if (c == ',' && depth == 0) {
      const std::string_view item = list.substr(start, i - start);
      if (item.empty()) fail("Slurm node list '{}': empty host name", list);
      for (std::string& h : expand_name(item, list)) hosts.push_back(std::move(h));
      start = i + 1;
    }
  }
  if (depth != 0) fail("Slurm node list '{}': '[' without ']'", list);
  return hosts;
}

// ---- sockets -----------------------------------------------------------------------------------------------
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kHelloMagic = 0x53574652;  // "SWFR"
constexpr uint32_t kMessageMagic = 0x53574d47;  // "SWMG"

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Waits for `events` on fd; false at the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ms = remaining_ms(deadline);
    const int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the following call report the error
    if (Clock::now() >= deadline) return false;
  }
}

void send_all(int fd, const void* data, size_t bytes, Clock::time_point deadline, const std::string& context) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) fail("{}: timed out sending", context);
    const ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("{}: the connection broke while sending ({}); the peer probably died — see its log", context,
           std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void recv_all(int fd, void* data, size_t bytes, Clock::time_point deadline, const std::string& context) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) fail("{}: timed out waiting", context);
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n == 0) fail("{}: the peer closed the connection (it probably died or failed; see its log)", context);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail("{}: the connection broke ({}); the peer probably died — see its log", context, std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

struct MessageHeader {
  uint32_t magic;
  uint32_t sequence;
  uint64_t bytes;
};

void send_message(int fd, uint32_t sequence, const std::string& payload, Clock::time_point deadline,
                  const std::string& context) {
  MessageHeader h{kMessageMagic, sequence, payload.size()};
  send_all(fd, &h, sizeof(h), deadline, context);
  send_all(fd, payload.data(), payload.size(), deadline, context);
}

std::string recv_message(int fd, uint32_t sequence, Clock::time_point deadline, const std::string& context) {
  MessageHeader h{};
  recv_all(fd, &h, sizeof(h), deadline, context);
  if (h.magic != kMessageMagic) fail("{}: received a malformed message (not a swift.cpp rendezvous?)", context);
  if (h.sequence != sequence) {
    fail("{}: the peer is at rendezvous exchange #{} but this rank at #{}; the ranks' setup went out of step", context,
         h.sequence, sequence);
  }
  if (h.bytes > (1ull << 30)) fail("{}: message of {} bytes is too large", context, h.bytes);
  std::string payload(h.bytes, '\0');
  recv_all(fd, payload.data(), payload.size(), deadline, context);
  return payload;
}

int listen_on(int port, std::string* error) {
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (family == AF_INET6) {
      int zero = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    if (rc == 0 && listen(fd, 1024) == 0) return fd;
    *error = std::strerror(errno);
    close(fd);
    if (errno == EADDRINUSE) break;
  }
  return -1;
}

// One connection attempt to host:port; -1 (with *error) when refused / unreachable / unresolvable.
int connect_once(const std::string& host, int port, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string port_s = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &result);
  if (rc != 0) {
    *error = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = result; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno == EINPROGRESS) {
        const auto attempt_deadline = std::min(deadline, deadline_after(2.0));
        int err = ETIMEDOUT;
        if (wait_fd(fd, POLLOUT, attempt_deadline)) {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
        if (err != 0) {
          *error = std::strerror(err);
          close(fd);
          fd = -1;
        }
      } else {
        *error = std::strerror(errno);
        close(fd);
        fd = -1;
      }
    }
  }
  freeaddrinfo(result);
  if (fd >= 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    set_socket_options(fd);
  }
  return fd;
}

}  // namespace

int pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("pick_free_port: socket() failed: {}", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    close(fd);
    fail("pick_free_port: bind() failed: {}; set MASTER_PORT yourself", std::strerror(err));
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// ---- rendezvous --------------------------------------------------------------------------------------------
Rendezvous::Rendezvous(const LaunchEnv& env, double timeout_s)
    : rank_(env.rank), world_(env.world_size), timeout_s_(timeout_s) {
  master_ = fmt::format("{}:{}", env.master_addr, env.master_port);
  if (world_ <= 1) return;
  const auto deadline = deadline_after(timeout_s_);
  struct Hello {
    uint32_t magic;
    uint32_t world;
    uint32_t rank;
    uint32_t pad;
  };
  if (rank_ == 0) {
    std::string error;
    listen_fd_ = listen_on(env.master_port, &error);
    if (listen_fd_ < 0) {
      fail("rendezvous: rank 0 cannot listen on port {}: {}; pick another MASTER_PORT (an earlier run may still hold "
           "it)",
           env.master_port, error);
    }
    peers_.assign(static_cast<size_t>(world_), -1);
    int connected = 0;
    while (connected < world_ - 1) {
      if (!wait_fd(listen_fd_, POLLIN, deadline)) {
        std::string missing;
        for (int r = 1; r < world_; ++r) {
          if (peers_[static_cast<size_t>(r)] < 0) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
        }
        fail("rendezvous on port {}: rank(s) {} did not connect within {} s (not started, crashed, or given another "
             "MASTER_ADDR/MASTER_PORT)",
             env.master_port, missing, timeout_s_);
      }
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      set_socket_options(fd);
      Hello h{};
      try {
        recv_all(fd, &h, sizeof(h), std::min(deadline, deadline_after(10.0)), "rendezvous: a connecting rank");
      } catch (const Error&) {
        close(fd);  // a stray connection (port scanner, health check): ignore it
        continue;
      }
      if (h.magic != kHelloMagic) {
        close(fd);
        continue;
      }
      if (static_cast<int>(h.world) != world_) {
        close(fd);
        fail("rendezvous: rank {} says the world size is {} but rank 0 has {}; every rank must get the same WORLD_SIZE",
             h.rank, h.world, world_);
      }
      if (h.rank == 0 || static_cast<int>(h.rank) >= world_ || peers_[h.rank] >= 0) {
        close(fd);
        fail("rendezvous: a second process claims rank {}; every rank must have a distinct RANK in 0..{}", h.rank,
             world_ - 1);
      }
      peers_[h.rank] = fd;
      ++connected;
      Hello ack{kHelloMagic, static_cast<uint32_t>(world_), 0, 0};
      send_all(fd, &ack, sizeof(ack), deadline, fmt::format("rendezvous: answering rank {}", h.rank));
    }
    return;
  }
  std::string error = "not tried";
  int fd = -1;
  while (true) {
    fd = connect_once(env.master_addr, env.master_port, deadline, &error);
    if (fd >= 0) break;
    if (Clock::now() >= deadline) {
      fail("rendezvous: rank {} could not reach rank 0 at {} within {} s (last error: {}); is rank 0 running, and "
           "are MASTER_ADDR/MASTER_PORT right?",
           rank_, master_, timeout_s_, error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  peers_.assign(1, fd);
  const std::string context = fmt::format("rendezvous: rank {} with rank 0 at {}", rank_, master_);
  Hello h{kHelloMagic, static_cast<uint32_t>(world_), static_cast<uint32_t>(rank_), 0};
  send_all(fd, &h, sizeof(h), deadline, context);
  Hello ack{};
  recv_all(fd, &ack, sizeof(ack), deadline, context);
  if (ack.magic != kHelloMagic) fail("{}: the peer is not a swift.cpp rendezvous (wrong MASTER_PORT?)", context);
}

Rendezvous::~Rendezvous() {
  for (int fd : peers_) {
    if (fd >= 0) close(fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::vector<std::string> Rendezvous::all_gather(const std::string& blob, const char* what) {
  ++sequence_;
  std::vector<std::string> blobs(static_cast<size_t>(world_));
  blobs[static_cast<size_t>(rank_)] = blob;
  if (world_ <= 1) return blobs;
  const auto deadline = deadline_after(timeout_s_);
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) {
      blobs[static_cast<size_t>(r)] = recv_message(peers_[static_cast<size_t>(r)], sequence_, deadline,
                                                   fmt::format("rendezvous '{}': rank 0 waiting for rank {}", what, r));
    }
    std::string packed;
    for (const std::string& b : blobs) {
      const uint64_t n = b.size();
      packed.append(reinterpret_cast<const char*>(&n), sizeof(n));
      packed += b;
    }
    for (int r = 1; r < world_; ++r) {
      send_message(peers_[static_cast<size_t>(r)], sequence_, packed, deadline,
                   fmt::format("rendezvous '{}': rank 0 answering rank {}", what, r));
    }
    return blobs;
  }
  const std::string context = fmt::format("rendezvous '{}': rank {} with rank 0 at {}", what, rank_, master_);
  send_message(peers_[0], sequence_, blob, deadline, context);
  const std::string packed = recv_message(peers_[0], sequence_, deadline, context);
  size_t at = 0;
  for (int r = 0; r < world_; ++r) {
    uint64_t n = 0;
    if (at + sizeof(n) > packed.size()) fail("{}: truncated answer", context);
    std::memcpy(&n, packed.data() + at, sizeof(n));
    at += sizeof(n);
    if (at + n > packed.size()) fail("{}: truncated answer", context);
    blobs[static_cast<size_t>(r)] = packed.substr(at, n);
    at += n;
  }
  return blobs;
}

std::string Rendezvous::broadcast(const std::string& blob, int root, const char* what) {
  if (root < 0 || root >= world_) fail("rendezvous '{}': root {} is not a rank (0..{})", what, root, world_ - 1);
  std::vector<std::string> all = all_gather(rank_ == root ? blob : std::string(), what);
  return all[static_cast<size_t>(root)];
}

void Rendezvous::barrier(const char* what) { all_gather(std::string(), what); }

}  // namespace swift::dist
