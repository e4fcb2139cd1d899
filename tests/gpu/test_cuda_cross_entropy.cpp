// tests/gpu/test_cuda_cross_entropy.cpp — CUDA LM head + cross-entropy and token log-probabilities (ops.h:
// cross_entropy, token_logprobs, token_logprobs_backward) against the CPU reference (ops::ref), including odd shapes
// run with a small workspace bound so that they take several row chunks and several converted head pieces; and an
// opt-in timing at the Qwen2.5-7B shape (SWIFT_GPU_TIMING=1). Label gpu: needs a CUDA device.
//
// Invariants:
//  - Fresh seeded inputs per case, odd shapes (V = 1001, T = 777, C = 67 / 200: multiples of nothing). BF16
//    activations are compared with the reference fed the same bf16-rounded values as F32 (it computes in double).
//  - Outputs start as NaN inside guarded device storage (every element written, nothing outside it); dhead starts
//    random (it accumulates).
//  - Tolerances (relative norm ||out - ref|| / ||ref|| and gpu_test_util's element-wise bound):
//      loss_sum: 1e-5 relative (fp32 logits and lse, fp64 sum); 1e-2 where BF16 activations meet a F32/F16 head
//        (the head is rounded to bf16, documented in ops_cross_entropy.cpp). tokens: exact; correct: exact unless
//        the head was rounded (rounding may move a near-tie).
//      F32 activations: dhidden and dhead 1e-4 (sums of V or T fp32 products), logp 1e-5.
//      BF16 activations: dhidden 2e-2 (dz rounded to bf16 before its product; one pass: P rounded), dhead 1e-2
//        (one pass: P and the scaled hidden rows rounded), logp 1e-5.
//  - The gradient cases run with the one-pass gradient (the default) and the two-pass form (set_ce_one_pass(false)).
//  - Workspace: with a bound B the peak of the Workspace category during a call stays under 2 B (logits block +
//    converted head) plus the O(T C) and O(T) buffers; the cases choose B so that T x V x 4 bytes exceeds that.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels_cross_entropy.cuh"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

const char* name(DType d) { return dtype_name(d); }

Tensor make_labels(int64_t t, int64_t vocab, uint32_t seed, int every_ignored) {
  std::vector<int32_t> v(static_cast<size_t>(t));
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t; ++i) {
    v[static_cast<size_t>(i)] = (every_ignored > 0 && i % every_ignored == 1) ? -100 : static_cast<int32_t>(gen() % vocab);
  }
  return Tensor::from_i32({t}, v);
}

// Bound B that holds `rows` fp32 logits rows of a V-row head (the op pads rows to a multiple of 4 columns).
int64_t budget_for_rows(int64_t rows, int64_t vocab) { return rows * ((vocab + 3) / 4 * 4) * 4; }

// Largest Workspace bytes the call may add: 2 B (logits block, converted head) + compacted hidden rows, the F32
// dhidden accumulator and the one-pass gradient's scaled hidden rows (<= T x C x 4 each) and eight per-token arrays,
// plus 16 KiB of slack for one-element buffers.
int64_t workspace_bound(int64_t budget, int64_t t, int64_t c) {
  return 2 * budget + t * c * (4 + 4 + 4) + 8 * 4 * t + 16 * 1024;
}

// Runs body with the one-pass gradient (the default), then with the two-pass form (SWIFT_CE_ONE_PASS=0); the
// process default (one pass) is restored.
// g_pass_tag names the form in the Summary's rows.
std::string g_pass_tag;
template <typename Body>
void for_one_and_two_pass(Body&& body) {
  for (bool one_pass : {true, false}) {
    SCOPED_TRACE(one_pass ? "one-pass gradient" : "two-pass gradient");
    ops::cuda::set_ce_one_pass(one_pass);
    g_pass_tag = one_pass ? "" : " (2 pass)";
    body();
  }
  ops::cuda::set_ce_one_pass(true);
  g_pass_tag.clear();
}

