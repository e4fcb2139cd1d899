// tests/dist/helper/dist_helper.cpp — a tiny program that test_dist launches as ranks: it starts like `swift`
// (dist::maybe_launch first), then does what its first argument says.
//
// Modes (argv[1]):
//   exit R CODE [hang]  rank R returns CODE at once; the others return 0, or sleep 60 s with "hang"
//   signal R            rank R kills itself with SIGKILL; the others sleep 60 s
//   allreduce           CPU process group: all_reduce + all_gather + broadcast checked; rank 0 prints
//                       "allreduce ok world N"
//   vanish              rank 1 sets up the group then _exit(0)s without a collective; rank 0's all_reduce fails
//   stall               rank 1 sets up the group then sleeps 60 s; rank 0's all_reduce times out
//                       (SWIFT_DIST_TIMEOUT is set short by the test)
//   ready DIR           every rank writes DIR/rank<R>.pid and sleeps 60 s (for the Ctrl-C test)
// Errors: "dist_helper: error: ..." on stderr, exit 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/init.h"
#include "dist/launcher.h"

namespace {

void sleep_s(int s) { std::this_thread::sleep_for(std::chrono::seconds(s)); }

int run(int argc, char** argv) {
  using namespace swift;
  using namespace swift::dist;
  if (argc < 2) fail("usage: dist_helper MODE ...");
  const std::string mode = argv[1];
  const LaunchEnv env = detect_launch_env();
  if (mode == "exit") {
    if (argc < 4) fail("usage: dist_helper exit RANK CODE [hang]");
    if (env.rank == std::atoi(argv[2])) return std::atoi(argv[3]);
    if (argc > 4 && std::strcmp(argv[4], "hang") == 0) sleep_s(60);
    return 0;
  }
  if (mode == "signal") {
    if (env.rank == std::atoi(argv[2])) raise(SIGKILL);
    sleep_s(60);
    return 0;
  }
  if (mode == "ready") {
    std::ofstream(std::string(argv[2]) + "/rank" + std::to_string(env.rank) + ".pid") << getpid() << "\n";
    sleep_s(60);
    return 0;
  }
  auto comm = init_communicator(env, Device::cpu(), "cpu", CommOptions{0.0, 4096});
  if (mode == "allreduce") {
    const int w = comm->world_size();
    const int64_t n = 1001;
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(comm->rank() + 1) * (i % 7);
    Tensor t = Tensor::from_f32({n}, v);
    comm->all_reduce(t);
    for (int64_t i = 0; i < n; ++i) {
      const float want = static_cast<float>(w * (w + 1) / 2) * (i % 7);
      if (t.data<float>()[i] != want) fail("rank {}: all_reduce element {} = {}, expected {}", comm->rank(), i, t.data<float>()[i], want);
    }
    Tensor mine = Tensor::from_f32({2}, {static_cast<float>(comm->rank()), 0.5f});
    Tensor all = Tensor::zeros({2 * w}, DType::F32);
    comm->all_gather(mine, all);
    for (int r = 0; r < w; ++r) {
      if (all.data<float>()[2 * r] != static_cast<float>(r)) fail("rank {}: all_gather slot {} wrong", comm->rank(), r);
    }
    Tensor b = Tensor::from_f32({1}, {comm->rank() == w - 1 ? 42.0f : 0.0f});
    comm->broadcast(b, w - 1);
    if (b.data<float>()[0] != 42.0f) fail("rank {}: broadcast wrong", comm->rank());
    comm->barrier();
    std::printf("allreduce ok world %d (rank %d, backend %s)\n", w, comm->rank(), comm->backend().c_str());
    return 0;
  }
  if (mode == "vanish" || mode == "stall") {
    if (comm->rank() == 1) {
      if (mode == "vanish") _exit(0);
      sleep_s(60);
      return 0;
    }
    Tensor t = Tensor::zeros({16}, DType::F32);
    comm->all_reduce(t);
    return 0;
  }
  fail("dist_helper: unknown mode '{}'", mode);
}

}  // namespace

int main(int argc, char** argv) {
  const int launched = swift::dist::maybe_launch(argc, argv);
  if (launched >= 0) return launched;
  try {
    return run(argc, argv);
  } catch (const swift::Error& e) {
    std::fprintf(stderr, "dist_helper: error: %s\n", e.what());
    return 1;
  }
}
