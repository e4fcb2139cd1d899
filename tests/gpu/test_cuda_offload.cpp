// tests/gpu/test_cuda_offload.cpp — activation offloading on CUDA (ops/offload.h): the copy stream and the op stream
// ordered by events. The bytes that come back are the bytes that left even when the op stream reuses the retired
// memory at once (kernels writing new tensors over it), with several copies in flight and a slot taken back before it
// was retired; and training a 6-layer model with LoRA dropout in BF16 with offloaded blocks gives the bits of keeping
// everything, with a lower device peak. Frozen-weight streaming (set_offload_frozen_layers): the same bits and the
// matrices off the device between forward and backward. Label gpu; compiled only in CUDA builds.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/training.h"
#include "ops/backends.h"
#include "ops/offload.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "train/parallel_test_util.h"

namespace swift::test {
namespace {

TEST(CudaOffload, BytesComeBackWhileTheOpStreamReusesTheMemory) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  const Device cuda = Device::cuda();
  ops::ActivationOffloader off(cuda);
  std::vector<Tensor> want;
  for (int round = 0; round < 2; ++round) {  // the second round reuses the host buffers
    want.clear();
    for (int slot = 0; slot < 6; ++slot) {
      const Shape shape = {1000 + 37 * slot, 513};
      want.push_back(random_tensor(shape, slot % 2 ? DType::BF16 : DType::F32, 100 * round + slot));
      off.store(slot, want.back().to(cuda, MemoryCategory::Activations));
      off.retire(2);  // two in flight: the others' memory goes back while their copies may still run
      // New tensors over the retired memory, written by kernels on the op stream at once.
      Tensor a = random_tensor({1000, 513}, DType::F32, 7).to(cuda), b = Tensor::empty({1000, 513}, DType::F32, cuda);
      ops::add(a, a, b);
      ops::add(b, a, a);
    }
    off.retire(0);
    Tensor early = off.take(5);  // was in flight until the retire above: back from the host
    for (int slot = 0; slot < 5; ++slot) off.prefetch(slot);
    for (int slot = 4; slot >= 0; --slot) {
      Tensor junk = random_tensor({2000, 513}, DType::F32, 9).to(cuda);  // the op stream keeps allocating
      ops::add(junk, junk, junk);
      const Tensor back = off.take(slot).to(Device::cpu());
      ASSERT_EQ(back.shape(), want[static_cast<size_t>(slot)].shape());
      EXPECT_EQ(std::memcmp(back.raw(), want[static_cast<size_t>(slot)].raw(), back.nbytes()), 0) << "slot " << slot;
    }
    const Tensor back = early.to(Device::cpu());
    EXPECT_EQ(std::memcmp(back.raw(), want[5].raw(), back.nbytes()), 0) << "slot 5";
  }
  // Taken back while still held (never retired): the tensor itself.
  Tensor t = random_tensor({64, 64}, DType::F32, 3).to(cuda);
  off.store(9, t);
  EXPECT_EQ(off.take(9).raw(), t.raw());
}

TEST(CudaOffload, TrainingWithOffloadedBlocksGivesTheSameBits) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  TinyModelSpec spec;
  spec.layers = 6;
  spec.hidden = 64;
  spec.intermediate = 176;
  auto lm = tiny_model(spec);
  lm->place(Device::cuda(), DType::BF16);
  model::LoraAdapters lora = random_lora(lm->config());
  lora.dropout = 0.25f;
  model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(lora));
  const model::MicroBatch b = random_micro_batch({300, 211, 64}, lm->config().vocab_size, 8);
  constexpr int kActivations = static_cast<int>(MemoryCategory::Activations);
  auto run = [&](int64_t offload, std::vector<Tensor>& grads) {
    tm.set_offload_layers(offload);
    tm.zero_grad();
    memory_reset_peaks(1);
    const int64_t before = memory_stats(1).current[kActivations];
    tm.forward_backward(b, 1.0f / 500.0f, 31, false);
    grads.clear();
    for (const model::Parameter& p : tm.parameters()) grads.push_back(p.grad.to(Device::cpu()));
    return memory_stats(1).peak[kActivations] - before;
  };
  std::vector<Tensor> kept, offloaded;
  const int64_t keep_peak = run(0, kept);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const int64_t off_peak = run(100, offloaded);  // the 4 candidates (the last two blocks stay)
    ASSERT_EQ(kept.size(), offloaded.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_EQ(std::memcmp(kept[i].raw(), offloaded[i].raw(), kept[i].nbytes()), 0) << tm.parameters()[i].name;
    }
    const int64_t one_mlp = 2 * 575 * spec.intermediate * 2;  // gate and up, BF16
    EXPECT_LE(off_peak, keep_peak - 3 * one_mlp) << off_peak << " vs " << keep_peak;
  }
  EXPECT_GT(tm.offload_host_bytes(), 0);
}