struct Case {
  int64_t t, c, v;
  int ignored;             // every `ignored`-th token (from position 1) is ignore_index; 0: none
  int64_t budget_rows = 0;  // 0: the backend's default bound
};

void check_cross_entropy(const Case& cs, DType act, DType hd, bool want_dh, bool want_dw, uint32_t& seed) {
  g_tag = std::string("cross_entropy ") + name(act) + g_pass_tag;
  ops::CrossEntropyOptions options;
  options.device_workspace_bytes = cs.budget_rows > 0 ? budget_for_rows(cs.budget_rows, cs.v) : 0;
  SCOPED_TRACE(fmt::format("T={} C={} V={} act={} head={} dhidden={} dhead={} B={}", cs.t, cs.c, cs.v, name(act),
                           name(hd), want_dh, want_dw, options.device_workspace_bytes));
  Input hidden = make_input({cs.t, cs.c}, act, ++seed, -2.0f, 2.0f);
  Input head = make_weight({cs.v, cs.c}, hd, ++seed, -1.0f, 1.0f);
  const Tensor labels = make_labels(cs.t, cs.v, ++seed, cs.ignored);
  const Tensor labels_dev = labels.to(Device::cuda());
  const float grad_scale = 1.0f / 37.0f;
  DeviceOut dh({cs.t, cs.c}, act), dw({cs.v, cs.c}, DType::F32);
  Tensor dh_ref = Tensor::empty({cs.t, cs.c}, DType::F32);
  Tensor dw_ref = random_tensor({cs.v, cs.c}, DType::F32, ++seed);
  dw.set(dw_ref);
  Tensor none, n1, n2;
  const int64_t ws_before = memory_stats(1).current[static_cast<int>(MemoryCategory::Workspace)];
  memory_reset_peaks(1);
  const ops::CrossEntropyStats got = ops::cross_entropy(hidden.dev, head.dev, labels_dev, grad_scale,
                                                        want_dh ? dh.tensor : none, want_dw ? dw.tensor : none, options);
  const int64_t ws_peak = memory_stats(1).peak[static_cast<int>(MemoryCategory::Workspace)] - ws_before;
  const ops::CrossEntropyStats want = ops::ref::cross_entropy(hidden.ref, head.ref, labels, grad_scale,
                                                              want_dh ? dh_ref : n1, want_dw ? dw_ref : n2);
  EXPECT_EQ(got.tokens, want.tokens);
  const bool head_rounded = act == DType::BF16 && hd != DType::BF16;
  const double loss_tol = head_rounded ? 1e-2 : 1e-5;
  EXPECT_NEAR(got.loss_sum, want.loss_sum, loss_tol * std::max(1.0, std::fabs(want.loss_sum)));
  if (!head_rounded) {
    EXPECT_EQ(got.correct, want.correct);
  }
  if (want_dh) expect_close(dh.fetch(), dh_ref, act == DType::F32 ? 1e-4 : 2e-2, "dhidden");
  expect_close(dw.fetch(), dw_ref, act == DType::F32 ? 1e-4 : 1e-2, "dhead");
  if (cs.budget_rows > 0) {
    const int64_t bound = workspace_bound(options.device_workspace_bytes, cs.t, cs.c);
    EXPECT_LE(ws_peak, bound) << "workspace peak " << ws_peak << " bytes";
    EXPECT_LT(bound, cs.t * cs.v * 4) << "the case must be able to tell a bounded workspace from (T, V) logits";
  }
}

