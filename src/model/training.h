// model/training.h — the trainable view of a CausalLM: LoRA adapters or full fine-tuning (F32 master weights),
// and the explicit forward + backward of one packed micro-batch with a per-block recompute policy.
//
// Invariants:
//  - Trainable parameters and their gradients are F32; frozen base weights keep their stored dtype. Gradients
//    accumulate (+=) across micro-batches until zero_grad() (with a gradient provider: from the zeroed storage it
//    provides until its owner releases it; the model's copies of a gradient handle always equal Parameter::grad);
//    the loss gradient is scaled by `grad_scale`, so the trainer passes 1 / (valid tokens of the whole accumulated
//    batch), as transformers >= 4.46 normalises.
//  - Gradient checkpointing keeps only each block's input and its plain LoRA linears' xa and dropout keep bits (the
//    rest of its forward state is freed as soon as the block's forward ends; SWIFT_CHECKPOINT_KEEP_XA=0 frees those
//    too); the block is recomputed (same dropout masks: they are a pure function of the seed; the kept xa spare the
//    xa passes) right before its backward. Without it every activation is kept.
//    set_recompute_layers(n) limits the recompute to the first n blocks (Megatron's "block" method,
//    --recompute_num_layers): the other blocks keep everything, trading memory for the recompute's time.
//    set_recompute_modules (--recompute_modules layernorm / act / mlp) makes the blocks that keep their activations
//    drop the norms' outputs, silu(gate) * up or the whole MLP's intermediates and make them again (elementwise
//    passes; two products and swiglu) before their backward: keep what is cheap to keep, recompute what is cheap to
//    recompute. set_offload_layers(n) (--cpu_offloading_num_layers) moves n kept blocks' MLP intermediates to host
//    memory between their forward and backward instead. set_offload_frozen_layers(n) (--offload_frozen_layers, LoRA)
//    keeps the bottom n layers' frozen base matrices in host memory from their forward until the backward fetches
//    them back (model/frozen_stream.cpp). Every policy gives the same gradients bit for bit.
//  - Labels are already shifted: labels[t] is the token that must follow position t (-100: no loss), and
//    never cross a sequence boundary (shift_labels builds them from ids and a per-token loss mask).
//  - Parameter names are PEFT's saved names for LoRA and Hugging Face names for full fine-tuning, so gradients
//    and checkpoints compare directly with transformers + PEFT. LoRA parameters: lora_A / lora_B of each adapted
//    linear, its DoRA magnitude (weight norm recomputed from A and B once per micro-batch, detached, reused by the
//    checkpoint recompute), and the modules_to_save copies (embed_tokens first, lm_head last, as PEFT orders them).
//  - The embedding's lookup gradient skips config.pad_token_id (transformers builds nn.Embedding with
//    padding_idx = pad_token_id; PEFT's modules_to_save copy keeps it); a tied head's gradient still reaches that row.
//  - Sequence parallel (set_parallel with an SP group of P ranks, model/parallel.h): every rank of the group passes
//    the same micro-batch; it is padded to a multiple of P and this rank runs its 1/P of the tokens, exchanging heads
//    around attention. The returned StepStats and the parameter gradients cover this rank's tokens only: the caller
//    sums both over the group. Each rank draws the dropout masks of its rows of the one-process input (the mask's
//    map has the rank's first token as row offset), so SP equals one process with dropout too.
//  - Tensor parallel (set_parallel with a TP group of N ranks): the linears' weights, biases and LoRA factors are
//    replaced by this rank's shards (model/parallel.h: q/k/v/gate/up by output rows, o/down by input columns) and
//    each Parameter records its layout. A CausalLM sharded at load (CausalLM::shard_for_tensor_parallel, what
//    `swift sft` does) already holds only those shards of its frozen weights, so a rank keeps 1/N of them; it must
//    then be trained with the same rank of a group of the same size (checked). After the step's backward the caller sums the Partial gradients over the
//    group (reduce_tensor_parallel_gradients; with a gradient provider the model sums them per micro-batch, layer by
//    layer, before the backward hook), reduces everything over the ranks holding the same shards, and counts sharded
//    gradients once per shard in the norm. StepStats are whole on every rank of the group. The
//    embedding table and the LM head (and their modules_to_save copies, cut here when they hold every row even if
//    the model was sharded at load: swift sft makes them first; a tied head is the embedding's shard) are
//    split by vocabulary rows (VocabRows, Megatron's vocabulary parallelism; uneven shards when N does not divide V):
//    always under TP. DoRA: the magnitude of q/k/v/gate/up is split by rows with W (their weight norms are
//    row-local); o/down keep the whole magnitude (Partial gradient) and their norms' squares are all-reduced over the
//    group once per micro-batch (compute_dora_norms), as their outputs are; the initial magnitudes come from the whole
//    weights (create the adapters before sharding the model at load). LoRA dropout: q/k/v/gate/up see the whole
//    input (the one-process masks on every rank); o/down draw the masks of their block of input columns (map:
//    full_cols = the whole input width, col_offset = the rank's first column), so the sum over the group is the
//    one-process LoRA term.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/parallel.h"
#include "ops/offload.h"
#include "ops/ops.h"

