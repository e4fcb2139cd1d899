// bench/bench_lora.cpp — the rank-r LoRA passes of ops/cuda/lora.cu timed alone, per work shape (LoraKernelConfig),
// on the linears of one transformer layer, scaled to the whole model's step. Not a test. Default: Qwen2.5-7B
// (hidden 3584, kv 512, intermediate 18944, 28 layers), 4 x 2048 tokens, BF16, r 8, dropout 0.05:
//   build-gpu/bench/bench_lora [--tokens 8192] [--hidden 3584] [--kv 512] [--inter 18944] [--layers 28] [--r 8]
//                              [--dropout 0.05] [--reps 10]
// For each configuration and pass it prints ms per training step (the layer's 7 linears x layers) and the achieved
// bandwidth (bytes the pass must move: xa and da read x; the rank updates read and write y / dx; the dy pass, r 8
// only, reads dy), and checks that
// every configuration's outputs equal bit for bit those of the first configuration that computes the pass with the
// same kernel family (the summation order must not depend on the work shape; the tensor-core x passes and the
// CUDA-core kernels sum in different orders, so each family has its own reference: "default" and "CUDA cores").
//
// Invariants: inputs are seeded values, identical for every configuration; timings are CUDA events around --reps
// calls after 2 warm-ups (medians of 3 such runs); asserts nothing about speed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/kernels_lora.cuh"
#include "ops/philox.h"

using swift::ops::DropoutMap;
using namespace swift::ops::cuda;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_lora: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Linear {
  const char* name;
  int64_t in, out;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

std::vector<float> values(int64_t count, uint64_t seed, float range) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    v[static_cast<size_t>(i)] = range * (static_cast<float>(mix(seed * 0x9E3779B97F4A7C15ull + i) >> 40) / 16777216.0f - 0.5f);
  }
  return v;
}

void* upload_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
  void* d = nullptr;
  check(cudaMalloc(&d, h.size() * sizeof(__nv_bfloat16)), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), h.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice), "upload");
  return d;
}