// ---- cross_entropy ------------------------------------------------------------------------------------------------
TEST(OpsCudaCrossEntropy, MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // The default bound: one row chunk each. V = 40000 and 5003: rows of several float4 tiles and a padded tail.
  const Case cases[] = {{1, 1, 1, 0}, {13, 7, 301, 3}, {67, 45, 40000, 4}, {300, 96, 5003, 0}};
  uint32_t seed = 3000;
  for_one_and_two_pass([&] {
    int variant = 0;
    for (const Case& cs : cases) {
      for (DType act : {DType::F32, DType::BF16}) {
        for (DType hd : {DType::F32, DType::BF16, DType::F16}) {
          ++variant;
          check_cross_entropy(cs, act, hd, variant % 3 != 2, variant % 3 != 1, seed);
        }
      }
    }
  });
}

TEST(OpsCudaCrossEntropy, SeveralRowChunksAndHeadPieces) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // B = 96 logits rows: 583 valid tokens -> 7 chunks of 84 (the last 79); 777 -> 9 chunks of 87 (the last 81).
  // C = 67: a converted head (134 / 268 KB) fits B (386 KB) and is converted once; C = 200 (400 / 800 KB) does not:
  // 2 or 3 converted pieces per product. No token ignored: dhidden is written straight (when the head is one piece).
  const Case cases[] = {{777, 67, 1001, 4, 96}, {777, 200, 1001, 0, 96}, {777, 67, 1001, 0, 96}};
  uint32_t seed = 7000;
  for_one_and_two_pass([&] {
    for (const Case& cs : cases) {
      for (DType act : {DType::F32, DType::BF16}) {
        for (DType hd : {DType::F32, DType::BF16, DType::F16}) {
          check_cross_entropy(cs, act, hd, true, false, seed);  // LoRA: frozen head
          check_cross_entropy(cs, act, hd, true, true, seed);   // full fine-tuning
        }
        check_cross_entropy(cs, act, act, false, false, seed);  // loss only
      }
    }
  });
}

// The one-pass gradient's shift: tiles of 4,096 logits; rows 5000, 20000 and 39000 of the head give logits of 50,
// 110 and 170 times the token's hidden scale, |z| < 0.1 elsewhere. At scale 1 the first tile's shift (~0.1) moves
// to 50 in the second tile, then to 110 and to 170 (each more than 40 above it), rescaling what the row has written
// so far; smaller scales move it fewer times or never; a negative scale puts the large logits at the bottom. The
// results are those of the reference and of the two-pass form (tolerances as check_cross_entropy).
TEST(OpsCudaCrossEntropy, OnePassShiftFollowsLargeLogitsLaterInTheRow) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t c = 8, vocab = 40000;
  const std::vector<float> scales = {1.0f, 0.5f, 0.25f, 1.0f, -1.0f, 0.75f, 1.0f, 0.375f, 0.0625f};
  const std::vector<int32_t> label_ids = {5000, 39000, 20000, 7, 39000, 123, 20000, 39999, 5000};
  const int64_t t = static_cast<int64_t>(scales.size());
  Tensor head_f32 = random_tensor({vocab, c}, DType::F32, 91, -0.0125f, 0.0125f);
  for (const auto& [row, level] : {std::pair<int64_t, float>{5000, 50.0f}, {20000, 110.0f}, {39000, 170.0f}}) {
    for (int64_t e = 0; e < c; ++e) static_cast<float*>(head_f32.raw())[row * c + e] = level / static_cast<float>(c);
  }
  Tensor hidden_f32 = Tensor::empty({t, c}, DType::F32);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t e = 0; e < c; ++e) static_cast<float*>(hidden_f32.raw())[i * c + e] = scales[static_cast<size_t>(i)];
  }
  const Tensor labels = Tensor::from_i32({t}, label_ids);
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(name(act));
    g_tag = std::string("cross_entropy shift ") + name(act);
    const Tensor head_ref = rounded(head_f32, act), hidden_ref = rounded(hidden_f32, act);
    const Tensor head_dev = (act == DType::F32 ? head_f32 : head_f32.to_dtype(act)).to(Device::cuda());
    const Tensor hidden_dev = (act == DType::F32 ? hidden_f32 : hidden_f32.to_dtype(act)).to(Device::cuda());
    const float grad_scale = 1.0f / 9.0f;
    Tensor dh_ref = Tensor::empty({t, c}, DType::F32), dw_ref = Tensor::zeros({vocab, c}, DType::F32);
    const ops::CrossEntropyStats want = ops::ref::cross_entropy(hidden_ref, head_ref, labels, grad_scale, dh_ref, dw_ref);
    for_one_and_two_pass([&] {
      g_tag = std::string("cross_entropy shift ") + name(act) + g_pass_tag;
      DeviceOut dh({t, c}, act), dw({vocab, c}, DType::F32);
      dw.set(Tensor::zeros({vocab, c}, DType::F32));
      const ops::CrossEntropyStats got =
          ops::cross_entropy(hidden_dev, head_dev, labels.to(Device::cuda()), grad_scale, dh.tensor, dw.tensor);
      EXPECT_EQ(got.tokens, t);
      EXPECT_EQ(got.correct, want.correct);
      EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::fabs(want.loss_sum));
      expect_close(dh.fetch(), dh_ref, act == DType::F32 ? 1e-4 : 2e-2, "dhidden");
      expect_close(dw.fetch(), dw_ref, act == DType::F32 ? 1e-4 : 1e-2, "dhead");
    });
  }
}