namespace swift::model {

enum class TunerType { Lora, Full };
TunerType tuner_type_from_string(const std::string& name);  // lora | full (throws listing them)

struct Parameter {
  std::string name;  // PEFT saved name (LoRA) or Hugging Face name (full)
  Tensor value;      // F32, trainable
  Tensor grad;       // F32, same shape
  // Full fine-tuning's product weight (TrainableModel::refresh_product_weights): the copy of `value` the products read,
  // or undefined. An optimizer that writes it with the update sets product_current; the next forward then takes it as
  // is (and clears the flag) instead of casting `value` again.
  Tensor product{};
  bool product_current = false;
  // Tensor parallel: how value and grad lie over the group (model/parallel.h); Replicated without it.
  TensorParallelLayout tp = TensorParallelLayout::Replicated;
};

struct MicroBatch {
  Tensor ids;         // (T) I32
  Tensor positions;   // (T) I32, restarting per sequence
  Tensor cu_seqlens;  // (B+1) I32
  Tensor labels;      // (T) I32 shifted targets, -100 = ignored
};

// labels[t] = ids[t + 1] when loss_mask[t + 1] is set and t + 1 is in the same sequence, else -100.
//   ids: (T) I32; loss_mask: (T) U8 (1 = the token is a training target); cu_seqlens: (B+1) I32.
Tensor shift_labels(const Tensor& ids, const Tensor& loss_mask, const Tensor& cu_seqlens);

struct StepStats {
  double loss_sum = 0;  // summed token losses (natural log)
  int64_t tokens = 0;   // valid target tokens
  int64_t correct = 0;  // argmax == label
};

class TrainableModel {
 public:
  // LoRA: `lora` holds the adapters to train (from create_lora or lora_from_peft). Full: `lora` must be empty;
  // every weight gets an F32 master copy (tied embeddings stay one parameter).
  TrainableModel(CausalLM& model, TunerType type, LoraAdapters lora = {});
  TrainableModel(const TrainableModel&) = delete;  // layers point into lora_: never copied or moved
  TrainableModel& operator=(const TrainableModel&) = delete;

