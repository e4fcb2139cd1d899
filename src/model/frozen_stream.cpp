// model/frozen_stream.cpp — TrainableModel's frozen-weight streaming (training.h: set_offload_frozen_layers): the
// base matrices of the bottom layers wait in host memory while the step's memory peaks and come back for the backward.
//
// Invariants:
//  - A streamed layer's seven matrices live end to end in one device buffer (FrozenLayer::device, U8, each matrix at a
//    256-byte boundary) whose bytes equal the host copy made once by set_offload_frozen_layers (a resident slot of
//    frozen_stream_, ops/offload.h): every fetch copies those bytes back, so every product reads the bits it read
//    before streaming.
//  - Between frozen_acquire(i) and frozen_release(i) layer i's linears' `w` are views of that buffer; otherwise they
//    are undefined, and nothing reads them (run() acquires a layer before its forward, recompute and backward).
//  - The CausalLM holds none of the streamed matrices until restore_frozen_layers() (also run by the destructor)
//    gives them back on its device: the views of each layer's buffer, no copy.
//  - Memory order on CUDA: a fetch copies on the offloader's copy stream after the work enqueued so far (its new
//    buffer may be memory that earlier ops used), and acquire makes the op stream wait for the copy; a release drops
//    the buffer in the op stream's order (the allocator reuses it only for later work).
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "model/training.h"

namespace swift::model {

namespace {
constexpr size_t kMatrixAlign = 256;  // cuBLASLt / TMA alignment of each matrix inside a layer's buffer
size_t align_up(size_t n) { return (n + kMatrixAlign - 1) / kMatrixAlign * kMatrixAlign; }
}  // namespace

void TrainableModel::set_offload_frozen_layers(int64_t n) {
  const int64_t L = model_.config().num_hidden_layers;
  SWIFT_CHECK(n >= 0 && n <= L, "--offload_frozen_layers {}: give a number of layers from 0 to {} (this model's)", n,
              L);
  SWIFT_CHECK(n == 0 || type_ == TunerType::Lora, "--offload_frozen_layers {}: full fine-tuning trains the base "
              "matrices, which then cannot wait in host memory; use it with --tuner_type lora", n);
  SWIFT_CHECK(n == 0 || parallel_.tp_size() == 1, "--offload_frozen_layers {}: not with tensor parallelism "
              "(--tensor_model_parallel_size {}); leave one of them off", n, parallel_.tp_size());
  restore_frozen_layers();  // a second call starts from the model's own matrices (also after an evaluation let go)
  for (int64_t i = 0; i < n; ++i) {
    for (const Linear& lin : layers_[static_cast<size_t>(i)].linears) {
      SWIFT_CHECK(lin.w.defined() && !lin.w.storage()->mapped_for().is_cuda(),
                  "--offload_frozen_layers {}: layer {}'s matrices are not plain tensors on {}", n, i, device_.str());
    }
  }
  if (n == 0) return;
  frozen_stream_ = std::make_unique<ops::ActivationOffloader>(device_);
  frozen_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    FrozenLayer& f = frozen_[static_cast<size_t>(i)];
    const std::array<Tensor, kLinearKinds> m = model_.lend_layer_matrices(i);
    size_t bytes = 0;
    for (int k = 0; k < kLinearKinds; ++k) {
      const auto ks = static_cast<size_t>(k);
      f.offset[ks] = bytes;
      f.shape[ks] = m[ks].shape();
      f.dtype[ks] = m[ks].dtype();
      bytes = align_up(bytes + m[ks].nbytes());
    }
    f.device = Tensor::empty({static_cast<int64_t>(bytes)}, DType::U8, device_, MemoryCategory::Weights);
    Layer& l = layers_[static_cast<size_t>(i)];
    for (int k = 0; k < kLinearKinds; ++k) {
      const auto ks = static_cast<size_t>(k);
      Tensor view(f.device.storage(), f.device.byte_offset() + f.offset[ks], f.shape[ks], f.dtype[ks]);
      view.copy_from(m[ks]);
      l.linears[ks].w = view;  // the model's tensor goes when `m` does
    }
    frozen_stream_->keep_on_host(i, f.device);
  }
}

void TrainableModel::frozen_prefetch(int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(frozen_.size())) return;
  if (frozen_[static_cast<size_t>(layer)].device.defined()) return;
  frozen_stream_->prefetch(layer, MemoryCategory::Weights);
}

void TrainableModel::frozen_acquire(int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(frozen_.size())) return;
  FrozenLayer& f = frozen_[static_cast<size_t>(layer)];
  if (!f.device.defined()) f.device = frozen_stream_->take(layer, MemoryCategory::Weights);
  Layer& l = layers_[static_cast<size_t>(layer)];
  for (int k = 0; k < kLinearKinds; ++k) {
    const auto ks = static_cast<size_t>(k);
    l.linears[ks].w = Tensor(f.device.storage(), f.device.byte_offset() + f.offset[ks], f.shape[ks], f.dtype[ks]);
  }
}

void TrainableModel::frozen_release(int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(frozen_.size())) return;
  for (Linear& lin : layers_[static_cast<size_t>(layer)].linears) lin.w = Tensor();
  frozen_[static_cast<size_t>(layer)].device = Tensor();
}

void TrainableModel::restore_frozen_layers() {
  for (int64_t i = 0; i < static_cast<int64_t>(frozen_.size()); ++i) {
    frozen_acquire(i);  // fetched back where the last forward let it go
    std::array<Tensor, kLinearKinds> m;
    const Layer& l = layers_[static_cast<size_t>(i)];
    for (int k = 0; k < kLinearKinds; ++k) m[static_cast<size_t>(k)] = l.linears[static_cast<size_t>(k)].w;
    // The views of the layer's buffer become the model's matrices (the buffer lives on in them); the linears keep
    // the same views.
    frozen_[static_cast<size_t>(i)].device = Tensor();
    model_.restore_layer_matrices(i, m);
  }
  frozen_.clear();
  frozen_stream_.reset();  // waits for its copies
}

TrainableModel::~TrainableModel() {
  try {
    restore_frozen_layers();
  } catch (const std::exception& e) {  // a destructor must not throw: the model stays without those layers
    std::fprintf(stderr, "warning: frozen-weight streaming: the base matrices could not be given back to the model: "
                 "%s\n", e.what());
  }
}

}  // namespace swift::model
