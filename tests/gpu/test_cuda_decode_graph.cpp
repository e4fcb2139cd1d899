// tests/gpu/test_cuda_decode_graph.cpp — CUDA graphs for decoding: DeviceGraph capture / replay and its refusals, the
// replayable ops (attention_decode_at with the position on the device, kv_cache_write), and CausalLM::decode_step
// replayed from graphs against the same step launched op by op.
//
// Invariants:
//  - The model test is bit for bit (memcmp of every step's logits and of the whole KV cache): a replay runs the kernels
//    the eager step runs, on the same buffers, with the same key split (sized by the key bucket). It covers every
//    golden model decode_step supports, F32 and BF16, 300 steps with buckets from 4 keys (so each model crosses four or
//    more bucket boundaries and the split-K kernels run with 1 to 6 splits on an H200, some empty), and two caches interleaved.
//  - attention_decode_at against the double reference: the tolerances of test_cuda_decode.cpp (same kernels), with
//    NaN rows past the position (a bucket-sized split must never read them).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/decode_plan.h"
#include "ops/attention_decode.h"
#include "ops/device_graph.h"

namespace swift::test {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.device().is_cpu() ? a : a.to(Device::cpu());
  const Tensor hb = b.device().is_cpu() ? b : b.to(Device::cpu());
  return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() &&
         std::memcmp(ha.raw(), hb.raw(), dtype_bytes(ha.dtype(), ha.numel())) == 0;
}

// ---- DeviceGraph ---------------------------------------------------------------------------------------------------

TEST(CudaDeviceGraph, ReplaysWithNewInputsWrittenBeforeEachReplay) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Device dev = Device::cuda();
  Tensor a = Tensor::zeros({1000}, DType::F32, dev), b = Tensor::zeros({1000}, DType::F32, dev);
  Tensor out = Tensor::zeros({1000}, DType::F32, dev);
  auto graph = ops::DeviceGraph::capture(dev, [&] { ops::add(a, b, out); });
  EXPECT_EQ(out.to(Device::cpu()).item(7), 0.0) << "capture must not execute";
  for (int round = 1; round <= 3; ++round) {
    std::vector<float> av(1000), bv(1000);
    for (int i = 0; i < 1000; ++i) {
      av[static_cast<size_t>(i)] = static_cast<float>(round * i);
      bv[static_cast<size_t>(i)] = 0.5f;
    }
    a.copy_from(Tensor::from_f32({1000}, av));
    b.copy_from(Tensor::from_f32({1000}, bv));
    graph->replay();
    const Tensor host = out.to(Device::cpu());
    for (int i = 0; i < 1000; i += 111) EXPECT_EQ(host.item(i), round * i + 0.5) << "round " << round << " i " << i;
  }
}

TEST(CudaDeviceGraph, AllocationOrSynchronousCopyAbandonsTheCaptureAndTheStreamStillWorks) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Device dev = Device::cuda();
  Tensor a = Tensor::zeros({64}, DType::F32, dev);
  try {
    ops::DeviceGraph::capture(dev, [&] { Tensor t = Tensor::empty({64}, DType::F32, dev); });
    FAIL() << "an allocation during capture was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA graph capture"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::DeviceGraph::capture(dev, [&] { (void)a.to(Device::cpu()); }), Error);
  // The stream and the allocator are usable again.
  Tensor b = Tensor::zeros({64}, DType::F32, dev), out = Tensor::empty({64}, DType::F32, dev);
  a.copy_from(Tensor::from_f32({64}, std::vector<float>(64, 2.0f)));
  ops::add(a, b, out);
  EXPECT_EQ(out.to(Device::cpu()).item(5), 2.0);
}

// ---- replayable ops --------------------------------------------------------------------------------------------------

