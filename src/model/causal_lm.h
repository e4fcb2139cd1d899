// model/causal_lm.h — a decoder-only causal language model of the llama family (llama, qwen2, qwen3, mistral)
// built from a ModelConfig and Hugging Face-named weights, with an explicit forward pass per block.
//
// Invariants:
//  - Weights are held under their Hugging Face names, in their stored dtype (F32/BF16/F16). The forward runs
//    where the weights live: on the CPU in F32; on a CUDA device (after place(), or weights made there) with
//    activations in activation_dtype() (the matrices' dtype: BF16, F16 or F32; BF16 for packed 4-bit), fp32 math.
//    Logits and hidden states come back to the host as F32 whatever the device. Missing, unexpected or
//    mis-shaped weights throw naming the tensor and the expected shape.
//  - Inference (forward, forward_cached) takes host inputs and copies them to the device in one transfer per
//    call; the KV cache lives on the model's device in the activation dtype; a cached call returns only the
//    logits asked for (the last token's by default), so a decoding step moves V floats to the host.
//  - A forward takes a packed batch: ids (T), positions (T; restarting at 0 per sequence) and cu_seqlens
//    (B+1). Tokens of different sequences never see each other, so a packed batch gives the same logits as
//    its sequences run alone.
//  - Architecture differences are data (ModelConfig flags: qkv bias, q/k norm, tied head, sliding window,
//    rope scaling), not subclasses; a new family adds a weight-name map and flags.
//  - One-token decoding on CUDA (forward_cached with one token and a non-empty cache) runs decode_step: a fixed-buffer
//    step kept with the cache (model/decode_plan.h) whose kernels read the token id and position from device memory,
//    replayed as a CUDA graph per key bucket unless SWIFT_CUDA_GRAPHS=0 (then the same kernels launch one by one:
//    bit-identical logits either way). Models it does not cover (layer adapters, dynamic NTK rope) and the CPU keep
//    the packed path. place() and set_lora() invalidate every plan (revision_).
//  - After shard_for_tensor_parallel the model holds only its tensor-parallel rank's shard of every attention and
//    MLP linear (model/parallel.h layouts); its own forward refuses to run (it needs whole weights): it trains
//    through TrainableModel with the same group.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"
#include "model/lora.h"

namespace swift::model {

struct DecodePlan;  // model/decode_plan.h

// How decode_step runs: Auto = a CUDA graph on CUDA when cuda_graphs_enabled() and SWIFT_PROFILE is off, else Eager;
// Eager = the step's kernels launched one by one; Graph = replay (capturing on a bucket's first step), throwing when
// the capture fails (tests) instead of falling back to Eager as Auto does.
enum class DecodeMode { Auto, Eager, Graph };

struct LayerWeights {
  Tensor input_norm;                      // (C)
  Tensor q_proj, k_proj, v_proj, o_proj;  // (Hq*D, C), (Hkv*D, C), (Hkv*D, C), (C, Hq*D)
  Tensor q_bias, k_bias, v_bias, o_bias;  // (Hq*D), (Hkv*D), (Hkv*D), (C) or undefined
  Tensor q_norm, k_norm;                  // (D) or undefined (qwen3)
  Tensor post_attention_norm;             // (C)
  Tensor gate_proj, up_proj, down_proj;   // (F, C), (F, C), (C, F)
  Tensor gate_bias, up_bias, down_bias;   // (F), (F), (C) or undefined (llama mlp_bias)
};

struct ModelWeights {
  Tensor embed_tokens;  // (V, C)
  std::vector<LayerWeights> layers;
  Tensor final_norm;    // (C)
  Tensor lm_head;       // (V, C); the same tensor as embed_tokens when tied
};

class CausalLM {
 public:
  // A Hugging Face model directory (config.json + model.safetensors or a sharded index) or a .gguf file.
  static std::unique_ptr<CausalLM> load(const std::string& path);
  static std::unique_ptr<CausalLM> from_weights(io::ModelConfig config, std::map<std::string, Tensor> weights);

  const io::ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The device every weight lives on (the CPU after load); an offloaded embedding table (offload_embedding) is host
  // memory read by this device.
  Device device() const { return weights_.final_norm.device(); }
  // Storage dtype of the forward's activations and of the KV cache: F32 on the CPU; on CUDA the matrices' dtype
  // (BF16, F16 for --torch_dtype float16, F32 for exactness checks against the CPU; BF16 for packed 4-bit ones).
  DType activation_dtype() const { return act_dtype_; }