TEST(OpsCudaCrossEntropy, DeterministicAcrossRuns) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t t = 301, c = 45, vocab = 1001;
  Input hidden = make_input({t, c}, DType::BF16, 11, -2.0f, 2.0f);
  Input head = make_weight({vocab, c}, DType::BF16, 12);
  const Tensor labels = make_labels(t, vocab, 13, 5).to(Device::cuda());
  ops::CrossEntropyOptions options;
  options.device_workspace_bytes = budget_for_rows(50, vocab);
  Tensor first_dh, first_dw;
  double first_loss = 0.0;
  for (int run = 0; run < 2; ++run) {
    Tensor dh = Tensor::empty({t, c}, DType::BF16, Device::cuda());
    Tensor dw = Tensor::zeros({vocab, c}, DType::F32, Device::cuda());
    const ops::CrossEntropyStats st = ops::cross_entropy(hidden.dev, head.dev, labels, 0.5f, dh, dw, options);
    if (run == 0) {
      first_dh = dh.to(Device::cpu());
      first_dw = dw.to(Device::cpu());
      first_loss = st.loss_sum;
    } else {
      EXPECT_EQ(st.loss_sum, first_loss);
      EXPECT_TRUE(bit_equal(dh.to(Device::cpu()), first_dh));
      EXPECT_TRUE(bit_equal(dw.to(Device::cpu()), first_dw));
    }
  }
}

