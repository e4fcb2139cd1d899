// model/decode_plan.cpp — CausalLM::decode_step: one token against the KV cache through fixed buffers, launched op by
// op or replayed as a CUDA graph per key bucket (see decode_plan.h for the plan's invariants).
//
// Invariants:
//  - enqueue_decode_step launches exactly the ops of run_layers for one cached token (same ops, same order, same
//    weights), with three differences that do not change a value: the new key and value are projected (and rope'd)
//    into fixed buffers, then copied into the cache row by ops::kv_cache_write at the device position (run_layers
//    writes the row directly); attention is ops::attention_decode_at (position on the device, key split sized by the
//    bucket); the LM head (and the cast of its logits to F32) runs inside the step. It allocates nothing and reads
//    nothing back, so it can be captured; everything it touches belongs to the plan or to the model.
//  - decode_step copies [id, position] into the plan (one host-to-device copy), runs or replays the step, advances
//    cache.length, and returns the logits copied to the host (the one synchronisation of a step).
//  - Rope frequencies are computed once per plan: every rope type the step covers ignores the sequence length (only
//    dynamic NTK depends on it, and decode_step_supported refuses it).
#include "model/decode_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/profile.h"
#include "ops/attention_decode.h"

namespace swift::model {

int64_t decode_key_bucket(int64_t keys, int64_t capacity, int64_t min_bucket) {
  SWIFT_CHECK(min_bucket >= 1, "decode_key_bucket: the smallest bucket must be positive, got {}", min_bucket);
  SWIFT_CHECK(keys >= 1 && keys <= capacity, "decode_key_bucket: {} keys outside a cache of {} rows", keys, capacity);
  int64_t b = min_bucket;
  while (b < keys && b < capacity) b = b > capacity / 2 ? capacity : 2 * b;
  return std::min(b, capacity);
}

std::vector<int64_t> decode_key_buckets(int64_t capacity, int64_t min_bucket) {
  SWIFT_CHECK(capacity >= 1, "decode_key_buckets: capacity must be positive, got {}", capacity);
  std::vector<int64_t> out;
  for (int64_t keys = 1; keys <= capacity;) {
    const int64_t b = decode_key_bucket(keys, capacity, min_bucket);
    out.push_back(b);
    keys = b + 1;
  }
  return out;
}

DecodeStats decode_stats(const CausalLM::KvCache& cache) { return cache.plan ? cache.plan->stats : DecodeStats{}; }

bool CausalLM::decode_step_supported(std::string* why) const {
  auto refuse = [&](const char* reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  for (const auto& layer : lora_.layers) {
    for (const LoraLinear& l : layer) {
      if (l.defined()) return refuse("LoRA / DoRA layer adapters are not covered (merge them, or decode through forward_cached)");
    }
  }
  if (config_.rope.type == ops::RopeType::Dynamic) {
    return refuse("dynamic NTK rope changes its frequencies with the length (decode through forward_cached)");
  }
  return true;
}

DecodePlan& CausalLM::decode_plan(KvCache& cache) const {
  DecodePlan* p = cache.plan.get();
  bool valid = p != nullptr && p->owner == this && p->revision == revision_ && p->bucket_min == cache.decode_bucket_min &&
               p->k.size() == cache.k.size() && p->v.size() == cache.v.size();
  for (size_t i = 0; valid && i < cache.k.size(); ++i) {
    valid = p->k[i].raw() == cache.k[i].raw() && p->v[i].raw() == cache.v[i].raw() &&
            p->k[i].shape() == cache.k[i].shape() && p->v[i].shape() == cache.v[i].shape();
  }
  if (valid) return *p;

  const io::ModelConfig& c = config_;
  const Device dev = device();
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  auto plan = std::make_shared<DecodePlan>();
  plan->owner = this;
  plan->revision = revision_;
  plan->bucket_min = cache.decode_bucket_min;
  plan->k = cache.k;
  plan->v = cache.v;
  auto act = [&](const Shape& shape) { return Tensor::empty(shape, act_dtype_, dev, MemoryCategory::Activations); };
  plan->step_in = Tensor::zeros({2}, DType::I32, dev, MemoryCategory::Workspace);
  plan->ids = plan->step_in.slice_rows(0, 1);
  plan->position = plan->step_in.slice_rows(1, 2);
  plan->x = act({1, C});
  plan->h = act({1, C});
  plan->q = act({1, Hq * D});
  plan->k_new = act({1, Hkv * D});
  plan->v_new = act({1, Hkv * D});
  if (c.qk_norm) {
    plan->qn = act({Hq, D});
    plan->kn = act({Hkv, D});
  }
  plan->attn = act({1, Hq, D});
  plan->gate = act({1, F});
  plan->up = act({1, F});
  plan->logits = act({1, V});
  plan->logits_f32 = act_dtype_ == DType::F32 ? plan->logits : Tensor::empty({1, V}, DType::F32, dev, MemoryCategory::Activations);
  // The split workspace of the largest need over every bucket and every layer's window.
  int64_t floats = 0;
  const Tensor q3 = plan->q.view({1, Hq, D});
  for (const int64_t bucket : decode_key_buckets(cache.capacity(), cache.decode_bucket_min)) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      floats = std::max(floats, ops::attention_decode_workspace(q3, cache.k[static_cast<size_t>(i)], bucket,
                                                                c.layer_window(i)));
    }
  }
  if (floats > 0) plan->workspace = Tensor::empty({floats}, DType::F32, dev, MemoryCategory::Workspace);
  plan->freqs = ops::rope_frequencies(c.rope, D, 1);
  cache.plan = std::move(plan);  // replaces (and frees) a stale plan and its graphs
  return *cache.plan;
}