  TunerType type() const { return type_; }
  // Activation storage dtype: F32 on the CPU (the only choice there); on CUDA by default F16 when the model's
  // matrices are F16 (--torch_dtype float16: fp16 storage with fp32 accumulation; the trainer's loss scaling keeps
  // small gradients representable), else BF16; F32 for exactness checks (then a model placed with F32 matrices
  // computes as the CPU does, up to summation order). Gradients w.r.t. activations take the same dtype.
  void set_activation_dtype(DType dtype);
  DType activation_dtype() const { return act_dtype_; }
  // Tests: product weights (refresh_product_weights; packed q/k/v) also where they would not pay, e.g. F32 on the CPU.
  void force_product_weights(bool on) { force_product_weights_ = on; }
  // How many master tensors the last forward cast into their product copies (the others the optimizer had written).
  int64_t last_product_casts() const { return last_product_casts_; }
  // Whether the last forward ran layer i's q, k and v as one product.
  bool packs_qkv(int64_t layer) const { return qkv_packed(layer); }
  // The sequence- and tensor-parallel groups of this rank (not owned; see the head comment), once, before training
  // (passing the same groups again changes nothing). Throws when the model's heads or intermediate size cannot be
  // split over them, and for quantized base weights with tensor parallelism.
  void set_parallel(const ParallelGroups& groups);
  const ParallelGroups& parallel() const { return parallel_; }
  // Tensor parallel: sums the gradients of Partial parameters over the TP group (collective; no-op without TP).
  // Call once per optimizer step, after the last micro-batch's backward. With a gradient provider (ZeRO-2) it does
  // nothing: each backward sums a layer's Partial gradients right after that layer's backward, before the backward
  // hook reports the layer (so the data-parallel reduce-scatter of their bucket sees whole gradients).
  void reduce_tensor_parallel_gradients();
  Device device() const { return device_; }
  std::vector<Parameter>& parameters() { return params_; }
  int64_t trainable_count() const;
  void zero_grad();
  // zero_grad for a backward that comes next: full fine-tuning's plain linear weight gradients (most of the
  // gradient bytes) are not cleared; the next backward's weight-gradient product writes them (=) instead of adding
  // (+=), and every other gradient is zeroed as by zero_grad. Between this call and the end of the next
  // forward_backward those linear gradients hold stale values: call it only where nothing reads gradients before that
  // backward (the trainer, right after an update). A linear the backward does not reach is zeroed at the end of its
  // layer's backward. With a gradient provider, tensor parallelism or LoRA it is zero_grad. Same bits as zero_grad
  // (0 + x = x), but one pass over those gradients less (the memset) and no read of them in the product.
  void defer_zero_grad();
  // Called with i right after layer i's backward (L-1 .. 0), then with -1 after the embedding's: those parameters'
  // gradients are final for this micro-batch (data parallel starts reducing them). Empty: none.
  void set_backward_hook(std::function<void(int64_t layer)> hook) { backward_hook_ = std::move(hook); }
  // Gradient storage on demand (ZeRO-2's sharded gradients, train/data_parallel.h). With a provider the model keeps
  // no gradient of its own: set_gradient_provider releases every Parameter::grad, and right before the backward
  // first writes a parameter's gradient (the head stage before the loss: LM head, final norm and a tied embedding;
  // layer i before its backward; the embedding before its lookup's backward) an undefined grad is bound to
  // provider(index), a zeroed F32 tensor of the parameter's shape, in the Parameter and in the model's own handles.
  // The owner hands a gradient back with release_gradient(index) once it is final (its stage was reported through
  // the backward hook); the next backward asks for it again. nullptr: every gradient is allocated again (zeros) and
  // kept. With tensor parallelism: set after set_parallel (sharding rebinds gradients); the Partial gradients of
  // every micro-batch are then summed over the group stage by stage (reduce_tensor_parallel_gradients).
  void set_gradient_provider(std::function<Tensor(size_t param)> provider);
  void release_gradient(size_t param);
  // With gradient checkpointing, recompute only blocks 0 .. n-1 and keep the activations of the others; n < 0
  // (the default): every block recomputes.
  void set_recompute_layers(int64_t n) { recompute_layers_ = n; }
  int64_t recompute_layers() const { return recompute_layers_; }
  // Selective recompute (Megatron's --recompute_modules): what the blocks that keep their activations (all without
  // checkpointing, blocks n.. with set_recompute_layers(n)) drop after their forward and make again right before
  // their backward, with the same kernels and dropout masks: the same gradients bit for bit.
  struct RecomputeModules {
    bool layernorm = false;   // the two RMSNorm outputs (2 x tokens x hidden): an elementwise pass each, from the
                              // block input and the residual after attention (both kept)
    bool act = false;         // silu(gate) * up (tokens x intermediate_size): an elementwise pass from gate and up
    bool mlp = false;         // gate, up and silu(gate) * up (3 x tokens x intermediate_size, most of a block's
                              // activations): the gate and up products (LoRA included) and swiglu
    int64_t mlp_layers = -1;  // mlp only in the first n blocks that keep their activations (all when < 0)
  };
  void set_recompute_modules(const RecomputeModules& modules) { recompute_ = modules; }
  const RecomputeModules& recompute_modules() const { return recompute_; }
  // Activation offloading (Megatron's --cpu_offloading_num_layers): n of the blocks that keep their MLP intermediates
  // (not recomputed whole, not by the selective mlp recompute; never the last two, whose copies could not hide) send
  // gate, up (and silu(gate) * up when kept) to host memory during the forward and fetch them back two blocks ahead in
  // the backward (ops/offload.h: a copy stream and page-locked buffers on CUDA; the copies overlap the other blocks'
  // work). The n blocks are spread evenly over the candidates, so the copies keep pace with the forward. Same bits:
  // the bytes that come back are the bytes that left. 0 (the default): nothing leaves the device.
  void set_offload_layers(int64_t n) { offload_layers_ = n; }
  int64_t offload_layers() const { return offload_layers_; }
  // Host memory held by the offload buffers (page-locked on CUDA; reused by every step).
  int64_t offload_host_bytes() const { return offloader_ ? offloader_->host_bytes() : 0; }
  // Frozen-weight streaming (LoRA; model/frozen_stream.cpp): the base matrices of layers 0 .. n-1 (q, k, v, o, gate,
  // up, down; biases and norms stay) keep a copy in host memory (page-locked on CUDA) and leave the device between
  // their forward and their backward, when the step's memory peaks (the activations of every layer and the loss):
  // each layer's forward lets go of them, the backward copies them back `SWIFT_FROZEN_AHEAD` (default 2) layers ahead
  // on a copy stream (ops/offload.h) and keeps them until the next forward, which then finds them on the device. The
  // bottom layers are streamed because the backward reaches them last: their copies overlap the layers above. The
  // copies go only to the device (host-to-device copies do not slow the GPU's kernels on the H200 machines, the
  // copies to the host did: docs/PERFORMANCE.md run 9). Same bits: the products read the same bytes (DoRA: the
  // streamed layers' weight norms are computed in the forward, once their matrices are back). The CausalLM lends the
  // matrices (CausalLM::lend_layer_matrices) and gets them back from restore_frozen_layers() or the destructor.
  // Throws for full fine-tuning (it trains those matrices), tensor parallelism, or n outside [0, layers]. 0: nothing
  // streamed.
  void set_offload_frozen_layers(int64_t n);
  int64_t offload_frozen_layers() const { return static_cast<int64_t>(frozen_.size()); }
  void restore_frozen_layers();
  // Host memory of the streamed matrices' copies.
  int64_t frozen_host_bytes() const { return frozen_stream_ ? frozen_stream_->host_bytes() : 0; }
  ~TrainableModel();

