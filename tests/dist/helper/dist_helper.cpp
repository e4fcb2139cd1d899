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
//   nccl                NCCL on cuda:LOCAL_RANK (a GPU machine; scripts/device/dp-check.sh): started collectives in
//                       flight with compute-stream work between them, waited out of order, then blocking ones; values
//                       are multiples of 1/4 with exact sums, so NCCL's order gives the serial bits; rank 0 prints
//                       "nccl async ok world N"
// Errors: "dist_helper: error: ..." on stderr, exit 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/init.h"
#include "dist/launcher.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace {

void sleep_s(int s) { std::this_thread::sleep_for(std::chrono::seconds(s)); }

// Element i of rank r's k-th tensor: a multiple of 1/4 below 2^12, so every sum over a few ranks is exact in fp32.
float exact_value(int rank, int k, int64_t i) { return 0.25f * static_cast<float>((rank + 1) * ((i + 3 * k) % 11)); }

swift::Tensor exact_tensor(int rank, int k, int64_t n, swift::Device device) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = exact_value(rank, k, i);
  return swift::Tensor::from_f32({n}, v).to(device);
}

void expect_sum(const swift::Tensor& device_tensor, int world, int k, int64_t offset, int times, const char* what,
                int rank) {
  const swift::Tensor t = device_tensor.to(swift::Device::cpu());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += exact_value(r, k, offset + i);
    want *= static_cast<float>(times);
    if (t.data<float>()[i] != want) {
      swift::fail("rank {}: {} element {} = {}, expected {}", rank, what, i, t.data<float>()[i], want);
    }
  }
}

int run_nccl_async(const swift::dist::LaunchEnv& env) {
  using namespace swift;
  ops::init_backends();  // registers the CUDA backend (as swift's main does)
  const Device device = Device::cuda(env.local_rank);
  auto comm = dist::init_communicator(env, device, "nccl");
  const int w = comm->world_size(), rank = comm->rank();
  const int64_t n = (int64_t{1} << 20) * w + 3 * w;  // several MB, divisible by the world size
  std::vector<Tensor> sums;
  std::vector<std::unique_ptr<dist::CollectiveHandle>> handles;
  Tensor busy = exact_tensor(rank, 99, n, device), busy_out = Tensor::empty({n}, DType::F32, device);
  for (int k = 0; k < 8; ++k) {
    sums.push_back(exact_tensor(rank, k, n, device));
    handles.push_back(comm->start_all_reduce(sums.back()));
    ops::add(busy, busy, busy_out);  // compute-stream work while the collectives run
  }
  Tensor scatter = exact_tensor(rank, 8, n, device);
  Tensor own = scatter.slice_rows(rank * (n / w), (rank + 1) * (n / w));  // NCCL's in-place layout
  handles.push_back(comm->start_reduce_scatter(scatter, own));
  Tensor mine = exact_tensor(rank, 9, 1000, device), gathered = Tensor::empty({1000 * w}, DType::F32, device);
  handles.push_back(comm->start_all_gather(mine, gathered));
  for (size_t h = handles.size(); h-- > 0;) handles[h]->wait();
  // After wait() the compute stream sees the sum: doubling it there must give twice the sum.
  Tensor doubled = Tensor::empty({n}, DType::F32, device);
  ops::add(sums[0], sums[0], doubled);
  Tensor blocking = exact_tensor(rank, 10, 4097, device);
  comm->all_reduce(blocking);
  comm->synchronize();
  for (int k = 0; k < 8; ++k) expect_sum(sums[static_cast<size_t>(k)], w, k, 0, 1, "started all_reduce", rank);
  expect_sum(doubled, w, 0, 0, 2, "compute after wait()", rank);
  expect_sum(own, w, 8, rank * (n / w), 1, "started reduce_scatter", rank);
  expect_sum(blocking, w, 10, 0, 1, "blocking all_reduce after started ones", rank);
  const Tensor g = gathered.to(Device::cpu());
  for (int r = 0; r < w; ++r) {
    for (int64_t i = 0; i < 1000; ++i) {
      if (g.data<float>()[r * 1000 + i] != exact_value(r, 9, i)) fail("rank {}: all_gather from rank {} wrong", rank, r);
    }
  }
  comm->barrier();
  if (rank == 0) std::printf("nccl async ok world %d (backend %s)\n", w, comm->backend().c_str());
  return 0;
}

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
  if (mode == "nccl") return run_nccl_async(env);
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