Tensor with_nan_rows(const Tensor& values, int64_t valid) {
  Tensor t = values.clone();
  const int64_t row = values.numel() / values.size(0);
  float* p = t.data<float>();
  for (int64_t i = valid * row; i < t.numel(); ++i) p[i] = std::nanf("");
  return t;
}

TEST(CudaAttentionDecodeAt, MatchesReferenceAtAnyPositionUnderTheBound) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t hq, hkv, d, max_keys, window; };
  uint32_t seed = 500;
  for (const Case c : {Case{14, 2, 64, 512, 0}, Case{2, 2, 96, 3000, 0}, Case{4, 1, 128, 300, 40}}) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
      const int64_t rows = c.max_keys + 3;
      const Tensor k_vals = random_tensor({rows, c.hkv, c.d}, DType::F32, ++seed);
      const Tensor v_vals = random_tensor({rows, c.hkv, c.d}, DType::F32, ++seed);
      const Input q = make_input({1, c.hq, c.d}, dtype, ++seed, -2.0f, 2.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      const Tensor probe = Tensor::empty({1, c.hq, c.d}, dtype, Device::cuda());
      Tensor ws;
      {
        const Tensor k_probe = Tensor::empty({rows, c.hkv, c.d}, dtype, Device::cuda());
        const int64_t floats = ops::attention_decode_workspace(probe, k_probe, c.max_keys, c.window);
        if (floats > 0) ws = Tensor::empty({floats}, DType::F32, Device::cuda());
      }
      Tensor start = Tensor::zeros({1}, DType::I32, Device::cuda());
      for (const int64_t pos : {int64_t{0}, int64_t{1}, c.max_keys / 3, c.max_keys / 2 + 1, c.max_keys - 1}) {
        SCOPED_TRACE("Hq " + std::to_string(c.hq) + " max_keys " + std::to_string(c.max_keys) + " pos " +
                     std::to_string(pos) + " " + dtype_name(dtype));
        // Rows past the query's position are NaN: they must not be read.
        const Tensor k_host = with_nan_rows(k_vals, pos + 1), v_host = with_nan_rows(v_vals, pos + 1);
        const Tensor k_dev = (dtype == DType::F32 ? k_host : k_host.to_dtype(dtype)).to(Device::cuda());
        const Tensor v_dev = (dtype == DType::F32 ? v_host : v_host.to_dtype(dtype)).to(Device::cuda());
        start.copy_from(Tensor::from_i32({1}, {static_cast<int32_t>(pos)}));
        Tensor ref = Tensor::empty({1, c.hq, c.d}, DType::F32);
        ops::ref::attention_decode(q.ref, rounded(k_host, dtype), rounded(v_host, dtype), pos, scale, c.window, ref);
        DeviceOut out({1, c.hq, c.d}, dtype);
        ops::attention_decode_at(q.dev, k_dev, v_dev, start, c.max_keys, scale, c.window, out.tensor, ws);
        g_tag = std::string("attention_decode_at ") + dtype_name(dtype);
        expect_close(out.fetch(), ref, dtype == DType::F32 ? 2e-5 : 8e-3, "out");
      }
    }
  }
}

TEST(CudaKvCacheWrite, WritesTheRowsAtTheDevicePosition) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (const DType dtype : {DType::F32, DType::BF16}) {
    const Tensor k_new = random_tensor({1, 2, 8}, DType::F32, 61).to_dtype(dtype);
    const Tensor v_new = random_tensor({1, 2, 8}, DType::F32, 62).to_dtype(dtype);
    Tensor k_cache = Tensor::zeros({5, 2, 8}, dtype, Device::cuda()), v_cache = Tensor::zeros({5, 2, 8}, dtype, Device::cuda());
    const Tensor row = Tensor::from_i32({1}, {3}).to(Device::cuda());
    ops::kv_cache_write(k_new.to(Device::cuda()), v_new.to(Device::cuda()), k_cache, v_cache, row);
    const Tensor kh = k_cache.to(Device::cpu()), vh = v_cache.to(Device::cpu());
    EXPECT_TRUE(same_bits(kh.slice_rows(3, 4), k_new));
    EXPECT_TRUE(same_bits(vh.slice_rows(3, 4), v_new));
    EXPECT_TRUE(same_bits(kh.slice_rows(0, 3), Tensor::zeros({3, 2, 8}, dtype)));
    EXPECT_TRUE(same_bits(kh.slice_rows(4, 5), Tensor::zeros({1, 2, 8}, dtype)));
  }
}