  // Forward + backward of one micro-batch; gradients of grad_scale * (summed loss) are added to the parameters'.
  // dropout_seed picks the LoRA dropout masks of this micro-batch (0 with lora_dropout 0).
  StepStats forward_backward(const MicroBatch& batch, float grad_scale, uint64_t dropout_seed,
                             bool gradient_checkpointing);
  // Loss only (no dropout, no gradients).
  StepStats evaluate(const MicroBatch& batch);

  // The adapters (LoRA) or the base model's weights (full) now hold the trained values.
  const LoraAdapters& lora() const { return lora_; }
  // Full fine-tuning: the trained weights under Hugging Face names (F32), for saving.
  std::map<std::string, Tensor> full_weights() const;

 private:
  struct Linear {
    Tensor w, bias;            // the weight used in the forward (base dtype for LoRA, F32 master for full)
    Tensor w16;                // full, CUDA, 16-bit activations: w in their dtype (refresh_product_weights)
    Tensor grad_w, grad_bias;  // full only
    bool grad_w_stale = false;  // defer_zero_grad: grad_w still holds the last step's sums (the next product writes)
    const LoraLinear* lora = nullptr;
    Tensor grad_a, grad_b;     // LoRA only
    Tensor grad_m;             // DoRA only: the magnitude's gradient
  };
  struct Layer {
    Tensor input_norm, post_norm, q_norm, k_norm;              // weights used in the forward
    Tensor grad_input_norm, grad_post_norm, grad_q_norm, grad_k_norm;  // full only
    std::array<Linear, kLinearKinds> linears;
    // Packed q/k/v (full): one product for the three (packs_qkv). qkv16: (Hq*D + 2 Hkv*D, C) in the activation
    // dtype, whose row blocks are q's, k's and v's w16; qkv_bias: their F32 biases in a row (or undefined);
    // qkv_grad / qkv_grad_bias: F32 gradients whose row blocks are q's, k's and v's grad_w / grad_bias.
    Tensor qkv16, qkv_bias, qkv_grad, qkv_grad_bias;
  };
  struct Activations;  // one layer's saved forward state (training.cpp)