// Frozen-weight streaming (set_offload_frozen_layers) on CUDA, LoRA and DoRA: the copies back run on the offloader's
// copy stream, ordered with the op stream by events; the bits of keeping every matrix, step after step, and the
// streamed layers' matrices off the device from their forward until the backward fetches them two layers ahead.
TEST(CudaOffload, TrainingWithStreamedFrozenLayersGivesTheSameBits) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  TinyModelSpec spec;
  spec.layers = 6;
  spec.hidden = 64;
  spec.intermediate = 176;
  for (bool dora : {false, true}) {
    SCOPED_TRACE(dora ? "DoRA" : "LoRA");
    auto lm = tiny_model(spec);
    lm->place(Device::cuda(), DType::BF16);
    const io::ModelConfig& c = lm->config();
    model::LoraSettings ls;
    ls.rank = 4;
    ls.dropout = 0.25;
    ls.init_weights = "false";  // random A and B: every gradient non-zero
    ls.seed = 3;
    ls.use_dora = dora;
    model::TrainableModel tm(*lm, model::TunerType::Lora, model::create_lora(c, ls, &lm->weights()));
    const model::MicroBatch b = random_micro_batch({300, 211, 64}, c.vocab_size, 8);
    constexpr int kWeights = static_cast<int>(MemoryCategory::Weights);
    std::vector<int64_t> at_hook(static_cast<size_t>(c.num_hidden_layers), -1);
    tm.set_backward_hook([&](int64_t layer) {
      if (layer >= 0) at_hook[static_cast<size_t>(layer)] = memory_stats(1).current[kWeights];
    });
    auto run = [&](std::vector<Tensor>& grads) {
      tm.zero_grad();
      tm.forward_backward(b, 1.0f / 500.0f, 31, false);
      grads.clear();
      for (const model::Parameter& p : tm.parameters()) grads.push_back(p.grad.to(Device::cpu()));
    };
    std::vector<Tensor> kept;
    run(kept);  // a first step makes DoRA's norm buffers (Weights), before the counts below
    // The adapters change, as after an optimizer step, and the streamed steps run before the reference: a DoRA norm
    // left from the step above would show.
    for (model::Parameter& p : tm.parameters()) {
      if (p.name.find("lora_B") == std::string::npos) continue;
      Tensor h = p.value.to(Device::cpu());
      for (int64_t e = 0; e < h.numel(); ++e) h.data<float>()[e] *= 1.0625f;
      p.value.copy_from(h);
    }
    constexpr int64_t n = 4, ahead = 2;
    tm.set_offload_frozen_layers(n);
    const int64_t C = c.hidden_size, F = c.intermediate_size, q = c.num_attention_heads * c.head_dim,
                  kv = c.num_key_value_heads * c.head_dim;
    int64_t lb = 0;  // one layer's matrices, BF16, each at a 256-byte boundary
    for (int64_t e : {q * C, kv * C, kv * C, C * q, F * C, F * C, C * F}) lb = (lb + e * 2 + 255) / 256 * 256;
    std::vector<std::vector<Tensor>> streamed(3);
    for (int repeat = 0; repeat < 3; ++repeat) {
      SCOPED_TRACE("step " + std::to_string(repeat));
      const int64_t start = memory_stats(1).current[kWeights];
      run(streamed[static_cast<size_t>(repeat)]);
      for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        EXPECT_EQ(at_hook[static_cast<size_t>(i)], start - std::max<int64_t>(0, std::min(n, i - ahead)) * lb)
            << "layer " << i;
      }
    }
    EXPECT_EQ(tm.frozen_host_bytes(), n * lb);
    tm.set_backward_hook(nullptr);
    tm.set_offload_frozen_layers(0);
    EXPECT_EQ(lm->lent_layers(), 0);
    run(kept);  // the reference: every matrix on the device
    for (const std::vector<Tensor>& got : streamed) {
      ASSERT_EQ(kept.size(), got.size());
      for (size_t i = 0; i < kept.size(); ++i) {
        EXPECT_EQ(std::memcmp(kept[i].raw(), got[i].raw(), kept[i].nbytes()), 0) << tm.parameters()[i].name;
      }
    }
  }
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
