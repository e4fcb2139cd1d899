// bench/bench_attention.cpp — CUDA attention forward and backward timed per implementation: our flash-attention-2
// kernels (SWIFT_ATTENTION=flash2), cuDNN's fused attention with its deterministic backward (the default) and
// with its nondeterministic (fp32 atomic dQ) backward. Not a test. Default shape: Qwen2.5-7B's attention in a
// 4 x 2048 packed batch (T 8192, Hq 28, Hkv 4, D 128, BF16, causal):
//   build-gpu/bench/bench_attention [--seqs 4] [--len 2048] [--hq 28] [--hkv 4] [--d 128] [--window 0]
//                                   [--dtype bf16|f16] [--reps 20]
// Prints one JSON line: per path the median ms and TFLOP/s of forward and backward, the first-call (plan build)
// ms, whether a further backward is bit-identical, and the largest |difference| of out / lse / dq / dk / dv
// against flash2.
//
// FLOPs: causal pairs P = sum over sequences and query positions i of min(i + 1, window or i + 1) keys, times Hq;
// forward 4 * D * P (two products, 2 flops per multiply-add), backward 10 * D * P (five products: S recomputed,
// dP, dV, dK, dQ), the usual flash-attention count (work a kernel skips or repeats is not counted).
//
// Invariants: inputs are seeded uniform values, identical for every path; each timing is the median of --reps
// runs after 3 warm-ups, measured with CUDA events on the ops' stream. Asserts nothing about speed.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/backends.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

using namespace swift;

namespace {

Tensor uniform(const Shape& shape, DType dtype, uint32_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape, DType::F32);
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = lo + (hi - lo) * static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f;
  }
  return t.to_dtype(dtype).to(Device::cuda());
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).to_dtype(DType::F32), y = b.to(Device::cpu()).to_dtype(DType::F32);
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(x.item(i)) - y.item(i)));
  return m;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

