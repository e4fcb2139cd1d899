// bench/bench_ops.cpp — timings of the fast CPU ops on the shapes of the demo model (SmolLM2-135M:
// C = 576, F = 1536, V = 49152, Hq = 9, Hkv = 3, D = 64). Not a test (CTest does not run it):
//   build/bench/bench_ops [--gtest_filter='OpsBench.Linear']
//
// Invariants: prints best-of-N wall times and GFLOP/s; asserts nothing about speed.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <functional>

#include "ops/op_test_util.h"
#include "ops/ops.h"

namespace swift::test {
namespace {


// Best of `reps` runs after one warm-up, in milliseconds.
double best_ms(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

TEST(OpsBench, Linear) {
  std::printf("threads: %d\n", omp_get_max_threads());
  struct S {
    int64_t n, k, m;
  };
  for (S s : {S{256, 576, 1536}, S{256, 1536, 576}, S{1, 576, 1536}, S{4, 576, 576}, S{256, 576, 49152},
              S{1, 576, 49152}}) {
    Tensor x = random_tensor({s.n, s.k}, DType::F32, 1);
    Tensor y = Tensor::empty({s.n, s.m}, DType::F32);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      Tensor w = random_tensor({s.m, s.k}, dt, 2);
      const int reps = s.n * s.m * s.k > 1e9 ? 3 : 10;
      const double ms = best_ms(reps, [&] { ops::linear(x, w, Tensor(), y); });
      std::printf("linear N=%-4ld K=%-5ld M=%-6ld %-4s %9.3f ms  %7.1f GFLOP/s\n", static_cast<long>(s.n),
                  static_cast<long>(s.k), static_cast<long>(s.m), dtype_name(dt), ms, 2.0 * s.n * s.m * s.k / ms / 1e6);
    }
  }
  for (S s : {S{576, 256, 1536}, S{1536, 256, 576}}) {  // weight gradients: dW (M, K) = dY^T (M, N) @ X (N, K)
    Tensor dy = random_tensor({s.k, s.n}, DType::F32, 3);
    Tensor xx = random_tensor({s.k, s.m}, DType::F32, 4);
    Tensor dw = Tensor::empty({s.n, s.m}, DType::F32);
    const double ms = best_ms(10, [&] { ops::gemm(true, false, 1.0f, dy, xx, 0.0f, dw); });
    std::printf("gemm At N=%-4ld K=%-4ld M=%-5ld      %9.3f ms  %7.1f GFLOP/s\n", static_cast<long>(s.n),
                static_cast<long>(s.k), static_cast<long>(s.m), ms, 2.0 * s.n * s.m * s.k / ms / 1e6);
  }
}

TEST(OpsBench, Attention) {
  struct S {
    std::vector<int32_t> lengths;
    int64_t window;
  };
  for (const S& s : {S{{512}, 0}, S{{128, 128, 128, 128}, 0}, S{{2048}, 0}, S{{2048}, 256}}) {
    const int64_t hq = 9, hkv = 3, d = 64;
    int64_t t = 0;
    std::vector<int32_t> cu = {0};
    for (int32_t l : s.lengths) cu.push_back(static_cast<int32_t>(t += l));
    Tensor q = random_tensor({t, hq, d}, DType::F32, 1), k = random_tensor({t, hkv, d}, DType::F32, 2);
    Tensor v = random_tensor({t, hkv, d}, DType::F32, 3);
    Tensor cu_t = Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu);
    Tensor out = Tensor::empty({t, hq, d}, DType::F32), lse = Tensor::empty({hq, t}, DType::F32);
    const double ms = best_ms(5, [&] { ops::attention(q, k, v, cu_t, 0.125f, s.window, out, lse); });
    double pairs = 0;
    for (int32_t l : s.lengths) {
      for (int64_t i = 0; i < l; ++i) pairs += s.window > 0 ? std::min<int64_t>(i + 1, s.window) : i + 1;
    }
    std::printf("attention T=%-5ld B=%zu Hq=9 Hkv=3 D=64 window=%-4ld %8.3f ms  %6.1f GFLOP/s\n",
                static_cast<long>(t), s.lengths.size(), static_cast<long>(s.window), ms, 4.0 * pairs * hq * d / ms / 1e6);
  }
}

TEST(OpsBench, Elementwise) {
  const int64_t t = 512;
  Tensor x = random_tensor({t, 576}, DType::F32, 1), w = random_tensor({576}, DType::BF16, 2);
  Tensor y = Tensor::empty({t, 576}, DType::F32), rstd = Tensor::empty({t}, DType::F32);
  std::printf("rmsnorm T=512 C=576          %8.3f ms\n", best_ms(20, [&] { ops::rmsnorm(x, w, 1e-5f, y, rstd); }));
  Tensor g = random_tensor({t, 1536}, DType::F32, 3), u = random_tensor({t, 1536}, DType::F32, 4);
  Tensor o = Tensor::empty({t, 1536}, DType::F32);
  std::printf("swiglu T=512 F=1536          %8.3f ms\n", best_ms(20, [&] { ops::swiglu(g, u, o); }));
  Tensor qx = random_tensor({t, 9, 64}, DType::F32, 5);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  Tensor positions = Tensor::from_i32({t}, pos);
  ops::RopeFrequencies f = ops::rope_frequencies(ops::RopeConfig{}, 64, 0);
  std::printf("rope T=512 H=9 D=64          %8.3f ms\n", best_ms(20, [&] { ops::rope(qx, positions, f); }));
  Tensor table = random_tensor({49152, 576}, DType::BF16, 6), e = Tensor::empty({t, 576}, DType::F32);
  std::printf("embedding T=512 C=576 bf16   %8.3f ms\n", best_ms(20, [&] { ops::embedding(table, positions, e); }));
}

}  // namespace
}  // namespace swift::test
