// tests/gpu/test_cuda_vocab_shard.cpp — the CUDA vocabulary-parallel ops (ops.h: embedding_shard,
// embedding_shard_backward, cross_entropy_shard_stats, cross_entropy_shard_backward) against the CPU reference on
// every shard of an odd vocabulary (V = 1001 over 3 ranks: uneven rows), F32 and BF16 activations, with a small
// workspace bound so that the shard's logits take several row chunks. Label gpu: needs a CUDA device.
//
// Tolerances (relative norm, gpu_test_util's expect_close), as tests/gpu/test_cuda_cross_entropy.cpp:
//   lookups: exact copies (F32) or one bf16 rounding (1e-2); lookup gradients: 1e-5 (F32 sums in token order).
//   statistics (lse, label logit, max logit): 1e-5 (fp32 logits and lse); argmax exact for F32 activations.
//   dhidden and dhead: 1e-4 with F32 activations; 2e-2 / 1e-2 with BF16 (dz rounded to bf16 before its products).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cstring>
#include <random>

#include <fmt/format.h>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "model/parallel.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

Tensor labels_for(int64_t t, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> v(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) v[static_cast<size_t>(i)] = i % 7 == 1 ? -100 : static_cast<int32_t>(gen() % vocab);
  return Tensor::from_i32({t}, v);
}

TEST(CudaVocabShard, EmbeddingShardMatchesTheReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const int64_t V = 1001, C = 67, T = 129;
  const int N = 3;
  for (DType act : {DType::F32, DType::BF16}) {
    g_tag = std::string("embedding_shard ") + dtype_name(act);
    const Tensor ids = labels_for(T, V, 3);  // -100 is not an id: use the labels' valid ones as ids
    std::vector<int32_t> id(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) id[static_cast<size_t>(t)] = ids.data<int32_t>()[t] < 0 ? 5 : ids.data<int32_t>()[t];
    const Tensor ids_h = Tensor::from_i32({T}, id), ids_d = ids_h.to(Device::cuda());
    for (int r = 0; r < N; ++r) {
      const model::VocabRange range = model::vocab_shard_range(V, r, N);
      const Input table = make_weight({range.count, C}, DType::F32, 10 + r);
      Tensor ref = Tensor::empty({T, C}, DType::F32);
      ops::ref::embedding_shard(table.ref, ids_h, range.first, ref);
      DeviceOut out({T, C}, act);
      ops::embedding_shard(table.dev, ids_d, range.first, out.tensor);
      expect_close(out.fetch(), rounded(ref, act), act == DType::F32 ? 0.0 : 1e-2, "out");
      const Input dout = make_input({T, C}, act, 20 + r);
      Tensor dref = Tensor::zeros({range.count, C}, DType::F32);
      ops::ref::embedding_shard_backward(dout.ref, ids_h, range.first, dref, 5);
      DeviceOut dtable({range.count, C}, DType::F32);
      dtable.set(Tensor::zeros({range.count, C}, DType::F32));
      ops::embedding_shard_backward(dout.dev, ids_d, range.first, dtable.tensor, 5);
      expect_close(dtable.fetch(), dref, 1e-5, "dtable");
    }
  }
}

TEST(CudaVocabShard, CrossEntropyShardMatchesTheReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const int64_t V = 1001, C = 67, T = 200;
  const int N = 3;
  const float scale = 0.37f;
  for (DType act : {DType::F32, DType::BF16}) {
    g_tag = std::string("cross_entropy_shard ") + dtype_name(act);
    const Input hidden = make_input({T, C}, act, 31, -2.0f, 2.0f);
    const Tensor labels_h = labels_for(T, V, 32), labels_d = labels_h.to(Device::cuda());
    // Whole-vocabulary lse values for the backward (the op takes them as given): near this shard's logits, and far
    // above them (another shard holds a logit ~90: the one-pass gradient rescales such rows, E >= e^-52).
    std::vector<Tensor> lse_hs;
    for (float base : {7.0f, 90.0f}) {
      Tensor lse_h = Tensor::empty({T}, DType::F32);
      for (int64_t t = 0; t < T; ++t) lse_h.data<float>()[t] = base + 0.01f * static_cast<float>(t % 13);
      lse_hs.push_back(lse_h);
    }
    ops::CrossEntropyOptions opt;
    opt.device_workspace_bytes = 64 * 1024;  // several row chunks
    for (int r = 0; r < N; ++r) {
      const model::VocabRange range = model::vocab_shard_range(V, r, N);
      const Input head = make_weight({range.count, C}, act, 40 + r);
      Tensor rl = Tensor::empty({T}, DType::F32), rlab = Tensor::empty({T}, DType::F32), rmax = Tensor::empty({T}, DType::F32);
      Tensor rarg = Tensor::empty({T}, DType::I32);
      ops::ref::cross_entropy_shard_stats(hidden.ref, head.ref, labels_h, range.first, rl, rlab, rmax, rarg);
      DeviceOut l({T}, DType::F32), lab({T}, DType::F32), mx({T}, DType::F32);
      Tensor arg = Tensor::empty({T}, DType::I32, Device::cuda());
      ops::cross_entropy_shard_stats(hidden.dev, head.dev, labels_d, range.first, l.tensor, lab.tensor, mx.tensor, arg,
                                     opt);
      expect_close(l.fetch(), rl, 1e-5, "lse");
      expect_close(lab.fetch(), rlab, 1e-5, "label_logit");
      expect_close(mx.fetch(), rmax, 1e-5, "max_logit");
      if (act == DType::F32) {
        const Tensor arg_h = arg.to(Device::cpu());
        EXPECT_EQ(std::memcmp(arg_h.raw(), rarg.raw(), rarg.nbytes()), 0) << "argmax of shard " << r;
      }
      for (const Tensor& lse_h : lse_hs) {
        SCOPED_TRACE(fmt::format("shard {} of {}, whole lse from {}", r, N, lse_h.data<float>()[0]));
        Tensor dh_ref = Tensor::empty({T, C}, DType::F32), dw_ref = Tensor::zeros({range.count, C}, DType::F32);
        ops::ref::cross_entropy_shard_backward(hidden.ref, head.ref, labels_h, range.first, lse_h, scale, dh_ref,
                                               dw_ref);
        DeviceOut dh({T, C}, act), dw({range.count, C}, DType::F32);
        dw.set(Tensor::zeros({range.count, C}, DType::F32));
        ops::cross_entropy_shard_backward(hidden.dev, head.dev, labels_d, range.first, lse_h.to(Device::cuda()), scale,
                                          dh.tensor, dw.tensor, opt);
        expect_close(dh.fetch(), dh_ref, act == DType::F32 ? 1e-4 : 2e-2, "dhidden");
        expect_close(dw.fetch(), dw_ref, act == DType::F32 ? 1e-4 : 1e-2, "dhead");
      }
    }
  }
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