void CausalLM::enqueue_decode_step(DecodePlan& p, int64_t max_keys) const {
  const io::ModelConfig& c = config_;
  const int64_t D = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor none;
  ops::embedding(embed_table(), p.ids, p.x);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = weights_.layers[static_cast<size_t>(i)];
    Tensor& k_cache = p.k[static_cast<size_t>(i)];
    Tensor& v_cache = p.v[static_cast<size_t>(i)];
    // attention block: x += o_proj(attention(rope(norm(q)), rope(norm(k)), v))
    ops::rmsnorm(p.x, l.input_norm, eps, p.h, none);
    ops::linear(p.h, l.q_proj, l.q_bias, p.q, false);
    ops::linear(p.h, l.k_proj, l.k_bias, p.k_new, false);
    ops::linear(p.h, l.v_proj, l.v_bias, p.v_new, false);
    Tensor q3 = p.q.view({1, Hq, D}), k3 = p.k_new.view({1, Hkv, D});
    if (c.qk_norm) {
      ops::rmsnorm(p.q.view({Hq, D}), l.q_norm, eps, p.qn, none);
      ops::rmsnorm(p.k_new.view({Hkv, D}), l.k_norm, eps, p.kn, none);
      q3 = p.qn.view({1, Hq, D});
      k3 = p.kn.view({1, Hkv, D});
    }
    ops::rope(q3, p.position, p.freqs);
    ops::rope(k3, p.position, p.freqs);
    ops::kv_cache_write(k3, p.v_new.view({1, Hkv, D}), k_cache, v_cache, p.position);
    ops::attention_decode_at(q3, k_cache, v_cache, p.position, max_keys, scale, c.layer_window(i), p.attn, p.workspace);
    ops::linear(p.attn.view({1, Hq * D}), l.o_proj, l.o_bias, p.x, /*accumulate=*/true);
    // MLP block: x += down(silu(gate(norm(x))) * up(norm(x)))
    ops::rmsnorm(p.x, l.post_attention_norm, eps, p.h, none);
    ops::linear(p.h, l.gate_proj, l.gate_bias, p.gate, false);
    ops::linear(p.h, l.up_proj, l.up_bias, p.up, false);
    ops::swiglu(p.gate, p.up, p.gate);
    ops::linear(p.gate, l.down_proj, l.down_bias, p.x, /*accumulate=*/true);
  }
  ops::rmsnorm(p.x, weights_.final_norm, eps, p.h, none);
  ops::linear(p.h, head_table(), Tensor(), p.logits, false);
  if (act_dtype_ != DType::F32) ops::cast(p.logits, p.logits_f32);
}

Tensor CausalLM::decode_step(int32_t id, KvCache& cache, DecodeMode mode) const {
  check_whole("decode_step");
  std::string why;
  SWIFT_CHECK(decode_step_supported(&why), "decode_step: {}", why);
  check_kv_cache("decode_step", cache, 1);
  SWIFT_CHECK(cache.length > 0, "decode_step: the KV cache is empty; run the prompt through forward_cached first");
  SWIFT_CHECK(id >= 0 && id < config_.vocab_size, "decode_step: token id {} is outside the vocabulary [0, {})", id,
              config_.vocab_size);
  const bool cuda = device().is_cuda();
  if (mode == DecodeMode::Graph) {
    SWIFT_CHECK(cuda, "decode_step: DecodeMode::Graph needs a model on a CUDA device, this one is on {}", device().str());
    SWIFT_CHECK(!profile::enabled(), "decode_step: DecodeMode::Graph cannot run under SWIFT_PROFILE (it times every op "
                                     "from the host)");
  }
  DecodePlan& p = decode_plan(cache);
  const bool graph = mode == DecodeMode::Graph ||
                     (mode == DecodeMode::Auto && cuda && ops::cuda_graphs_enabled() && !profile::enabled() &&
                      !p.stats.graphs_failed);
  const int64_t position = cache.length;
  const int64_t bucket = decode_key_bucket(position + 1, cache.capacity(), p.bucket_min);
  p.step_in.copy_from(Tensor::from_i32({2}, {id, static_cast<int32_t>(position)}));
  auto found = graph ? p.graphs.find(bucket) : p.graphs.end();
  if (found != p.graphs.end()) {
    found->second->replay();
    ++p.stats.graph_replays;
  } else {
    enqueue_decode_step(p, bucket);  // this step's result; under a graph mode also the warm-up of the capture below
    ++p.stats.eager_steps;
    if (graph) {
      try {
        p.graphs[bucket] = ops::DeviceGraph::capture(device(), [&] { enqueue_decode_step(p, bucket); });
        ++p.stats.graphs_captured;
      } catch (const Error& e) {
        if (mode == DecodeMode::Graph) throw;
        p.stats.graphs_failed = true;
        std::fprintf(stderr, "decode_step: CUDA graphs off for this KV cache (steps run op by op): %s\n", e.what());
      }
    }
  }
  cache.length += 1;
  return p.logits_f32.to(Device::cpu());
}

}  // namespace swift::model