  // Moves every weight to `device`: matrices (embeddings, projections, lm_head) stored as `matrix_dtype`
  // (F32/BF16/F16), vectors (norm weights, biases) as F32. Host copies (and file mappings) are released.
  // Training and inference on that device then allocate their activations there (activation_dtype() follows
  // matrix_dtype). Adapters already set with set_lora move along (their DoRA norms are recomputed against the
  // placed weights); TrainableModel moves its own.
  void place(Device device, DType matrix_dtype);
  // --offload_embedding: moves the input embedding table of a model placed on a CUDA device to page-locked host memory
  // that the device reads directly (ops::host_mapped_copy) and frees its device memory; each lookup then reads the
  // batch's rows over the host link (Qwen2.5-7B: 1 GiB less, 8,192 rows of 7 KiB per step). Throws when the table is
  // also the LM head (tie_word_embeddings) or the model is on the CPU. Training with a frozen table (LoRA) reads it
  // as before; full fine-tuning refuses it (TrainableModel). place() brings it back to the device.
  void offload_embedding();
  bool embedding_offloaded() const { return weights_.embed_tokens.defined() && weights_.embed_tokens.device().is_cpu() &&
                                            device().is_cuda(); }

  // Frozen-weight streaming (TrainableModel::set_offload_frozen_layers): hands layer i's seven matrices (q, k, v, o,
  // gate, up, down, in LinearKind order) to the caller, and the model (its loaded tensors too) keeps no reference to
  // them, so their memory goes when the caller lets go. Until restore_layer_matrices gives them back, forward,
  // decoding and place() throw naming the layer.
  std::array<Tensor, kLinearKinds> lend_layer_matrices(int64_t layer);
  void restore_layer_matrices(int64_t layer, const std::array<Tensor, kLinearKinds>& matrices);
  int64_t lent_layers() const { return static_cast<int64_t>(lent_.size()); }

  // Tensor parallelism at load (--tensor_model_parallel_size `size`, this rank `rank` of the group): keeps only the
  // rank's shard of every attention / MLP linear, as model/parallel.h lays them out (q, k, v, gate, up and their
  // biases: rows [rank*M/size, (rank+1)*M/size); o, down: input columns [rank*K/size, (rank+1)*K/size); embedding
  // and head (one tensor when tied): vocabulary rows [rank*V/size, (rank+1)*V/size), uneven when size does not divide
  // V; the o / down biases and norms stay whole). The whole tensors are released (a mapped file is read only where
  // the shards lie), so a rank holds 1/size of the linears, the embedding and the head. Call once, before place() (so that only shards move to
  // the device) and before training; throws naming the option when heads or intermediate units do not divide.
  void shard_for_tensor_parallel(int rank, int size);
  int tensor_parallel_rank() const { return tp_rank_; }
  int tensor_parallel_size() const { return tp_size_; }  // 1: whole weights

  // LoRA adapters applied in every forward (inference: no dropout). Replaces any earlier adapters; an empty
  // LoraAdapters removes them. Throws when the adapters were made for another architecture. The adapters move to
  // the model's device (A, B, magnitudes stay F32; modules_to_save copies on a CUDA device take the matrices'
  // dtype, as PEFT's copies of a 16-bit model do). DoRA weight norms are computed here once (the adapters are
  // constant until the next set_lora); modules_to_save copies replace the embedding table and/or the LM head.
  void set_lora(LoraAdapters adapters);
  const LoraAdapters& lora() const { return lora_; }

  // Logits (T, V) F32 on the host of a packed batch. ids, positions: (T) I32; cu_seqlens: (B+1) I32 (host or
  // the model's device).
  Tensor forward(const Tensor& ids, const Tensor& positions, const Tensor& cu_seqlens) const;
  // Final hidden states (T, C) F32 on the host, after the last norm (the input of the LM head).
  Tensor forward_hidden(const Tensor& ids, const Tensor& positions, const Tensor& cu_seqlens) const;
  // One sequence: positions 0..n-1.
  Tensor forward(const std::vector<int32_t>& ids) const;