// ---- CausalLM::decode_step -----------------------------------------------------------------------------------------

std::string golden_dir(const std::string& name) { return std::string(SWIFT_FIXTURES_DIR) + "/golden/" + name; }

std::vector<int32_t> first_sequence(const std::string& name) {
  io::SafetensorsFile f = io::SafetensorsFile::open(golden_dir(name) + "/expected.safetensors");
  const Tensor ids = f.tensor("input_ids"), cu = f.tensor("cu_seqlens");
  std::vector<int32_t> out;
  for (int64_t t = 0; t < cu.item(1); ++t) out.push_back(static_cast<int32_t>(ids.item(t)));
  return out;
}

int32_t argmax(const Tensor& row) {
  const float* p = row.data<float>();
  return static_cast<int32_t>(std::max_element(p, p + row.numel()) - p);
}

constexpr int64_t kSteps = 300, kBucketMin = 4;

class CudaDecodeGraph : public ::testing::TestWithParam<std::string> {};

// Prefill the first sequence, then kSteps greedy tokens (the eager cache's choices fed to both).
TEST_P(CudaDecodeGraph, ReplayedStepsEqualEagerStepsBitForBit) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::vector<int32_t> prompt = first_sequence(GetParam());
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(GetParam() + " " + dtype_name(dtype));
    auto m = model::CausalLM::load(golden_dir(GetParam()));
    m->place(Device::cuda(), dtype);
    ASSERT_TRUE(m->decode_step_supported());
    const int64_t capacity = static_cast<int64_t>(prompt.size()) + kSteps;
    auto eager = m->new_kv_cache(capacity), graph = m->new_kv_cache(capacity);
    eager.decode_bucket_min = graph.decode_bucket_min = kBucketMin;
    Tensor want = m->forward_cached(prompt, eager);
    ASSERT_TRUE(same_bits(m->forward_cached(prompt, graph), want));
    std::vector<int64_t> buckets_seen;
    for (int64_t s = 0; s < kSteps; ++s) {
      const int32_t id = argmax(want);
      const int64_t bucket = model::decode_key_bucket(eager.length + 1, capacity, kBucketMin);
      if (buckets_seen.empty() || buckets_seen.back() != bucket) buckets_seen.push_back(bucket);
      want = m->decode_step(id, eager, model::DecodeMode::Eager);
      const Tensor got = m->decode_step(id, graph, model::DecodeMode::Graph);
      ASSERT_TRUE(same_bits(got, want)) << "step " << s << " (position " << eager.length - 1 << ", bucket " << bucket
                                        << ")";
    }
    for (size_t i = 0; i < eager.k.size(); ++i) {
      EXPECT_TRUE(same_bits(graph.k[i].slice_rows(0, graph.length), eager.k[i].slice_rows(0, eager.length))) << i;
      EXPECT_TRUE(same_bits(graph.v[i].slice_rows(0, graph.length), eager.v[i].slice_rows(0, eager.length))) << i;
    }
    const model::DecodeStats st = model::decode_stats(graph);
    EXPECT_GE(buckets_seen.size(), 5u);
    EXPECT_EQ(st.graphs_captured, static_cast<int64_t>(buckets_seen.size()));
    EXPECT_EQ(st.eager_steps, st.graphs_captured);  // each bucket's first step runs eagerly, then is captured
    EXPECT_EQ(st.graph_replays, kSteps - st.graphs_captured);
    EXPECT_FALSE(st.graphs_failed);
    EXPECT_EQ(model::decode_stats(eager).graph_replays, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, CudaDecodeGraph,
                         ::testing::Values("llama_gqa_llama3", "mistral_sliding_window", "qwen3_qknorm", "qwen2_tied_1kv",
                                           "llama_mha_tied_linear_bias", "llama_yarn", "qwen2_bf16"));