TEST(OpsCudaCrossEntropy, ArgmaxTiesAndEdgeCases) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // Rows 3, 10, 17000 and 33000 of the head are equal and give the largest logit: argmax is 3 (first maximal
  // index, across the threads of a row block). Labels 3 count as correct, labels 10 / 17000 do not.
  const int64_t t = 5, c = 8, vocab = 40000;
  Tensor head = random_tensor({vocab, c}, DType::F32, 77, -0.1f, 0.1f);
  for (int64_t row : {3, 10, 17000, 33000}) {
    for (int64_t e = 0; e < c; ++e) static_cast<float*>(head.raw())[row * c + e] = 1.0f;
  }
  Tensor hidden = Tensor::from_f32({t, c}, std::vector<float>(static_cast<size_t>(t * c), 0.5f));
  const Tensor labels = Tensor::from_i32({t}, {3, 10, 17000, 3, 33000});
  Tensor none;
  const ops::CrossEntropyStats got =
      ops::cross_entropy(hidden.to(Device::cuda()), head.to(Device::cuda()), labels.to(Device::cuda()), 1.0f, none, none);
  const ops::CrossEntropyStats want = ops::ref::cross_entropy(hidden, head, labels, 1.0f, none, none);
  EXPECT_EQ(want.correct, 2);
  EXPECT_EQ(got.correct, 2);
  EXPECT_EQ(got.tokens, 5);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::fabs(want.loss_sum));

  // Every token ignored: stats zero, dhidden all zero, dhead unchanged.
  const Tensor ignored = Tensor::from_i32({t}, {-100, -100, -100, -100, -100});
  DeviceOut dh({t, c}, DType::F32), dw({vocab, c}, DType::F32);
  Tensor dw0 = random_tensor({vocab, c}, DType::F32, 78);
  dw.set(dw0);
  const ops::CrossEntropyStats empty = ops::cross_entropy(hidden.to(Device::cuda()), head.to(Device::cuda()),
                                                          ignored.to(Device::cuda()), 1.0f, dh.tensor, dw.tensor);
  EXPECT_EQ(empty.tokens, 0);
  EXPECT_EQ(empty.correct, 0);
  EXPECT_EQ(empty.loss_sum, 0.0);
  Tensor dh_got = dh.fetch();
  for (int64_t i = 0; i < dh_got.numel(); ++i) ASSERT_EQ(dh_got.item(i), 0.0) << i;
  EXPECT_TRUE(bit_equal(dw.fetch(), dw0));

  // A label outside the vocabulary is refused by name and position; so is a negative workspace bound.
  const Tensor bad = Tensor::from_i32({t}, {1, 2, 40000, 3, 4});
  EXPECT_TRUE(throws_error(
      [&] {
        ops::cross_entropy(hidden.to(Device::cuda()), head.to(Device::cuda()), bad.to(Device::cuda()), 1.0f, none, none);
      },
      {"cross_entropy", "label 40000 at position 2"}));
  ops::CrossEntropyOptions negative;
  negative.device_workspace_bytes = -1;
  EXPECT_TRUE(throws_error(
      [&] {
        ops::cross_entropy(hidden.to(Device::cuda()), head.to(Device::cuda()), labels.to(Device::cuda()), 1.0f, none,
                           none, negative);
      },
      {"cross_entropy", "device_workspace_bytes = -1"}));
}

// ---- token_logprobs (+ backward) ----------------------------------------------------------------------------------
TEST(OpsCudaCrossEntropy, TokenLogprobsForwardAndBackward) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // The last case runs in 6 row chunks (B = 100 logits rows; 622 valid tokens).
  const Case cases[] = {{1, 3, 2, 0}, {29, 33, 20001, 3}, {130, 64, 3001, 5}, {777, 67, 1001, 5, 100}};
  uint32_t seed = 5000;
  for_one_and_two_pass([&] {
    for (const Case& cs : cases) {
      for (DType act : {DType::F32, DType::BF16}) {
        const DType hd = act;  // the model's case: head in the activation dtype
        g_tag = std::string("token_logprobs ") + name(act) + g_pass_tag;
        ops::CrossEntropyOptions options;
        options.device_workspace_bytes = cs.budget_rows > 0 ? budget_for_rows(cs.budget_rows, cs.v) : 0;
        SCOPED_TRACE(
            fmt::format("T={} C={} V={} act={} B={}", cs.t, cs.c, cs.v, name(act), options.device_workspace_bytes));
        Input hidden = make_input({cs.t, cs.c}, act, ++seed, -2.0f, 2.0f);
        Input head = make_weight({cs.v, cs.c}, hd, ++seed);
        const Tensor labels = make_labels(cs.t, cs.v, ++seed, cs.ignored);
        const Tensor labels_dev = labels.to(Device::cuda());
        DeviceOut logp({cs.t}, DType::F32);
        Tensor logp_ref = Tensor::empty({cs.t}, DType::F32);
        ops::token_logprobs(hidden.dev, head.dev, labels_dev, logp.tensor, options);
        ops::ref::token_logprobs(hidden.ref, head.ref, labels, logp_ref);
        Tensor logp_got = logp.fetch();
        expect_close(logp_got, logp_ref, 1e-5, "logp");
        for (int64_t i = 0; i < cs.t; ++i) {
          if (labels.data<int32_t>()[i] == -100) {
            EXPECT_EQ(logp_got.item(i), 0.0) << "ignored token " << i;
          }
        }
        // Backward; dlogp entries of ignored tokens are NaN (must not be read).
        Tensor dlogp = random_tensor({cs.t}, DType::F32, ++seed);
        for (int64_t i = 0; i < cs.t; ++i) {
          if (labels.data<int32_t>()[i] == -100) static_cast<float*>(dlogp.raw())[i] = std::nanf("");
        }
        DeviceOut dh({cs.t, cs.c}, act), dw({cs.v, cs.c}, DType::F32);
        Tensor dh_ref = Tensor::empty({cs.t, cs.c}, DType::F32);
        Tensor dw_ref = random_tensor({cs.v, cs.c}, DType::F32, ++seed);
        dw.set(dw_ref);
        ops::token_logprobs_backward(hidden.dev, head.dev, labels_dev, dlogp.to(Device::cuda()), dh.tensor, dw.tensor,
                                     options);
        ops::ref::token_logprobs_backward(hidden.ref, head.ref, labels, dlogp, dh_ref, dw_ref);
        expect_close(dh.fetch(), dh_ref, act == DType::F32 ? 1e-4 : 2e-2, "dhidden");
        expect_close(dw.fetch(), dw_ref, act == DType::F32 ? 1e-4 : 1e-2, "dhead");
      }
    }
  });
}