struct Result {
  double first_fwd_ms = 0, first_bwd_ms = 0, fwd_ms = 0, bwd_ms = 0;
  bool bwd_reproducible = false;  // a further backward is bit-identical to the last timed one
  Tensor out, lse, dq, dk, dv;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t seqs = 4, len = 2048, hq = 28, hkv = 4, d = 128, window = 0;
  int reps = 20;
  DType dtype = DType::BF16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--seqs") seqs = std::atoll(v);
    else if (a == "--len") len = std::atoll(v);
    else if (a == "--hq") hq = std::atoll(v);
    else if (a == "--hkv") hkv = std::atoll(v);
    else if (a == "--d") d = std::atoll(v);
    else if (a == "--window") window = std::atoll(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--dtype") dtype = std::strcmp(v, "f16") == 0 ? DType::F16 : DType::BF16;
    else {
      std::fprintf(stderr, "bench_attention: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ops::init_backends();
  if (ops::cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_attention: no CUDA device\n");
    return 1;
  }
  const int64_t tokens = seqs * len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Tensor q = uniform({tokens, hq, d}, dtype, 1, -2.0f, 2.0f);
  const Tensor k = uniform({tokens, hkv, d}, dtype, 2, -2.0f, 2.0f);
  const Tensor v = uniform({tokens, hkv, d}, dtype, 3, -1.0f, 1.0f);
  const Tensor dout = uniform({tokens, hq, d}, dtype, 4, -1.0f, 1.0f);
  std::vector<int32_t> cu{0};
  for (int64_t s = 0; s < seqs; ++s) cu.push_back(cu.back() + static_cast<int32_t>(len));
  const Tensor cu_seqlens = Tensor::from_i32({seqs + 1}, cu).to(Device::cuda());

  double pairs = 0;
  for (int64_t i = 0; i < len; ++i) pairs += static_cast<double>(window > 0 ? std::min(i + 1, window) : i + 1);
  pairs *= static_cast<double>(seqs * hq);
  const double fwd_flops = 4.0 * d * pairs, bwd_flops = 10.0 * d * pairs;

  cudaStream_t st = ops::cuda::stream(0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto once_ms = [&](const std::function<void()>& fn) {
    cudaEventRecord(e0, st);
    fn();
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    return static_cast<double>(t);
  };
  auto median_ms = [&](const std::function<void()>& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) ms.push_back(once_ms(fn));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };

  auto run = [&](const char* path, const char* bwd_mode) {
    setenv("SWIFT_ATTENTION", path, 1);
    setenv("SWIFT_CUDNN_ATTENTION_BWD", bwd_mode, 1);
    Result r;
    r.out = Tensor::empty({tokens, hq, d}, dtype, Device::cuda());
    r.lse = Tensor::empty({hq, tokens}, DType::F32, Device::cuda());
    r.dq = Tensor::empty({tokens, hq, d}, dtype, Device::cuda());
    r.dk = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    r.dv = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    auto fwd = [&] { ops::attention(q, k, v, cu_seqlens, scale, window, r.out, r.lse); };
    auto bwd = [&] {
      ops::attention_backward(dout, q, k, v, r.out, r.lse, cu_seqlens, scale, window, r.dq, r.dk, r.dv);
    };
    const auto t0 = std::chrono::steady_clock::now();
    fwd();
    cudaStreamSynchronize(st);
    const auto t1 = std::chrono::steady_clock::now();
    bwd();
    cudaStreamSynchronize(st);
    const auto t2 = std::chrono::steady_clock::now();
    r.first_fwd_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    r.first_bwd_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    r.fwd_ms = median_ms(fwd);
    r.bwd_ms = median_ms(bwd);
    cudaStreamSynchronize(st);
    Tensor dq2 = Tensor::empty({tokens, hq, d}, dtype, Device::cuda());
    Tensor dk2 = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    Tensor dv2 = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    ops::attention_backward(dout, q, k, v, r.out, r.lse, cu_seqlens, scale, window, dq2, dk2, dv2);
    r.bwd_reproducible = bit_equal(dq2, r.dq) && bit_equal(dk2, r.dk) && bit_equal(dv2, r.dv);
    return r;
  };

  const ops::cuda::AttentionPathCounts c0 = ops::cuda::attention_path_counts();
  const Result flash2 = run("flash2", "deterministic");
  const ops::cuda::AttentionPathCounts c1 = ops::cuda::attention_path_counts();
  const Result cudnn = run("cudnn", "deterministic");
  const ops::cuda::AttentionPathCounts c2 = ops::cuda::attention_path_counts();
  const Result nondet = run("cudnn", "nondeterministic");
  const ops::cuda::AttentionPathCounts c3 = ops::cuda::attention_path_counts();
  unsetenv("SWIFT_ATTENTION");
  unsetenv("SWIFT_CUDNN_ATTENTION_BWD");

  auto path_json = [&](const char* name, const Result& r, bool ran_cudnn_fwd, bool ran_cudnn_bwd, bool diffs) {
    std::string s = std::string("\"") + name + "\":{";
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "\"fwd_ms\":%.4f,\"fwd_tflops\":%.1f,\"bwd_ms\":%.4f,\"bwd_tflops\":%.1f,\"total_ms\":%.4f,"
                  "\"first_fwd_ms\":%.1f,\"first_bwd_ms\":%.1f,\"bwd_bit_reproducible\":%s,\"cudnn_fwd\":%s,"
                  "\"cudnn_bwd\":%s",
                  r.fwd_ms, fwd_flops / r.fwd_ms * 1e-9, r.bwd_ms, bwd_flops / r.bwd_ms * 1e-9, r.fwd_ms + r.bwd_ms,
                  r.first_fwd_ms, r.first_bwd_ms, r.bwd_reproducible ? "true" : "false",
                  ran_cudnn_fwd ? "true" : "false", ran_cudnn_bwd ? "true" : "false");
    s += buf;
    if (diffs) {
      std::snprintf(buf, sizeof buf,
                    ",\"max_diff_vs_flash2\":{\"out\":%.3e,\"lse\":%.3e,\"dq\":%.3e,\"dk\":%.3e,\"dv\":%.3e}",
                    max_abs_diff(r.out, flash2.out), max_abs_diff(r.lse, flash2.lse), max_abs_diff(r.dq, flash2.dq),
                    max_abs_diff(r.dk, flash2.dk), max_abs_diff(r.dv, flash2.dv));
      s += buf;
    }
    return s + "}";
  };
  std::printf("{\"bench\":\"attention\",\"dtype\":\"%s\",\"seqs\":%lld,\"len\":%lld,\"tokens\":%lld,\"hq\":%lld,"
              "\"hkv\":%lld,\"d\":%lld,\"window\":%lld,\"reps\":%d,\"fwd_gflop\":%.2f,\"bwd_gflop\":%.2f,%s,%s,%s}\n",
              dtype_name(dtype), static_cast<long long>(seqs), static_cast<long long>(len),
              static_cast<long long>(tokens), static_cast<long long>(hq), static_cast<long long>(hkv),
              static_cast<long long>(d), static_cast<long long>(window), reps, fwd_flops * 1e-9, bwd_flops * 1e-9,
              path_json("flash2", flash2, c1.cudnn_forward > c0.cudnn_forward, c1.cudnn_backward > c0.cudnn_backward,
                        false)
                  .c_str(),
              path_json("cudnn", cudnn, c2.cudnn_forward > c1.cudnn_forward, c2.cudnn_backward > c1.cudnn_backward,
                        true)
                  .c_str(),
              path_json("cudnn_nondeterministic_bwd", nondet, c3.cudnn_forward > c2.cudnn_forward,
                        c3.cudnn_backward > c2.cudnn_backward, true)
                  .c_str());
  std::fprintf(stderr, "cuDNN plans:\n%scuDNN last fallback: %s\n", ops::cuda::cudnn_attention_plan_info().c_str(),
               ops::cuda::cudnn_attention_last_fallback().c_str());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}