// Two sequences decoded in alternation: each cache replays its own graphs (its own buffers and cache rows).
TEST(CudaDecodeGraphCaches, InterleavedCachesEqualTheirEagerRuns) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  auto m = model::CausalLM::load(golden_dir("qwen2_bf16"));
  m->place(Device::cuda(), DType::BF16);
  const std::vector<int32_t> p1 = first_sequence("qwen2_bf16");
  const std::vector<int32_t> p2(p1.begin(), p1.begin() + static_cast<int64_t>(p1.size()) / 2);
  const int64_t steps = 40, capacity = static_cast<int64_t>(p1.size()) + steps;
  std::vector<model::CausalLM::KvCache> eager, graph;
  std::vector<Tensor> last;
  for (const auto* p : {&p1, &p2}) {
    eager.push_back(m->new_kv_cache(capacity));
    graph.push_back(m->new_kv_cache(capacity));
    eager.back().decode_bucket_min = graph.back().decode_bucket_min = kBucketMin;
    last.push_back(m->forward_cached(*p, eager.back()));
    m->forward_cached(*p, graph.back());
  }
  for (int64_t s = 0; s < steps; ++s) {
    for (size_t b = 0; b < 2; ++b) {
      const int32_t id = argmax(last[b]);
      last[b] = m->decode_step(id, eager[b], model::DecodeMode::Eager);
      ASSERT_TRUE(same_bits(m->decode_step(id, graph[b], model::DecodeMode::Graph), last[b])) << "step " << s << " seq " << b;
    }
  }
  EXPECT_GT(model::decode_stats(graph[0]).graph_replays, 0);
  EXPECT_GT(model::decode_stats(graph[1]).graph_replays, 0);
}

// forward_cached (what `swift infer` calls) takes decode_step on CUDA: graphs when enabled, the same kernels eagerly
// when not (SWIFT_CUDA_GRAPHS=0), with identical logits; adapters keep the packed path.
TEST(CudaDecodeGraphCaches, ForwardCachedFollowsTheGraphsSetting) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  auto m = model::CausalLM::load(golden_dir("llama_gqa_llama3"));
  m->place(Device::cuda(), DType::BF16);
  const std::vector<int32_t> prompt = first_sequence("llama_gqa_llama3");
  const bool before = ops::cuda_graphs_enabled();
  std::vector<std::vector<Tensor>> logits(2);
  std::vector<model::DecodeStats> stats;
  for (const bool graphs : {true, false}) {
    ops::set_cuda_graphs_enabled(graphs);
    auto cache = m->new_kv_cache(static_cast<int64_t>(prompt.size()) + 20);
    Tensor l = m->forward_cached(prompt, cache);
    for (int s = 0; s < 20; ++s) {
      l = m->forward_cached({argmax(l)}, cache);
      logits[graphs ? 0 : 1].push_back(l);
    }
    stats.push_back(model::decode_stats(cache));
  }
  ops::set_cuda_graphs_enabled(before);
  EXPECT_EQ(stats[0].graphs_captured, 1);  // one bucket (the capacity is below 256 keys)
  EXPECT_EQ(stats[0].graph_replays, 19);
  EXPECT_EQ(stats[1].graph_replays, 0);
  EXPECT_EQ(stats[1].eager_steps, 20);
  for (size_t s = 0; s < logits[0].size(); ++s) EXPECT_TRUE(same_bits(logits[0][s], logits[1][s])) << "step " << s;
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