  // Full fine-tuning on CUDA with 16-bit activations: the products read the F32 master matrices in the activation
  // dtype. They are cast once per forward (run()), into the base weights' storage when it fits (the model's own
  // 16-bit weights, which then follow training), instead of in every product (forward, input gradient, recompute,
  // LM head). Same bits: a product converted its F32 weight with the same rounding. SWIFT_PRODUCT_WEIGHTS=0: off.
  void refresh_product_weights();
  // Whether layer i runs q, k and v as one product (and one input- and weight-gradient product): full fine-tuning
  // without tensor or sequence parallelism, product weights packed by refresh_product_weights, and gradients still
  // the row blocks of qkv_grad (a gradient provider or a reshard rebinds them). SWIFT_PACKED_QKV=0: never.
  bool qkv_packed(int64_t layer) const;
  // Full: q's, k's and v's gradients (and their biases') become row blocks of one buffer (Layer::qkv_grad).
  void pack_qkv_gradients(Layer& l);
  const Tensor& product_weight(const Linear& l) const { return l.w16.defined() ? l.w16 : l.w; }
  const Tensor& product_embedding() const { return embed16_.defined() ? embed16_ : embed_; }
  const Tensor& product_head() const { return head16_.defined() ? head16_ : lm_head_; }

  // block_recompute: a checkpointed block made again before its backward; x_out (the next block's saved input) is then
  // left unwritten where the down projection's output can be skipped (linear_rank_only). An undefined x_out is made
  // (T, C) when it is written.
  void layer_forward(int64_t layer, const MicroBatch& b, const Tensor& x_in, Activations& a, Tensor& x_out,
                     uint64_t dropout_seed, bool training, bool block_recompute = false) const;
  void layer_backward(int64_t layer, const MicroBatch& b, Activations& a, Tensor& dx, uint64_t dropout_seed);
  void linear_forward(int64_t layer, LinearKind kind, const Tensor& x, Tensor& y, bool accumulate, Activations& a,
                      uint64_t dropout_seed, bool training, bool b_product = true) const;
  // What the backward reads of a linear whose output is not needed: a LoRA linear's xa (and on a GPU its dropout's
  // keep bits), nothing of a linear without LoRA. False (nothing done) for DoRA, whose backward reads the product.
  bool linear_rank_only(int64_t layer, LinearKind kind, const Tensor& x, Activations& a, uint64_t dropout_seed,
                        bool training) const;
  // The LoRA dropout of a linear; on a GPU with its keep-bits cache (a's, allocated for x's shape).
  ops::Dropout lora_dropout(int64_t layer, LinearKind kind, const Tensor& x, Activations& a, uint64_t dropout_seed,
                            bool training) const;
  // y = residual + the linear's output (o, down onto the residual stream): a plain linear reads the residual as its
  // product's input (ops::linear_residual), an adapted one adds onto a copy of it.
  void linear_forward_residual(int64_t layer, LinearKind kind, const Tensor& x, const Tensor& residual, Tensor& y,
                               Activations& a, uint64_t dropout_seed, bool training) const;
  // The same for a plain LoRA linear whose B product goes inside its product (b_in_gemm): its xa pass, then
  // ops::lora_linear_residual_from_xa (the residual added in the product's fp32 sums, one rounding).
  void linear_residual_from_xa(int64_t layer, LinearKind kind, const Tensor& x, const Tensor& residual, Tensor& y,
                               Activations& a, uint64_t dropout_seed, bool training) const;
  // The xa passes of plain LoRA linears that read the same x (q, k, v; gate, up) in one op (ops::lora_xa_shared, one
  // pass over x on CUDA), their keep bits with them; linear_forward then takes their kept-xa path (rank_kept). False
  // (nothing done) unless every kind is plain LoRA; true with nothing to do where a recompute kept them all.
  bool shared_xa(int64_t layer, std::initializer_list<LinearKind> kinds, const Tensor& x, Activations& a,
                 uint64_t dropout_seed, bool training) const;
  // The swiglu of layer i's MLP (a.gate, a.up -> a.act) with down's dropout mask drawn in its pass into down's
  // keep bits (ops::swiglu_drawing_mask), where the backend runs that as one pass and down's xa pass will draw it
  // otherwise (a plain LoRA down, training with dropout on a GPU in BF16, not a recompute); false: nothing done.
  bool swiglu_draws_down_mask(int64_t layer, Activations& a, uint64_t seed, bool training) const;
  // The MLP's intermediates from a.h2; with a.rank_kept (a recompute) gate's and up's kept xa are used again.
  void mlp_forward(int64_t layer, Activations& a, uint64_t dropout_seed, bool training) const;
  // Whether linear `kind` of `layer` is plain LoRA and `a` holds its xa (and on a GPU with dropout its keep bits) for
  // `tokens` tokens: with Activations::rank_kept (a recompute) its xa pass is then skipped.
  bool rank_reusable(int64_t layer, LinearKind kind, const Activations& a, int64_t tokens, bool training) const;
  // Whether layer i's gate and up are both plain LoRA linears whose B products do not go inside their products
  // (b_in_gemm, for `tokens` rows): their B products are then added in the swiglu's pass (ops::swiglu_lora).
  bool mlp_b_folded(int64_t layer, int64_t tokens) const;
  // o's / down's B product added with the residual in one pass (ops::add_lora_residual) when that linear is plain
  // LoRA (not DoRA), unless SWIFT_LORA_FOLD_RESIDUAL=0; its factors from the forward's xa.
  bool residual_b_folded(int64_t layer, LinearKind kind) const;
  // ops::lora_b_product_in_gemm on the model's device for `tokens` rows, for a plain LoRA linear: its B product goes
  // inside its frozen product, so gate and up feed a plain swiglu and o / down take the residual in that product
  // (linear_residual_from_xa) instead of the folded passes above (layer_forward asks this first).
  bool b_in_gemm(int64_t layer, LinearKind kind, int64_t tokens) const;
  ops::LoraBProduct b_product_of(int64_t layer, LinearKind kind, const Activations& a) const;
  void apply_rope(Tensor& x, const MicroBatch& b, bool backward) const;
  // The batch's rope segments: fn(rows [t0, t1), their positions, frequencies), once for the whole batch, or once per
  // sequence where the frequencies depend on its length (dynamic NTK).
  using RopeSegmentFn = std::function<void(int64_t t0, int64_t t1, const Tensor& positions,
                                           const ops::RopeFrequencies& freqs)>;
  void rope_segments(const MicroBatch& b, const RopeSegmentFn& fn) const;
  // ops::rope_qkv over the batch's rope segments (packed q/k/v: q, k roped and v copied out of the packed rows, or
  // their gradients back into the packed gradient).
  void rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const MicroBatch& b, bool backward) const;
  // The LoRA dropout of one linear: its seed is a function of (step seed, layer, kind) only, and its map places this
  // rank's (tokens, input columns) block in the one-process input (sequence parallel: the rank's first token;
  // tensor parallel's o / down: the rank's first input column), so every rank draws the one-process masks.
  ops::Dropout dropout_for(uint64_t seed, int64_t layer, int kind, bool training, int64_t tokens) const;
  // An activation (act_dtype_: F32 on the CPU, BF16 / F16 / F32 on CUDA) or an F32 statistic (rstd, lse, LoRA's
  // xa) on the model's device.
  Tensor act(const Shape& shape) const;
  Tensor stat(const Shape& shape) const;
  // Sequence parallel: the rows of a per-token tensor of the padded batch that this rank runs (all rows otherwise).
  Tensor local_tokens(const Tensor& per_token) const;
  int32_t sp_pad_id() const;  // the id of the tokens that pad a micro-batch for sequence parallelism
  void shard_for_tensor_parallel();  // set_parallel with a TP group: parameters -> this rank's shards
  StepStats run(const MicroBatch& batch, float grad_scale, uint64_t dropout_seed, bool checkpoint, bool backward);
  void compute_dora_norms();
  // One layer's DoRA weight norms (compute_dora_norms' inner step): for every layer but the streamed frozen ones at
  // the step's start, and for those in the forward once their matrices are on the device.
  void compute_layer_dora_norms(int64_t layer);
  // Gradient provider: binds the undefined gradients first written at `stage` (layer index, kHead, or -1).
  void provide_gradients(int64_t stage);
  // Tensor parallel: all-reduces over the group the Partial gradients first written at `stage` (only with a gradient
  // provider: this micro-batch's gradients) or, with nullopt, every Partial gradient (the step's accumulated sums).
  void sum_partial_gradients(std::optional<int64_t> stage);
  void bind_gradient(size_t param, const Tensor& grad);
  // Whether the next weight-gradient product of L adds onto grad_w (false once after defer_zero_grad: it writes);
  // the deferred zero is then consumed.
  static bool take_accumulate_dw(Linear& L);
  // The same for packed q/k/v's one weight-gradient product: it writes only when all three were zeroed lazily (a mix
  // is zeroed first, then added onto).
  static bool take_accumulate_dw_qkv(Layer& l);
  // The end of layer l's backward: zeroes the deferred weight gradients its backward did not write.
  static void settle_deferred_zeros(Layer& l);