  // Incremental decoding of one sequence: keys and values of every layer for positions 0..length-1.
  struct KvCache {
    std::vector<Tensor> k, v;  // per layer: (capacity, Hkv, D), activation dtype, on the model's device
    int64_t length = 0;
    int64_t capacity() const { return k.empty() ? 0 : k[0].size(0); }
    // decode_step's buffers and CUDA graphs for this cache (made on its first step; copies of the cache share it).
    std::shared_ptr<DecodePlan> plan;
    // Smallest key bucket of decode_step (model/decode_plan.h: decode_key_bucket); tests lower it to cross buckets.
    int64_t decode_bucket_min = 256;
  };
  // A cache for the model as placed now (make it after place()).
  KvCache new_kv_cache(int64_t capacity) const;
  // Runs `ids` at positions cache.length.. (appending their keys and values) and returns the F32 host logits of
  // the last token (1, V), or of every new token (n, V) with all_logits. An empty cache runs the packed forward's
  // attention (prefill); later calls attend to the cache through ops::attention_decode. Throws when the cache
  // would overflow or was made for another placement.
  Tensor forward_cached(const std::vector<int32_t>& ids, KvCache& cache, bool all_logits = false) const;
  // One token `id` at position cache.length of a non-empty cache (appending its key and value); returns its F32 host
  // logits (1, V). Same math as forward_cached, through fixed buffers (model/decode_plan.cpp): the attention's key split
  // is sized by the key bucket, so eager and replayed steps give bit-identical logits. Throws when the model is not
  // covered (decode_step_supported) or the cache is empty, full or from another placement.
  Tensor decode_step(int32_t id, KvCache& cache, DecodeMode mode = DecodeMode::Auto) const;
  // Whether decode_step covers this model: no LoRA/DoRA layer adapters (modules_to_save copies are fine), rope other
  // than dynamic NTK. `why` receives the reason when not.
  bool decode_step_supported(std::string* why = nullptr) const;

 private:
  CausalLM(io::ModelConfig config, std::map<std::string, Tensor> weights);
  // The decoder stack; with a cache, one sequence attends to the cached keys (and appends its own). Returns the
  // final normed hidden states (T, C) on the model's device in the activation dtype.
  Tensor run_layers(const Tensor& ids, const Tensor& positions, const Tensor& cu_seqlens, KvCache* cache) const;
  // Logits (rows of hidden, V) F32 on the host through the LM head.
  Tensor head_logits(const Tensor& hidden) const;
  // Throws naming `op` unless `cache` was made for this placement and holds `n` more tokens.
  void check_kv_cache(const char* op, const KvCache& cache, int64_t n) const;
  // decode_step's plan for `cache` (made, or remade when the model or the cache changed since).
  DecodePlan& decode_plan(KvCache& cache) const;
  // Enqueues one decoding step on the plan's buffers, attention split sized for `max_keys` keys (model/decode_plan.cpp).
  void enqueue_decode_step(DecodePlan& plan, int64_t max_keys) const;
  // Throws naming `op` while lend_layer_matrices holds a layer's matrices.
  void check_whole(const char* op) const;
  std::set<int64_t> lent_;             // layers whose matrices are lent (lend_layer_matrices)
  std::set<std::string> lent_names_;  // their entries taken out of tensors_
  uint64_t revision_ = 0;  // unique per construction, place() and set_lora(): decode plans made before are stale
  io::ModelConfig config_;
  DType act_dtype_ = DType::F32;
  std::map<std::string, Tensor> tensors_;  // keeps every loaded tensor (and its mapping) alive
  ModelWeights weights_;
  LoraAdapters lora_;
  int tp_rank_ = 0, tp_size_ = 1;  // shard_for_tensor_parallel
  std::vector<std::array<Tensor, kLinearKinds>> dora_norms_;  // [layer][kind] (M) F32 where the adapter is DoRA
  const Tensor& embed_table() const { return lora_.embed_tokens.defined() ? lora_.embed_tokens : weights_.embed_tokens; }
  const Tensor& head_table() const { return lora_.lm_head.defined() ? lora_.lm_head : weights_.lm_head; }
};

// Builds the packed-batch inputs for several sequences: ids, positions restarting per sequence, cu_seqlens.
struct PackedBatch {
  Tensor ids, positions, cu_seqlens;
};
PackedBatch pack_sequences(const std::vector<std::vector<int32_t>>& sequences);

}  // namespace swift::model
