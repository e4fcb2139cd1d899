// model/decode_plan.h — the fixed-buffer decoding step of CausalLM (one token of one sequence against its KV cache)
// and the CUDA graphs that replay it, one per key bucket.
//
// Invariants:
//  - A DecodePlan belongs to one KvCache (KvCache::plan) and one placement of one model (owner, revision): it holds
//    every buffer the step touches (step inputs, activations, logits, the attention's split workspace) plus copies of
//    the cache's per-layer tensors, so that a captured graph's pointers stay valid for the plan's life. It is remade
//    when the model was re-placed or given other adapters, or the cache's tensors changed.
//  - The step's inputs live in device memory: step_in = [token id, position] (I32), rewritten by one host-to-device
//    copy before each step; the kernels read the id (embedding), the position (rope, the cache row the new key and
//    value go to, the attention's visible keys) from there, never from the host.
//  - Key buckets: a step at position p sees p + 1 keys and runs in bucket decode_key_bucket(p + 1, capacity, min):
//    min * 2^k, capped at the capacity. The attention's key split is sized by the bucket, not by p + 1, in the eager
//    and the replayed step alike: same kernels, same grid, same chunk boundaries, bit-identical logits.
//  - Graphs: the first step of a bucket runs eagerly (its result is that step's; it also makes the cuBLASLt plans and
//    loads the kernels), then the same enqueue is captured; later steps of the bucket replay it. A failed capture
//    under DecodeMode::Auto prints one line to stderr and leaves the plan eager for good; under DecodeMode::Graph it
//    throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/causal_lm.h"
#include "ops/device_graph.h"
#include "ops/ops.h"

namespace swift::model {

// The bucket of a step that sees `keys` keys: the smallest min_bucket * 2^k >= keys, capped at `capacity`.
// Requires 1 <= keys <= capacity and min_bucket >= 1.
int64_t decode_key_bucket(int64_t keys, int64_t capacity, int64_t min_bucket);
// Every bucket a cache of `capacity` rows can use, ascending (the last is the capacity).
std::vector<int64_t> decode_key_buckets(int64_t capacity, int64_t min_bucket);

struct DecodeStats {
  int64_t eager_steps = 0;      // steps launched op by op (every step in Eager mode; a bucket's first in Graph mode)
  int64_t graph_replays = 0;    // steps replayed from a captured graph
  int64_t graphs_captured = 0;  // buckets captured
  bool graphs_failed = false;   // a capture failed (Auto mode): the plan stays eager
};
// The counters of the cache's plan (zeros before its first decode_step).
DecodeStats decode_stats(const CausalLM::KvCache& cache);

struct DecodePlan {
  const CausalLM* owner = nullptr;
  uint64_t revision = 0;
  int64_t bucket_min = 0;
  std::vector<Tensor> k, v;  // the cache's tensors (same storage) the graphs write and read
  Tensor step_in;            // (2) I32 on the device: token id, position
  Tensor ids, position;      // views of step_in: (1), (1)
  Tensor x, h;               // (1, C) residual stream, normed input of a sub-block
  Tensor q, k_new, v_new;    // (1, Hq*D), (1, Hkv*D), (1, Hkv*D) projections
  Tensor qn, kn;             // (Hq, D), (Hkv, D) q/k-normed (qk_norm models only)
  Tensor attn;               // (1, Hq, D)
  Tensor gate, up;           // (1, F)
  Tensor logits;             // (1, V) activation dtype
  Tensor logits_f32;         // (1, V) F32 (logits itself when activations are F32)
  Tensor workspace;          // F32 split partials of attention_decode_at, sized for the largest bucket (or undefined)
  ops::RopeFrequencies freqs;
  std::map<int64_t, std::unique_ptr<ops::DeviceGraph>> graphs;  // by key bucket
  DecodeStats stats;
};

}  // namespace swift::model