  CausalLM& model_;
  TunerType type_;
  LoraAdapters lora_;
  std::vector<Parameter> params_;
  std::vector<Layer> layers_;
  Tensor embed_, grad_embed_, final_norm_, grad_final_norm_, lm_head_, grad_lm_head_;
  Tensor embed16_, head16_;  // refresh_product_weights: the embedding's and the head's masters in 16 bits
  bool force_product_weights_ = false;
  int64_t last_product_casts_ = 0;
  bool tied_ = false;
  int64_t padding_id_ = -1;  // config.pad_token_id: the embedding row that gets no gradient from lookups
  std::vector<std::array<Tensor, kLinearKinds>> dora_norms_;  // [layer][kind] DoRA weight norms of this micro-batch
  Tensor dora_squares_;  // tensor parallel: the row-parallel linears' norms end to end (their dora_norms_ are views)
  Device device_;                           // the model's device: parameters, gradients and activations live here
  DType act_dtype_ = DType::F32;            // activation storage dtype (BF16 / F16 on CUDA, math in fp32)
  const MicroBatch* host_batch_ = nullptr;  // during run(): the host copy of the batch (rope reads positions)
  std::function<void(int64_t)> backward_hook_;  // set_backward_hook
  std::function<Tensor(size_t)> gradient_provider_;  // set_gradient_provider
  // Per parameter: the model's own copies of its gradient handle (grad_w, grad_a, grad_embed_, a tied
  // grad_lm_head_, ...), which follow Parameter::grad, and the backward stage that writes it first (layer index,
  // num_hidden_layers for the head, -1 for the embedding).
  std::vector<std::vector<Tensor*>> grad_handles_;
  std::vector<int64_t> first_grad_stage_;
  int64_t recompute_layers_ = -1;               // set_recompute_layers
  RecomputeModules recompute_;                  // set_recompute_modules
  int64_t offload_layers_ = 0;                  // set_offload_layers
  std::unique_ptr<ops::ActivationOffloader> offloader_;  // made by the first step that offloads
  // Frozen-weight streaming: per streamed layer, its seven matrices end to end in one device buffer (each at a
  // 256-byte boundary; undefined while only the host copy exists) and where each lies in it.
  struct FrozenLayer {
    Tensor device;  // U8
    std::array<size_t, kLinearKinds> offset{};
    std::array<Shape, kLinearKinds> shape;
    std::array<DType, kLinearKinds> dtype{};
  };
  std::vector<FrozenLayer> frozen_;                          // layers 0 .. frozen_.size() - 1
  std::unique_ptr<ops::ActivationOffloader> frozen_stream_;  // their host copies (resident slots = layer index)
  void frozen_prefetch(int64_t layer);  // starts layer's copy to the device unless it is there or on its way
  void frozen_acquire(int64_t layer);   // layer's matrices usable by the ops enqueued from now on (its linears' w)
  void frozen_release(int64_t layer);   // lets go of layer's device copy (its linears' w undefined)
  ParallelGroups parallel_;                 // sequence / tensor parallel groups (none by default)
  int64_t vocab_offset_ = 0;                // tensor parallel: the first vocabulary row of embed_ / lm_head_
};

}  // namespace swift::model