float* upload_f32(const std::vector<float>& v) {
  float* d = nullptr;
  check(cudaMalloc(&d, v.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
  return d;
}

std::vector<uint8_t> download(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  check(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost), "download");
  return h;
}

struct Config {
  std::string name;
  LoraKernelConfig c;
  bool cache_bits = false;  // xa stores the mask's keep bits, dx and da read them (ops.h Dropout::keep_bits)
};

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 8192, hidden = 3584, kv = 512, inter = 18944, layers = 28;
  int r = 8, reps = 10;
  float p = 0.05f;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_lora: %s needs a value\n", f.c_str());
      return 2;
    }
    char* end = nullptr;
    const double v = std::strtod(argv[i + 1], &end);
    if (end == argv[i + 1] || *end != '\0') {
      std::fprintf(stderr, "bench_lora: %s %s: not a number\n", f.c_str(), argv[i + 1]);
      return 2;
    }
    if (f == "--tokens") tokens = static_cast<int64_t>(v);
    else if (f == "--hidden") hidden = static_cast<int64_t>(v);
    else if (f == "--kv") kv = static_cast<int64_t>(v);
    else if (f == "--inter") inter = static_cast<int64_t>(v);
    else if (f == "--layers") layers = static_cast<int64_t>(v);
    else if (f == "--r") r = static_cast<int>(v);
    else if (f == "--dropout") p = static_cast<float>(v);
    else if (f == "--reps") reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "bench_lora: unknown argument %s\n", f.c_str());
      return 2;
    }
  }
  if (tokens <= 0 || layers <= 0 || reps <= 0 || !(p >= 0.0f && p < 1.0f) || (r != 8 && r != 16) || hidden <= 0 ||
      kv <= 0 || inter <= 0 || hidden % 8 != 0 || kv % 8 != 0 || inter % 8 != 0) {
    std::fprintf(stderr,
                 "bench_lora: --tokens, --layers, --reps must be positive, --dropout in [0, 1), --r 8 or 16 and "
                 "--hidden, --kv, --inter positive multiples of 8 (the one-pass kernels' shapes)\n");
    return 2;
  }
  const std::vector<Linear> linears = {{"q", hidden, hidden}, {"k", hidden, kv},       {"v", hidden, kv},
                                       {"o", hidden, hidden}, {"gate", hidden, inter}, {"up", hidden, inter},
                                       {"down", inter, hidden}};
  const uint32_t threshold = p > 0 ? swift::ops::dropout_threshold(p) : 0u;
  const float keep_scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
  const uint64_t seed = 1234;
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "event");
  check(cudaEventCreate(&t1), "event");

  // The default, then one change at a time (names: what differs from the default).
  std::vector<Config> configs = {{"default", {}}};
  const auto add = [&](const std::string& name, auto&& change) {
    Config c{name, {}};
    change(c.c);
    configs.push_back(c);
  };
  add("CUDA cores", [](LoraKernelConfig& c) { c.tensor_cores = false; });
  add("xa2", [](LoraKernelConfig& c) { c.xa_rows = 2; });
  add("up4", [](LoraKernelConfig& c) { c.update_rows = 4; });
  add("da2", [](LoraKernelConfig& c) { c.da_rows = 2; });
  add("da8", [](LoraKernelConfig& c) { c.da_rows = 8; });
  add("factor in shared memory", [](LoraKernelConfig& c) { c.factor_in_registers = false; });
  if (p > 0) configs.push_back({"keep-bits cache", {}, true});

  std::printf("bench_lora: tokens %lld, r %d, dropout %.3f, BF16, %lld layers\n", static_cast<long long>(tokens), r, p,
              static_cast<long long>(layers));
  std::printf("%-22s %-5s %10s %10s %10s %10s %10s   (ms per step; GB/s)\n", "config", "pass", "xa", "b_update",
              "dx_update", "da", "dy");
  constexpr int kPasses = 5;
  std::vector<std::vector<double>> totals(configs.size(), std::vector<double>(kPasses, 0.0));
  std::vector<double> bytes_total(kPasses, 0.0);
  bool all_equal = true;
  for (const Linear& L : linears) {
    const int64_t n = tokens, k = L.in, m = L.out;
    void* x = upload_bf16(values(n * k, 1, 2.0f));
    const std::vector<float> y_init = values(n * m, 2, 2.0f), dx_init = values(n * k, 3, 2.0f);
    void* y = upload_bf16(y_init);
    void* dx = upload_bf16(dx_init);
    void* y0 = upload_bf16(y_init);
    void* dx0 = upload_bf16(dx_init);
    float* a = upload_f32(values(r * k, 4, 0.05f));
    float* b = upload_f32(values(m * r, 5, 0.05f));
    float* g = upload_f32(values(n * r, 6, 1.0f));
    float* xa = upload_f32(std::vector<float>(static_cast<size_t>(n * r), 0.0f));
    const int64_t da_part_count = lora_da_slices(n, k, r) * r * k;
    float* part = upload_f32(std::vector<float>(
        static_cast<size_t>(std::max(lora_xa_splits(k) * n * r, da_part_count)), 0.0f));
    float* da = upload_f32(std::vector<float>(static_cast<size_t>(r * k), 0.0f));
    uint8_t* bits = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&bits), static_cast<size_t>(n * (k / 8))), "cudaMalloc");
    // The dy pass (r 8 only): g_out = dy b and db += scale dy^T xa, with dy = y0 and xa = g (inputs no pass writes).
    const LoraDyWork dy_work = lora_dy_work(n, m, r);
    float* g_out = upload_f32(std::vector<float>(static_cast<size_t>(n * r), 0.0f));
    float* db = upload_f32(std::vector<float>(static_cast<size_t>(m * r), 0.0f));
    const auto zeros = [](int64_t count) {
      return std::vector<float>(static_cast<size_t>(std::max<int64_t>(count, 1)));
    };
    float* part_g = upload_f32(zeros(dy_work.part_g_floats));
    float* part_db = upload_f32(zeros(dy_work.part_db_floats));
    const double bytes[kPasses] = {2.0 * n * k, 4.0 * n * m, 4.0 * n * k, 2.0 * n * k, 2.0 * n * m};
    for (int pass = 0; pass < kPasses; ++pass) bytes_total[pass] += bytes[pass] * layers;
    // References per (pass, kernel family): xa (pass 0) and the B update reading its xa (pass 1) follow xa's
    // family, da (pass 3) da's; the dx update (pass 2) has one.
    const auto family = [&](const LoraKernelConfig& c, int pass) {
      const bool tensor_cores = c.tensor_cores && r == 8;
      if (pass <= 1) return tensor_cores && c.xa_rows == 0 ? 1 : 0;
      if (pass == 3) return tensor_cores && c.da_rows == 4 ? 1 : 0;
      return 0;
    };
    std::map<std::pair<int, int>, std::vector<uint8_t>> ref;
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const LoraKernelConfig& cfg = configs[ci].c;
      uint8_t* bits_out = configs[ci].cache_bits ? bits : nullptr;
      const uint8_t* bits_in = bits_out;
      const auto run = [&](int pass) -> cudaError_t {
        switch (pass) {
          case 0:
            return launch_lora_xa(x, 1, a, n, k, r, seed, threshold, keep_scale, DropoutMap{}, part, xa, bits_out,
                                  stream, cfg);
          case 1:
            return launch_lora_rank_update(y, 1, xa, b, true, n, m, r, 4.0f, 0, 0u, 1.0f, DropoutMap{}, nullptr, stream,
                                           cfg);
          case 2:
            return launch_lora_rank_update(dx, 1, g, a, false, n, k, r, 4.0f, seed, threshold, keep_scale,
                                           DropoutMap{}, bits_in, stream, cfg);
          case 4:
            if (r != 8) return cudaSuccess;
            return launch_lora_dy(y0, 1, b, g, n, m, r, 4.0f, g_out, db, part_g, part_db, stream);
          default:
            return launch_lora_da(x, 1, g, n, k, r, 4.0f, seed, threshold, keep_scale, DropoutMap{}, bits_in, part, da,
                                  stream, cfg);
        }
      };
      double ms[kPasses];
      for (int pass = 0; pass < kPasses; ++pass) {
        // Correctness first: one call from the same starting values, compared with its family's reference bits.
        check(cudaMemcpyAsync(y, y0, n * m * 2, cudaMemcpyDeviceToDevice, stream), "reset");
        check(cudaMemcpyAsync(dx, dx0, n * k * 2, cudaMemcpyDeviceToDevice, stream), "reset");
        check(cudaMemsetAsync(da, 0, r * k * 4, stream), "reset");
        check(cudaMemsetAsync(db, 0, m * r * 4, stream), "reset");
        check(run(pass), configs[ci].name.c_str());
        check(cudaStreamSynchronize(stream), "sync");
        std::vector<uint8_t> out = pass == 0   ? download(xa, n * r * 4)
                                   : pass == 1 ? download(y, n * m * 2)
                                   : pass == 2 ? download(dx, n * k * 2)
                                   : pass == 3 ? download(da, r * k * 4)
                                               : download(g_out, n * r * 4);
        if (pass == 4) {
          const std::vector<uint8_t> db_bytes = download(db, m * r * 4);
          out.insert(out.end(), db_bytes.begin(), db_bytes.end());
        }
        const auto key = std::make_pair(pass, family(cfg, pass));
        if (ref.count(key) == 0) {
          ref[key] = std::move(out);
        } else if (out != ref[key]) {
          all_equal = false;
          std::printf("MISMATCH: %s pass %d linear %s\n", configs[ci].name.c_str(), pass, L.name);
        }
        std::vector<double> runs;
        for (int rep3 = 0; rep3 < 3; ++rep3) {
          for (int w = 0; w < 2; ++w) check(run(pass), "warm-up");
          check(cudaEventRecord(t0, stream), "record");
          for (int i = 0; i < reps; ++i) check(run(pass), "timed");
          check(cudaEventRecord(t1, stream), "record");
          check(cudaEventSynchronize(t1), "sync");
          float e = 0;
          check(cudaEventElapsedTime(&e, t0, t1), "elapsed");
          runs.push_back(e / reps);
        }
        std::sort(runs.begin(), runs.end());
        ms[pass] = runs[1];
        totals[ci][pass] += ms[pass] * layers;
      }
      std::printf("%-22s %-5s %10.3f %10.3f %10.3f %10.3f %10.3f   (%.0f %.0f %.0f %.0f %.0f)\n",
                  configs[ci].name.c_str(), L.name, ms[0] * layers, ms[1] * layers, ms[2] * layers, ms[3] * layers,
                  ms[4] * layers, bytes[0] / ms[0] / 1e6, bytes[1] / ms[1] / 1e6, bytes[2] / ms[2] / 1e6,
                  bytes[3] / ms[3] / 1e6, bytes[4] / ms[4] / 1e6);
    }
    for (void* pp : {x, y, dx, y0, dx0, static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(g),
                     static_cast<void*>(xa), static_cast<void*>(part), static_cast<void*>(da),
                     static_cast<void*>(bits), static_cast<void*>(g_out), static_cast<void*>(db),
                     static_cast<void*>(part_g), static_cast<void*>(part_db)}) {
      cudaFree(pp);
    }
  }
  std::printf("\nper training step (all linears x %lld layers), ms; GB/s over the step's bytes\n",
              static_cast<long long>(layers));
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    double sum = 0;
    for (int pass = 0; pass < kPasses; ++pass) sum += totals[ci][pass];
    std::printf("%-22s total %8.2f   xa %7.2f (%4.0f)  b %7.2f (%4.0f)  dx %7.2f (%4.0f)  da %7.2f (%4.0f)  dy %7.2f "
                "(%4.0f)\n",
                configs[ci].name.c_str(), sum, totals[ci][0], bytes_total[0] / totals[ci][0] / 1e6, totals[ci][1],
                bytes_total[1] / totals[ci][1] / 1e6, totals[ci][2], bytes_total[2] / totals[ci][2] / 1e6,
                totals[ci][3], bytes_total[3] / totals[ci][3] / 1e6, totals[ci][4],
                bytes_total[4] / totals[ci][4] / 1e6);
  }
  std::printf("bit-identical within each kernel family: %s\n", all_equal ? "yes" : "NO");
  return all_equal ? 0 : 1;
}