// Worst relative-norm errors seen above (runs after them: tests run in definition order).
TEST(OpsCudaCrossEntropy, Summary) {
  std::printf("%-44s %s\n", "op activation-dtype output", "worst ||out-ref||/||ref||");
  for (const auto& [key, err] : worst_errors()) std::printf("%-44s %.3e\n", key.c_str(), err);
}

// ---- timing (opt-in) ----------------------------------------------------------------------------------------------
// The row kernels alone on one logits block of the Qwen2.5-0.5B full step (5,462 rows of V = 151,936 fp32 logits,
// z uniform in [-4, 4]): the statistics pass, the two-pass form's in-place BF16 dz, and the one-pass gradient's
// statistics + BF16 P. Each call gets fresh logits (copied in before it, untimed); median of 5, and the bytes moved
// per second (reads 4 bytes per logit; dz and P write 2). Prints; runs with SWIFT_GPU_TIMING=1.
TEST(OpsCudaCrossEntropy, TimingRowKernels05BBlock) {
  if (std::getenv("SWIFT_GPU_TIMING") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_TIMING=1 to time the row kernels";
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t rows = 5462, vocab = 151936, ld = (vocab + 3) / 4 * 4;
  const Device d = Device::cuda();
  const Tensor pristine = random_tensor({rows, ld}, DType::F32, 5, -4.0f, 4.0f).to(d);
  Tensor logits = Tensor::empty({rows, ld}, DType::F32, d);
  std::vector<int32_t> lab(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) lab[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % vocab);
  const Tensor labels = Tensor::from_i32({rows}, lab).to(d);
  const Tensor coef = Tensor::from_f32({rows}, std::vector<float>(static_cast<size_t>(rows), 1.0f / 16384)).to(d);
  Tensor lse = Tensor::empty({rows}, DType::F32, d), label_logit = Tensor::empty({rows}, DType::F32, d);
  Tensor loss = Tensor::empty({rows}, DType::F32, d), row_e = Tensor::empty({rows}, DType::F32, d);
  Tensor argmax = Tensor::empty({rows}, DType::I32, d);
  cudaStream_t st = ops::cuda::stream(0);
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  auto time_ms = [&](auto&& launch) -> double {
    std::vector<float> ms;
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(cudaMemcpyAsync(logits.raw(), pristine.raw(), logits.nbytes(), cudaMemcpyDeviceToDevice, st),
                cudaSuccess);
      EXPECT_EQ(cudaEventRecord(e0, st), cudaSuccess);
      EXPECT_EQ(launch(), cudaSuccess);
      EXPECT_EQ(cudaEventRecord(e1, st), cudaSuccess);
      EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float v = 0;
      EXPECT_EQ(cudaEventElapsedTime(&v, e0, e1), cudaSuccess);
      if (i > 0) ms.push_back(v);  // the first is a warm-up
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[ms.size() / 2]);
  };
  const double logit_count = static_cast<double>(rows) * static_cast<double>(vocab);
  auto report = [&](const char* what, double ms, double bytes_per_logit) {
    std::printf("  %-48s %7.3f ms  %5.2f TB/s\n", what, ms, bytes_per_logit * logit_count / ms * 1e-9);
  };
  std::printf("row kernels, %lld x %lld fp32 logits (median of 5)\n", static_cast<long long>(rows),
              static_cast<long long>(vocab));
  float* z = logits.data<float>();
  const int32_t* lb = labels.data<int32_t>();
  report("statistics (launch_ce_row_stats)", time_ms([&] {
           return ops::cuda::launch_ce_row_stats(z, rows, vocab, ld, lb, lse.data<float>(), label_logit.data<float>(),
                                                 loss.data<float>(), argmax.data<int32_t>(), nullptr, st);
         }), 4);
  report("two-pass dz, BF16 in place (after the statistics)", time_ms([&] {
           return ops::cuda::launch_ce_dlogits_in_place(z, rows, vocab, ld, lb, lse.data<float>(), coef.data<float>(),
                                                        1, st);
         }), 6);
  report("one pass: statistics + BF16 P in place", time_ms([&] {
           return ops::cuda::launch_ce_one_pass(z, rows, vocab, ld, lb, nullptr, lse.data<float>(),
                                                label_logit.data<float>(), loss.data<float>(), argmax.data<int32_t>(),
                                                nullptr, row_e.data<float>(), 1, st);
         }), 6);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// Qwen2.5-7B's LM head (V = 152064, C = 3584), 8192 BF16 tokens: prints the median of 5 timed calls (after one
// warm-up) of each variant, the two bare products that bound it from below, and the workspace bound's effect.
// Prints; asserts only that the results are finite. Runs with SWIFT_GPU_TIMING=1.
TEST(OpsCudaCrossEntropy, TimingQwen7BShape) {
  if (std::getenv("SWIFT_GPU_TIMING") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_TIMING=1 to time the 7B LM head";
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t t = 8192, c = 3584, vocab = 152064;
  const Device d = Device::cuda();
  const Tensor hidden = random_tensor({t, c}, DType::BF16, 1, -2.0f, 2.0f).to(d);
  const Tensor head = random_tensor({vocab, c}, DType::BF16, 2, -0.05f, 0.05f).to(d);
  Tensor dhidden = Tensor::empty({t, c}, DType::BF16, d), dhead = Tensor::zeros({vocab, c}, DType::F32, d);
  Tensor dlogp = random_tensor({t}, DType::F32, 3).to(d), logp = Tensor::empty({t}, DType::F32, d), none;
  std::vector<int32_t> all(static_cast<size_t>(t)), quarter(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    all[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % vocab);
    quarter[static_cast<size_t>(i)] = i % 4 == 0 ? -100 : all[static_cast<size_t>(i)];
  }
  const Tensor labels = Tensor::from_i32({t}, all).to(d), labels_q = Tensor::from_i32({t}, quarter).to(d);

  cudaStream_t st = ops::cuda::stream(0);
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  int64_t peak_ws = 0;
  auto time_ms = [&](auto&& fn) {
    fn();
    const int64_t ws0 = memory_stats(1).current[static_cast<int>(MemoryCategory::Workspace)];
    memory_reset_peaks(1);
    std::vector<float> ms;
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(cudaEventRecord(e0, st), cudaSuccess);
      fn();
      EXPECT_EQ(cudaEventRecord(e1, st), cudaSuccess);
      EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float v = 0;
      EXPECT_EQ(cudaEventElapsedTime(&v, e0, e1), cudaSuccess);
      ms.push_back(v);
    }
    peak_ws = memory_stats(1).peak[static_cast<int>(MemoryCategory::Workspace)] - ws0;
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[ms.size() / 2]);
  };
  // Useful work: `products` head-sized products over the valid tokens (recomputation not counted).
  auto report = [&](const std::string& what, double ms, int products, int64_t valid) {
    std::printf("  %-52s %8.3f ms  %5.0f TFLOP/s useful  workspace peak %7.1f MiB\n", what.c_str(), ms,
                products * 2.0 * static_cast<double>(valid) * c * vocab / ms * 1e-9, peak_ws / 1048576.0);
  };
  std::printf("LM head, T=%lld tokens, V=%lld, C=%lld, bf16 (median of 5)\n", static_cast<long long>(t),
              static_cast<long long>(vocab), static_cast<long long>(c));
  {  // the floor: the two products of a LoRA step alone, (T, V) bf16 logits materialised
    Tensor z = Tensor::empty({t, vocab}, DType::BF16, d), dh = Tensor::empty({t, c}, DType::BF16, d);
    double ms = time_ms([&] { ops::gemm(false, true, 1.0f, hidden, head, 0.0f, z); });
    report("bare product logits = H W^T (bf16 out)", ms, 1, t);
    const double logits_ms = ms;
    ms = time_ms([&] { ops::gemm(false, false, 1.0f, z, head, 0.0f, dh); });
    report("bare product dhidden = dz W", ms, 1, t);
    std::printf("  floor of loss + dhidden (the two bare products): %.3f ms\n", logits_ms + ms);
  }
  ops::CrossEntropyStats stats;
  double ms = time_ms([&] { stats = ops::cross_entropy(hidden, head, labels, 1.0f / t, none, none); });
  report("cross_entropy loss only", ms, 1, t);
  ms = time_ms([&] { stats = ops::cross_entropy(hidden, head, labels, 1.0f / t, dhidden, none); });
  report("cross_entropy + dhidden (LoRA)", ms, 2, t);
  ms = time_ms([&] { stats = ops::cross_entropy(hidden, head, labels, 1.0f / t, dhidden, dhead); });
  report("cross_entropy + dhidden + dhead (full)", ms, 3, t);
  EXPECT_TRUE(std::isfinite(stats.loss_sum));
  ms = time_ms([&] { ops::cross_entropy(hidden, head, labels_q, 1.0f / t, dhidden, none); });
  report("cross_entropy + dhidden (LoRA), 6144 valid tokens", ms, 2, 6144);
  ms = time_ms([&] { ops::token_logprobs(hidden, head, labels, logp); });
  report("token_logprobs", ms, 1, t);
  ms = time_ms([&] { ops::token_logprobs_backward(hidden, head, labels, dlogp, dhidden, none); });
  report("token_logprobs_backward dhidden", ms, 2, t);
  for (int64_t mib : {256, 512, 1024, 2048}) {
    ops::CrossEntropyOptions options;
    options.device_workspace_bytes = mib << 20;
    ms = time_ms([&] { ops::cross_entropy(hidden, head, labels, 1.0f / t, dhidden, none, options); });
    report(fmt::format("B = {} MiB: cross_entropy + dhidden", mib), ms, 2, t);
    ms = time_ms([&] { ops::cross_entropy(hidden, head, labels, 1.0f / t, dhidden, dhead, options); });
    report(fmt::format("B = {} MiB: cross_entropy + dhidden + dhead", mib), ms, 3, t);
  }
  EXPECT_TRUE(all_finite(dhidden.to(Device::cpu())));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
