// tests/gpu/test_cuda_elementwise.cpp — the CUDA element-wise ops (add, swiglu, swiglu_backward, embedding,
// embedding_backward, rmsnorm, rmsnorm_backward, rope, rope_backward, dropout, adamw_step, grad_norm,
// clip_grad_norm, scale_gradients) against the CPU reference ops::ref (and the fast CPU kernels where the contract is bit-exact).
// Compiled only in CUDA builds; label gpu: fails without a device.
//
// Invariants:
//  - Inputs are fresh random values (never zeros) made on the CPU; BF16 runs feed the reference the same
//    bf16-rounded inputs as F32 and compare the device's bf16 output with the fp32 reference result.
//  - Every device output lives inside a device buffer with sentinel guard bytes and starts as NaN (or as the
//    accumulated-into values): an unwritten element or a write out of bounds fails.
//  - Tolerances (written per op and dtype): F32 results of the same fp32 formula within a few ulp (rtol 1e-5 or
//    tighter, rel-norm <= 1e-6); BF16 outputs within one bf16 rounding of the fp32 reference (rtol 2^-8 plus a
//    small atol where the reference's fp32 intermediates differ) and rel-norm <= 1e-2. Dropout masks, embedding
//    rows, embedding_backward (same fp32 order) and AdamW are bit-exact; grad_norm within 1 ulp of the CPU's.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "gpu/gpu_timing.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels_elementwise.cuh"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/philox.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

const char* name(DType d) { return dtype_name(d); }

// The F32 tensor whose values are f rounded to `dtype` (f itself for F32).
Tensor rounded(const Tensor& f, DType dtype) {
  return dtype == DType::F32 ? f.clone() : f.to_dtype(dtype).to_dtype(DType::F32);
}
// f converted to `dtype` on the device.
Tensor on_device(const Tensor& f, DType dtype) {
  return (dtype == DType::F32 ? f : f.to_dtype(dtype)).to(Device::cuda());
}
// A device tensor back on the CPU as F32.
Tensor host_f32(const Tensor& d) {
  Tensor h = d.to(Device::cpu());
  return h.dtype() == DType::F32 ? h : h.to_dtype(DType::F32);
}

// A device output inside a guarded device buffer: sentinel bytes around, NaN (or `init`) inside.
class DeviceOut {
 public:
  DeviceOut(const Shape& shape, DType dtype, const Tensor* init = nullptr) {
    Guarded g(shape, dtype);
    if (init != nullptr) g.set(init->dtype() == dtype ? *init : init->to_dtype(dtype));
    bytes_ = g.tensor.nbytes();
    const int64_t halves = static_cast<int64_t>((bytes_ + 2 * Guarded::kGuardBytes) / 2);
    whole_ = Tensor(g.tensor.storage(), 0, {halves}, DType::BF16).to(Device::cuda());
    tensor = Tensor(whole_.storage(), Guarded::kGuardBytes, shape, dtype);
  }
  ::testing::AssertionResult guards_intact() const {
    Tensor h = whole_.to(Device::cpu());
    const uint8_t* b = static_cast<const uint8_t*>(h.raw());
    for (size_t i = 0; i < Guarded::kGuardBytes; ++i) {
      if (b[i] != Guarded::kSentinel || b[Guarded::kGuardBytes + bytes_ + i] != Guarded::kSentinel) {
        return ::testing::AssertionFailure() << "guard byte " << i << " around the device output changed";
      }
    }
    return ::testing::AssertionSuccess();
  }
  Tensor host() const { return host_f32(tensor); }
  Tensor tensor;

 private:
  Tensor whole_;
  size_t bytes_ = 0;
};

// ||a - e|| / ||e|| (0 when both are 0) and the finite check; a failure prints both norms.
::testing::AssertionResult rel_norm_below(const Tensor& a, const Tensor& e, double tol) {
  if (a.numel() != e.numel()) return ::testing::AssertionFailure() << "numel differs";
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.item(i), y = e.item(i);
    if (!std::isfinite(x)) return ::testing::AssertionFailure() << "element " << i << " is " << x;
    num += (x - y) * (x - y);
    den += y * y;
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (rel <= tol) return ::testing::AssertionSuccess() << "rel-norm " << rel;
  return ::testing::AssertionFailure() << "rel-norm " << rel << " > " << tol;
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.item(i)));
  return m;
}

// Per-dtype element tolerance around an fp32 reference: F32 (atol, rtol) as given; BF16 one bf16 rounding.
::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, DType dtype, double f32_atol,
                                 double f32_rtol, double bf16_atol = 1e-6) {
  auto r = dtype == DType::F32 ? all_close(actual, expected, f32_atol, f32_rtol)
                               : all_close(actual, expected, bf16_atol, 1.0 / 256.0);
  if (!r) return r;
  return rel_norm_below(actual, expected, dtype == DType::F32 ? 1e-6 : 1e-2);
}

constexpr DType kActs[] = {DType::F32, DType::BF16};
const std::vector<Shape> kShapes = {{1, 1}, {3, 5}, {7, 13}, {33, 515}, {257, 4099}};

// ---- add, swiglu, swiglu_backward ------------------------------------------------------------------------------
TEST(OpsCudaElementwise, AddAndSwigluMatchReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 100;
  for (DType act : kActs) {
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(std::string(name(act)) + " " + shape_str(shape));
      const Tensor a = rounded(random_tensor(shape, DType::F32, ++seed, -4.0f, 4.0f), act);
      const Tensor b = rounded(random_tensor(shape, DType::F32, ++seed, -4.0f, 4.0f), act);
      const Tensor da = on_device(a, act), db = on_device(b, act);
      Tensor ref = Tensor::empty(shape, DType::F32);
      // add: one fp32 addition, then (BF16) one rounding: bit-exact against the reference rounded alike.
      ops::ref::add(a, b, ref);
      DeviceOut out(shape, act);
      ops::add(da, db, out.tensor);
      EXPECT_TRUE(bit_equal(out.host(), rounded(ref, act)));
      EXPECT_TRUE(out.guards_intact());
      Tensor inplace = on_device(a, act);  // out = a
      ops::add(inplace, db, inplace);
      EXPECT_TRUE(bit_equal(host_f32(inplace), rounded(ref, act)));
      // swiglu: expf vs the reference's double exp: a few fp32 ulp.
      ops::ref::swiglu(a, b, ref);
      DeviceOut sw(shape, act);
      ops::swiglu(da, db, sw.tensor);
      EXPECT_TRUE(close(sw.host(), ref, act, 1e-6, 1e-5));
      EXPECT_TRUE(sw.guards_intact());
      Tensor up_inplace = on_device(b, act);  // out = up
      ops::swiglu(da, up_inplace, up_inplace);
      EXPECT_TRUE(close(host_f32(up_inplace), ref, act, 1e-6, 1e-5));
    }
  }
}

// Views starting 1 element in (no 8/16-byte alignment: the scalar path) and, for 16-bit dtypes, 4 elements in (8-byte
// but not 16-byte alignment: groups of 4 instead of 8): the same bits as the reference.
TEST(OpsCudaElementwise, UnalignedViewsTakeTheNarrowerPaths) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (DType act : kActs) {
    for (const int64_t skip : {int64_t{1}, int64_t{4}}) {
      SCOPED_TRACE(std::string(name(act)) + " skip " + std::to_string(skip));
      const int64_t n = 1031;
      const Tensor a = rounded(random_tensor({n + skip}, DType::F32, 7, -2.0f, 2.0f), act);
      const Tensor b = rounded(random_tensor({n + skip}, DType::F32, 8, -2.0f, 2.0f), act);
      const Tensor da = on_device(a, act), db = on_device(b, act);
      const size_t off = dtype_bytes(act, 1) * static_cast<size_t>(skip);
      const Tensor va(da.storage(), off, {n}, act), vb(db.storage(), off, {n}, act);
      DeviceOut out({n + skip}, act);
      Tensor vo(out.tensor.storage(), out.tensor.byte_offset() + off, {n}, act);
      ops::add(va, vb, vo);
      const size_t off32 = 4 * static_cast<size_t>(skip);
      Tensor ref = Tensor::empty({n}, DType::F32);
      ops::ref::add(Tensor(a.storage(), off32, {n}, DType::F32), Tensor(b.storage(), off32, {n}, DType::F32), ref);
      Tensor got = out.host();
      for (int64_t i = 0; i < skip; ++i) EXPECT_TRUE(std::isnan(got.item(i))) << "element before the view was written";
      EXPECT_TRUE(bit_equal(Tensor(got.storage(), off32, {n}, DType::F32).clone(), rounded(ref, act)));
      EXPECT_TRUE(out.guards_intact());
      // swiglu_backward on the same views (three inputs, two outputs): the bits of the call on aligned copies.
      const Tensor aa = on_device(Tensor(a.storage(), off32, {n}, DType::F32).clone(), act);
      const Tensor ab = on_device(Tensor(b.storage(), off32, {n}, DType::F32).clone(), act);
      Tensor g1 = Tensor::empty({n}, act, Device::cuda()), u1 = Tensor::empty({n}, act, Device::cuda());
      ops::swiglu_backward(aa, ab, aa, g1, u1);
      DeviceOut g2({n + skip}, act), u2({n + skip}, act);
      Tensor vg(g2.tensor.storage(), g2.tensor.byte_offset() + off, {n}, act);
      Tensor vu(u2.tensor.storage(), u2.tensor.byte_offset() + off, {n}, act);
      ops::swiglu_backward(va, vb, va, vg, vu);
      const Tensor g2h = g2.host(), u2h = u2.host();
      EXPECT_TRUE(bit_equal(Tensor(g2h.storage(), off32, {n}, DType::F32).clone(), host_f32(g1)));
      EXPECT_TRUE(bit_equal(Tensor(u2h.storage(), off32, {n}, DType::F32).clone(), host_f32(u1)));
    }
  }
}

TEST(OpsCudaElementwise, SwigluBackwardMatchesReferenceAndAliases) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 300;
  for (DType act : kActs) {
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(std::string(name(act)) + " " + shape_str(shape));
      const Tensor dout = rounded(random_tensor(shape, DType::F32, ++seed), act);
      const Tensor gate = rounded(random_tensor(shape, DType::F32, ++seed, -6.0f, 6.0f), act);
      const Tensor up = rounded(random_tensor(shape, DType::F32, ++seed, -2.0f, 2.0f), act);
      Tensor rg = Tensor::empty(shape, DType::F32), ru = Tensor::empty(shape, DType::F32);
      ops::ref::swiglu_backward(dout, gate, up, rg, ru);
      // dgate has a cancellation (1 + g (1 - sig)) near g = -1.28: an absolute floor scaled to the values.
      const double atol_g = 2e-6, atol_g_bf16 = 1e-5;
      {  // separate outputs
        DeviceOut dg(shape, act), du(shape, act);
        ops::swiglu_backward(on_device(dout, act), on_device(gate, act), on_device(up, act), dg.tensor, du.tensor);
        EXPECT_TRUE(close(dg.host(), rg, act, atol_g, 1e-5, atol_g_bf16));
        EXPECT_TRUE(close(du.host(), ru, act, 1e-6, 1e-5));
        EXPECT_TRUE(dg.guards_intact());
        EXPECT_TRUE(du.guards_intact());
      }
      {  // dgate = gate, dup = up
        Tensor g = on_device(gate, act), u = on_device(up, act);
        ops::swiglu_backward(on_device(dout, act), g, u, g, u);
        EXPECT_TRUE(close(host_f32(g), rg, act, atol_g, 1e-5, atol_g_bf16));
        EXPECT_TRUE(close(host_f32(u), ru, act, 1e-6, 1e-5));
      }
      {  // dgate = dout, dup = up
        Tensor d = on_device(dout, act), u = on_device(up, act);
        ops::swiglu_backward(d, on_device(gate, act), u, d, u);
        EXPECT_TRUE(close(host_f32(d), rg, act, atol_g, 1e-5, atol_g_bf16));
        EXPECT_TRUE(close(host_f32(u), ru, act, 1e-6, 1e-5));
      }
      {  // dgate = gate, dup = dout
        Tensor d = on_device(dout, act), g = on_device(gate, act);
        ops::swiglu_backward(d, g, on_device(up, act), g, d);
        EXPECT_TRUE(close(host_f32(g), rg, act, atol_g, 1e-5, atol_g_bf16));
        EXPECT_TRUE(close(host_f32(d), ru, act, 1e-6, 1e-5));
      }
    }
  }
}

// ---- embedding ------------------------------------------------------------------------------------------------
Tensor random_ids(int64_t tokens, int32_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = static_cast<int32_t>(gen() % static_cast<uint32_t>(vocab));
  return Tensor::from_i32({tokens}, ids);
}

TEST(OpsCudaElementwise, EmbeddingCopiesRowsExactly) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (DType table_dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (DType act : kActs) {
      for (auto [v, c, t] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {17, 5, 40}, {1001, 300, 513}}) {
        SCOPED_TRACE(std::string(name(table_dtype)) + "->" + name(act) + " V=" + std::to_string(v) +
                     " C=" + std::to_string(c) + " T=" + std::to_string(t));
        const Tensor table = random_tensor({v, c}, table_dtype, 11 + static_cast<uint32_t>(c), -3.0f, 3.0f);
        const Tensor ids = random_ids(t, static_cast<int32_t>(v), 5);
        Tensor ref = Tensor::empty({t, c}, DType::F32);
        ops::ref::embedding(table, ids, ref);
        DeviceOut out({t, c}, act);
        ops::embedding(table.to(Device::cuda()), ids.to(Device::cuda()), out.tensor);
        EXPECT_TRUE(bit_equal(out.host(), rounded(ref, act)));
        EXPECT_TRUE(out.guards_intact());
      }
    }
  }
}

TEST(OpsCudaElementwise, EmbeddingReportsBadIdsAtTheNextSync) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Tensor table = random_tensor({9, 4}, DType::BF16, 3).to(Device::cuda());
  const Tensor ids = Tensor::from_i32({5}, {1, 2, 99, 3, 4}).to(Device::cuda());
  DeviceOut out({5, 4}, DType::F32);
  ops::embedding(table, ids, out.tensor);  // no throw: the id is on the device
  Tensor got = out.host();
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(got.item(2 * 4 + j), 0.0) << "the bad row is zeroed";
  EXPECT_TRUE(all_finite(got));
  const Tensor g = random_tensor({10}, DType::F32, 4).to(Device::cuda());
  const Tensor grads[] = {g};
  EXPECT_TRUE(throws_error([&] { ops::grad_norm(grads); }, {"embedding:", "token id 99", "position 2", "[0, 9)"}));
  EXPECT_NO_THROW(ops::grad_norm(grads)) << "the record is cleared once reported";
  // The backward: an id that is neither in the vocabulary nor the padding id.
  Tensor dtable = Tensor::zeros({9, 4}, DType::F32, Device::cuda());
  const Tensor bad = Tensor::from_i32({3}, {-1, 8, 12}).to(Device::cuda());
  ops::embedding_backward(random_tensor({3, 4}, DType::F32, 9).to(Device::cuda()), bad, dtable, -1);
  EXPECT_TRUE(throws_error([&] { ops::cuda::check_device_errors(0); }, {"embedding_backward:", "token id 12"}));
  // Negative rope positions.
  Tensor x = random_tensor({2, 1, 4}, DType::F32, 10).to(Device::cuda());
  const ops::RopeFrequencies freqs = ops::rope_frequencies(ops::RopeConfig{}, 4, 16);
  ops::rope(x, Tensor::from_i32({2}, {0, -3}).to(Device::cuda()), freqs);
  EXPECT_TRUE(throws_error([&] { ops::clip_grad_norm(grads, 1.0); }, {"rope:", "position -3"}));
}

TEST(OpsCudaElementwise, EmbeddingBackwardIsDeterministicAndMatchesCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (DType act : kActs) {
    for (auto [v, c, t, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, -1}, {17, 5, 400, 3},
                                {1000, 257, 1031, -1}, {50, 4099, 300, 0}}) {
      SCOPED_TRACE(std::string(name(act)) + " V=" + std::to_string(v) + " C=" + std::to_string(c) +
                   " T=" + std::to_string(t) + " pad=" + std::to_string(pad));
      const Tensor dout = rounded(random_tensor({t, c}, DType::F32, 31, -1.0f, 1.0f), act);
      const Tensor ids = random_ids(t, static_cast<int32_t>(v), 32);  // many repeats when V << T
      const Tensor init = random_tensor({v, c}, DType::F32, 33);
      // The fast CPU kernel adds in token order in fp32, as the device: bit-exact.
      Tensor cpu = init.clone();
      ops::embedding_backward(dout, ids, cpu, pad);
      DeviceOut dev({v, c}, DType::F32, &init);
      ops::embedding_backward(on_device(dout, act), ids.to(Device::cuda()), dev.tensor, pad);
      EXPECT_TRUE(bit_equal(dev.host(), cpu));
      EXPECT_TRUE(dev.guards_intact());
      Tensor ref = init.clone();
      ops::ref::embedding_backward(dout, ids, ref, pad);
      EXPECT_TRUE(all_close(dev.host(), ref, 1e-5, 1e-5));
      if (pad >= 0 && pad < v) {  // the padding row is untouched
        Tensor got = dev.host();
        for (int64_t j = 0; j < c; ++j) ASSERT_EQ(got.item(pad * c + j), init.item(pad * c + j));
      }
    }
  }
}

// ---- rmsnorm ----------------------------------------------------------------------------------------------------
// C % 8 == 0 past 1024 (up to 8192) takes the register-resident kernels (1, 2 or 4 groups of 8 per thread; up to 4096
// with set_rmsnorm_narrow(true) the two-warps-per-row ones: 33 and 17 rows leave a block's last rows empty); 8200 and
// the odd widths the strided ones; 256 <= C <= 1024 with C % 8 == 0 the narrow warp-per-row kernels (the backward's
// dweight chunks of 32 rows: 130 rows make five, the last partial), or with set_rmsnorm_narrow(false) the strided.
const std::vector<Shape> kNormShapes = {{1, 1},     {5, 7},    {37, 128},  {19, 1000}, {7, 1025},
                                        {3, 4099},  {300, 2048}, {33, 3584}, {17, 2056}, {9, 4104},
                                        {5, 8192},  {3, 8200},  {4, 1032},  {130, 896}, {70, 256}, {9, 1024}};

// Runs body with the narrow rmsnorm backward on, then off (the process default restored: on).
template <typename Body>
void for_narrow_and_strided(Body&& body) {
  for (bool narrow : {true, false}) {
    SCOPED_TRACE(narrow ? "narrow kernels" : "strided kernels");
    ops::cuda::set_rmsnorm_narrow(narrow);
    body();
  }
  ops::cuda::set_rmsnorm_narrow(true);
}

TEST(OpsCudaElementwise, RmsnormMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for_narrow_and_strided([] {
  uint32_t seed = 500;
  for (DType act : kActs) {
    for (DType wdt : {DType::F32, DType::BF16, DType::F16}) {
      for (const Shape& shape : kNormShapes) {
        SCOPED_TRACE(std::string(name(act)) + " weight " + name(wdt) + " " + shape_str(shape));
        const int64_t n = shape[0], c = shape[1];
        const Tensor x = rounded(random_tensor(shape, DType::F32, ++seed, -3.0f, 3.0f), act);
        const Tensor w = random_tensor({c}, wdt, ++seed, 0.5f, 1.5f);
        Tensor ry = Tensor::empty(shape, DType::F32), rr = Tensor::empty({n}, DType::F32);
        ops::ref::rmsnorm(x, w, 1e-6f, ry, rr);
        DeviceOut y(shape, act), rstd({n}, DType::F32);
        ops::rmsnorm(on_device(x, act), w.to(Device::cuda()), 1e-6f, y.tensor, rstd.tensor);
        EXPECT_TRUE(close(y.host(), ry, act, 1e-6, 2e-6));
        EXPECT_TRUE(all_close(rstd.host(), rr, 0.0, 5e-7));  // float variance, sqrt, division: ~2 ulp
        EXPECT_TRUE(y.guards_intact());
        EXPECT_TRUE(rstd.guards_intact());
        Tensor inplace = on_device(x, act);  // y = x, no rstd
        Tensor none;
        ops::rmsnorm(inplace, w.to(Device::cuda()), 1e-6f, inplace, none);
        EXPECT_TRUE(close(host_f32(inplace), ry, act, 1e-6, 2e-6));
      }
    }
  }
  });
}

TEST(OpsCudaElementwise, RmsnormBackwardMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 700;
  for_narrow_and_strided([&] {
    for (DType act : kActs) {
      for (DType wdt : {DType::F32, DType::BF16}) {
        for (const Shape& shape : kNormShapes) {
          SCOPED_TRACE(std::string(name(act)) + " weight " + name(wdt) + " " + shape_str(shape));
          const int64_t n = shape[0], c = shape[1];
          const Tensor x = rounded(random_tensor(shape, DType::F32, ++seed, -3.0f, 3.0f), act);
          const Tensor dy = rounded(random_tensor(shape, DType::F32, ++seed), act);
          const Tensor w = random_tensor({c}, wdt, ++seed, 0.5f, 1.5f);
          Tensor y = Tensor::empty(shape, DType::F32), rstd = Tensor::empty({n}, DType::F32);
          ops::ref::rmsnorm(x, w, 1e-5f, y, rstd);
          const Tensor dx_init = rounded(random_tensor(shape, DType::F32, ++seed), act);
          const Tensor dw_init = random_tensor({c}, DType::F32, ++seed);
          Tensor rdx = Tensor::empty(shape, DType::F32), rdx_acc = dx_init.clone(), rdw = dw_init.clone();
          Tensor none;
          ops::ref::rmsnorm_backward(dy, x, w, rstd, rdx, rdw);
          ops::ref::rmsnorm_backward(dy, x, w, rstd, rdx_acc, none, true);
          const Tensor ddy = on_device(dy, act), dx_ = on_device(x, act), dw_ = w.to(Device::cuda());
          const Tensor drstd = rstd.to(Device::cuda());
          // dx is a difference of two terms of size ~|dy w rstd| that cancel (exactly 0 when C = 1): an absolute floor
          // relative to the terms, not to the result.
          const double scale = std::max(max_abs(rdx), max_abs(dy) * max_abs(w) * max_abs(rstd));
          const double f32_atol = 2e-6 * scale, bf16_atol = 4e-3 * scale;
          // With C = 1, dx is 0 in exact arithmetic (x^2 rstd^2 = 1 up to eps): the result is rounding noise of the
          // terms, so only the absolute floor applies (no rel-norm against a noise-sized reference).
          auto close_dx = [&](const Tensor& got, const Tensor& want, double bf16_floor) {
            if (c > 1) return close(got, want, act, f32_atol, 1e-5, bf16_floor);
            return act == DType::F32 ? all_close(got, want, f32_atol, 1e-5) : all_close(got, want, bf16_floor, 1.0 / 256);
          };
          {  // dx =, dweight +=
            DeviceOut dx(shape, act), dw({c}, DType::F32, &dw_init);
            ops::rmsnorm_backward(ddy, dx_, dw_, drstd, dx.tensor, dw.tensor);
            EXPECT_TRUE(close_dx(dx.host(), rdx, bf16_atol));
            EXPECT_TRUE(all_close(dw.host(), rdw, 1e-5, 1e-5));
            EXPECT_TRUE(dx.guards_intact());
            EXPECT_TRUE(dw.guards_intact());
          }
          {  // dx += (accumulate_dx), dweight undefined
            DeviceOut dx(shape, act, &dx_init);
            ops::rmsnorm_backward(ddy, dx_, dw_, drstd, dx.tensor, none, true);
            EXPECT_TRUE(close_dx(dx.host(), rdx_acc, bf16_atol + 1e-6));
          }
          {  // dx = dy in place, and dx undefined (dweight only)
            Tensor inplace = on_device(dy, act);
            ops::rmsnorm_backward(inplace, dx_, dw_, drstd, inplace, none);
            EXPECT_TRUE(close_dx(host_f32(inplace), rdx, bf16_atol));
            DeviceOut dw({c}, DType::F32, &dw_init);
            ops::rmsnorm_backward(ddy, dx_, dw_, drstd, none, dw.tensor);
            EXPECT_TRUE(all_close(dw.host(), rdw, 1e-5, 1e-5));
          }
        }
      }
    }
  });
}

// ---- rope ---------------------------------------------------------------------------------------------------------
TEST(OpsCudaElementwise, RopeMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  ops::RopeConfig yarn;
  yarn.type = ops::RopeType::Yarn;
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 4096;
  yarn.max_position_embeddings = 16384;
  yarn.theta = 1000000.0;
  uint32_t seed = 900;
  for (DType act : kActs) {
    for (const ops::RopeConfig& config : {ops::RopeConfig{}, yarn}) {
      for (auto [t, h, d] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 2}, {5, 3, 6}, {37, 4, 128}, {9, 2, 34},
                             {300, 28, 128}, {3, 2, 512}}) {
        SCOPED_TRACE(std::string(name(act)) + " T=" + std::to_string(t) + " H=" + std::to_string(h) +
                     " D=" + std::to_string(d) + (config.type == ops::RopeType::Yarn ? " yarn" : " default"));
        const ops::RopeFrequencies freqs = ops::rope_frequencies(config, d, 16384);
        std::mt19937 gen(++seed);
        std::vector<int32_t> pos(static_cast<size_t>(t));
        for (auto& p : pos) p = static_cast<int32_t>(gen() % 32768);
        pos[0] = 0;
        const Tensor positions = Tensor::from_i32({t}, pos);
        const Tensor x = rounded(random_tensor({t, h, d}, DType::F32, ++seed, -2.0f, 2.0f), act);
        // The angle is the same fp32 product; cos/sin differ by a few ulp (CUDA's sincosf vs double).
        Tensor ref = x.clone();
        ops::ref::rope(ref, positions, freqs);
        Tensor dev = on_device(x, act);
        ops::rope(dev, positions.to(Device::cuda()), freqs);
        EXPECT_TRUE(close(host_f32(dev), ref, act, 2e-6, 1e-5));
        Tensor ref_back = x.clone();
        ops::ref::rope_backward(ref_back, positions, freqs);
        Tensor back = on_device(x, act);
        ops::rope_backward(back, positions.to(Device::cuda()), freqs);
        EXPECT_TRUE(close(host_f32(back), ref_back, act, 2e-6, 1e-5));
        if (act == DType::F32) {  // forward then backward: the identity up to rounding (and attention_scaling^2)
          ops::rope_backward(dev, positions.to(Device::cuda()), freqs);
          const float s2 = freqs.attention_scaling * freqs.attention_scaling;
          Tensor expect = x.clone();
          for (int64_t i = 0; i < expect.numel(); ++i) expect.data<float>()[i] *= s2;
          EXPECT_TRUE(all_close(host_f32(dev), expect, 1e-5, 1e-5));
        }
      }
    }
  }
}

// The 16-byte rope kernel (half % 8 == 0, aligned rows) against the per-pair kernel (set_rope_vectorized(false)):
// the same bits, in place and out of / into packed rows (rope_columns), forward and backward, over token counts that
// leave the last block of tokens partial. A column offset of 4 elements is not 16-byte aligned: both take the
// per-pair kernel there (still equal).
TEST(OpsCudaElementwise, RopeVectorizedEqualsPerPairKernel) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  ops::RopeConfig config;
  config.theta = 1000000.0;
  uint32_t seed = 4200;
  auto run = [](bool vectorized, auto&& fn) {
    ops::cuda::set_rope_vectorized(vectorized);
    fn();
    ops::cuda::set_rope_vectorized(true);
  };
  for (DType act : kActs) {
    for (auto [t, h, d] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 16}, {37, 14, 64}, {300, 2, 64},
                           {129, 28, 128}, {5, 3, 512}}) {
      for (int64_t col : {int64_t{0}, int64_t{8}, int64_t{4}}) {
        SCOPED_TRACE(std::string(name(act)) + " T=" + std::to_string(t) + " H=" + std::to_string(h) +
                     " D=" + std::to_string(d) + " col " + std::to_string(col));
        const ops::RopeFrequencies freqs = ops::rope_frequencies(config, d, 32768);
        std::mt19937 gen(++seed);
        std::vector<int32_t> pos(static_cast<size_t>(t));
        for (auto& p : pos) p = static_cast<int32_t>(gen() % 32768);
        const Tensor positions = Tensor::from_i32({t}, pos).to(Device::cuda());
        const int64_t width = col + h * d + 8;  // the heads sit at column col of a wider row
        const Tensor packed = on_device(random_tensor({t, width}, DType::F32, ++seed, -2.0f, 2.0f), act);
        for (bool backward : {false, true}) {
          Tensor got_cols = Tensor::zeros({t, width}, act, Device::cuda());
          Tensor want_cols = Tensor::zeros({t, width}, act, Device::cuda());
          run(true, [&] { ops::rope_columns(packed, col, got_cols, col, h, positions, freqs, backward); });
          run(false, [&] { ops::rope_columns(packed, col, want_cols, col, h, positions, freqs, backward); });
          EXPECT_TRUE(bit_equal(got_cols.to(Device::cpu()), want_cols.to(Device::cpu()))) << "rope_columns";
          if (col != 0) continue;
          Tensor got = on_device(random_tensor({t, h, d}, DType::F32, seed, -2.0f, 2.0f), act);
          Tensor want = got.to(Device::cpu()).to(Device::cuda());
          run(true, [&] { backward ? ops::rope_backward(got, positions, freqs) : ops::rope(got, positions, freqs); });
          run(false,
              [&] { backward ? ops::rope_backward(want, positions, freqs) : ops::rope(want, positions, freqs); });
          EXPECT_TRUE(bit_equal(got.to(Device::cpu()), want.to(Device::cpu()))) << "in place";
        }
      }
    }
  }
}

// rope_qkv (packed q/k/v: q, k roped and v copied in one launch where aligned) against rope_columns twice and
// copy_columns on CUDA: the same bits, forward (out of the packed rows) and backward (into them), with the fused kernel
// and with set_rope_qkv_fused(false) (the three launches), over token counts that leave a block partial.
TEST(OpsCudaElementwise, RopeQkvEqualsTwoRopeColumnsAndACopy) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  ops::RopeConfig config;
  config.theta = 1000000.0;
  uint32_t seed = 5200;
  for (DType act : kActs) {
    for (auto [t, hq, hkv, d] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, 16}, {37, 14, 2, 64},
                                 {300, 28, 4, 128}, {129, 4, 4, 64}, {5, 2, 1, 512}}) {
      SCOPED_TRACE(std::string(name(act)) + " T=" + std::to_string(t) + " Hq=" + std::to_string(hq) +
                   " Hkv=" + std::to_string(hkv) + " D=" + std::to_string(d));
      const int64_t nq = hq * d, nkv = hkv * d;
      const ops::RopeFrequencies freqs = ops::rope_frequencies(config, d, 32768);
      std::mt19937 gen(++seed);
      std::vector<int32_t> pos(static_cast<size_t>(t));
      for (auto& p : pos) p = static_cast<int32_t>(gen() % 32768);
      const Tensor positions = Tensor::from_i32({t}, pos).to(Device::cuda());
      for (bool backward : {false, true}) {
        for (bool vectorized : {true, false}) {
          SCOPED_TRACE(std::string(backward ? "backward" : "forward") + (vectorized ? " fused" : " three launches"));
          auto make = [&](int64_t cols) { return on_device(random_tensor({t, cols}, DType::F32, ++seed, -2.0f, 2.0f), act); };
          Tensor packed = make(nq + 2 * nkv), q = make(nq), k = make(nkv), v = make(nkv);
          Tensor want_packed = packed.to(Device::cpu()).to(Device::cuda()), want_q = q.to(Device::cpu()).to(Device::cuda());
          Tensor want_k = k.to(Device::cpu()).to(Device::cuda()), want_v = v.to(Device::cpu()).to(Device::cuda());
          ops::cuda::set_rope_qkv_fused(vectorized);
          ops::rope_qkv(packed, q, k, v, positions, freqs, backward);
          ops::cuda::set_rope_qkv_fused(true);
          rope_qkv_in_parts(want_packed, want_q, want_k, want_v, positions, freqs, backward);
          EXPECT_TRUE(bit_equal(packed.to(Device::cpu()), want_packed.to(Device::cpu()))) << "packed";
          EXPECT_TRUE(bit_equal(q.to(Device::cpu()), want_q.to(Device::cpu()))) << "q";
          EXPECT_TRUE(bit_equal(k.to(Device::cpu()), want_k.to(Device::cpu()))) << "k";
          EXPECT_TRUE(bit_equal(v.to(Device::cpu()), want_v.to(Device::cpu()))) << "v";
        }
      }
    }
  }
}

// ---- dropout ------------------------------------------------------------------------------------------------------
TEST(OpsCudaElementwise, DropoutMaskEqualsCpuBitForBit) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (DType act : kActs) {
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{300001}}) {
        SCOPED_TRACE(std::string(name(act)) + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        const ops::Dropout d{p, 0x1234567890abcdefull + static_cast<uint64_t>(n)};
        // Nonzero inputs: a zero output marks a dropped element.
        const Tensor x = rounded(random_tensor({n}, DType::F32, 41, 0.5f, 1.5f), act);
        Tensor cpu = Tensor::empty({n}, DType::F32), ref = Tensor::empty({n}, DType::F32);
        ops::dropout(x, d, cpu);
        ops::ref::dropout(x, d, ref);
        DeviceOut out({n}, act);
        ops::dropout(on_device(x, act), d, out.tensor);
        const Tensor got = out.host();
        EXPECT_TRUE(bit_equal(got, rounded(cpu, act)));
        EXPECT_TRUE(bit_equal(got, rounded(ref, act)));
        EXPECT_TRUE(out.guards_intact());
        const uint32_t threshold = ops::dropout_threshold(p);
        int64_t mismatched = 0;
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = p == 0.0f || ops::dropout_keep(d.seed, static_cast<uint64_t>(i), threshold);
          mismatched += keep != (got.item(i) != 0.0);
        }
        EXPECT_EQ(mismatched, 0);
        Tensor inplace = on_device(x, act);  // out = x
        ops::dropout(inplace, d, inplace);
        EXPECT_TRUE(bit_equal(host_f32(inplace), rounded(cpu, act)));
      }
    }
    // Unaligned view (scalar path) and a nonzero element offset into the philox stream.
    const int64_t n = 1023;
    const ops::Dropout d{0.3f, 77};
    const Tensor x = rounded(random_tensor({n + 1}, DType::F32, 42, 0.5f, 1.5f), act);
    const Tensor dx = on_device(x, act);
    const size_t elem = dtype_bytes(act, 1);
    DeviceOut out({n}, act);
    ops::dropout(Tensor(dx.storage(), elem, {n}, act), d, out.tensor);
    Tensor cpu = Tensor::empty({n}, DType::F32);
    ops::dropout(Tensor(x.storage(), 4, {n}, DType::F32).clone(), d, cpu);
    EXPECT_TRUE(bit_equal(out.host(), rounded(cpu, act)));
  }
}

// ---- AdamW, grad norm, clipping -----------------------------------------------------------------------------------
struct OptimizerState {
  std::vector<Tensor> p, g, m, v;
};

OptimizerState random_state(const std::vector<int64_t>& sizes, uint32_t seed) {
  OptimizerState s;
  for (int64_t n : sizes) {
    s.p.push_back(random_tensor({n}, DType::F32, ++seed, -1.0f, 1.0f));
    s.g.push_back(random_tensor({n}, DType::F32, ++seed, -0.01f, 0.01f));
    s.m.push_back(random_tensor({n}, DType::F32, ++seed, -1e-3f, 1e-3f));
    s.v.push_back(random_tensor({n}, DType::F32, ++seed, 0.0f, 1e-5f));
  }
  return s;
}

OptimizerState to_device(const OptimizerState& s) {
  OptimizerState d;
  for (size_t i = 0; i < s.p.size(); ++i) {
    d.p.push_back(s.p[i].to(Device::cuda()));
    d.g.push_back(s.g[i].to(Device::cuda()));
    d.m.push_back(s.m[i].to(Device::cuda()));
    d.v.push_back(s.v[i].to(Device::cuda()));
  }
  return d;
}

std::vector<ops::AdamWTensor> adam_tensors(const OptimizerState& s) {
  std::vector<ops::AdamWTensor> t;
  for (size_t i = 0; i < s.p.size(); ++i) t.push_back({s.p[i], s.g[i], s.m[i], s.v[i]});
  return t;
}

TEST(OpsCudaElementwise, AdamWEqualsCpuBitForBit) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::vector<int64_t> sizes = {1, 17, 16384, 16385, 40001, 0, 3};
  ops::AdamWConfig decay;
  decay.lr = 3e-4;
  decay.weight_decay = 0.01;
  ops::AdamWConfig large_w1;  // 1 - beta1 >= 0.5: torch's other lerp branch
  large_w1.lr = 1e-3;
  large_w1.beta1 = 0.4;
  large_w1.beta2 = 0.95;
  large_w1.eps = 1e-6;
  ops::AdamWConfig clip_folded = decay;  // the clip's multiplier read with the gradient (AdamWConfig::grad_scale)
  clip_folded.grad_scale = 0.3718f;
  int config_index = 0;
  for (const ops::AdamWConfig& config : {ops::AdamWConfig{}, decay, large_w1, clip_folded}) {
    SCOPED_TRACE("config " + std::to_string(config_index++));
    OptimizerState cpu = random_state(sizes, 1000);
    OptimizerState dev = to_device(cpu);
    for (int64_t step = 1; step <= 3; ++step) {
      ops::adamw_step(adam_tensors(cpu), config, step);
      ops::adamw_step(adam_tensors(dev), config, step);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      SCOPED_TRACE("tensor " + std::to_string(i) + " of " + std::to_string(sizes[i]));
      EXPECT_TRUE(bit_equal(dev.p[i].to(Device::cpu()), cpu.p[i]));
      EXPECT_TRUE(bit_equal(dev.m[i].to(Device::cpu()), cpu.m[i]));
      EXPECT_TRUE(bit_equal(dev.v[i].to(Device::cpu()), cpu.v[i]));
      EXPECT_TRUE(bit_equal(dev.g[i].to(Device::cpu()), cpu.g[i])) << "grad is read only";
    }
    // The reference formulas agree with both (they are the CPU kernel's by construction).
    OptimizerState ref = random_state(sizes, 1000);
    OptimizerState dev2 = to_device(ref);
    ops::ref::adamw_step(adam_tensors(ref), config, 5);
    ops::adamw_step(adam_tensors(dev2), config, 5);
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(bit_equal(dev2.p[i].to(Device::cpu()), ref.p[i]));
  }
}

// Views one element into their storage (no 16-byte alignment: AdamW's element-by-element path) and sizes with a tail
// past the last group of 4 (the 4-wide path's remainder), with a BF16 product copy one element in as well: the CPU
// kernel's bits, and the elements before the views untouched.
TEST(OpsCudaElementwise, AdamWMisalignedViewsEqualCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  ops::AdamWConfig config;
  config.lr = 3e-4;
  config.weight_decay = 0.01;
  for (int64_t n : {int64_t{5}, int64_t{16387}, int64_t{40001}}) {
    for (int64_t offset : {int64_t{0}, int64_t{1}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      const OptimizerState full = random_state({n + 1, n + 1, n + 1, n + 1}, 7000);  // p, g, m, v storages
      auto view = [&](const Tensor& t, DType dtype) {
        return Tensor(t.storage(), t.byte_offset() + static_cast<size_t>(offset) * dtype_bytes(dtype, 1), {n}, dtype);
      };
      auto run = [&](Device d) {
        std::vector<Tensor> storages = {full.p[0].to(d), full.g[1].to(d), full.m[2].to(d), full.v[3].to(d),
                                        Tensor::zeros({n + 1}, DType::BF16, d)};
        const std::vector<ops::AdamWTensor> tensors = {{view(storages[0], DType::F32), view(storages[1], DType::F32),
                                                        view(storages[2], DType::F32), view(storages[3], DType::F32),
                                                        view(storages[4], DType::BF16)}};
        for (int64_t step = 1; step <= 2; ++step) ops::adamw_step(tensors, config, step);
        for (Tensor& s : storages) s = s.to(Device::cpu());
        return storages;
      };
      const std::vector<Tensor> cpu = run(Device::cpu()), dev = run(Device::cuda());
      for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(bit_equal(dev[i], cpu[i])) << "storage " << i;
    }
  }
}

// AdamWTensor::product: the updated param written in BF16, F16 and F32 as ops::cast would round it, the update itself
// unchanged (bit for bit against the same step without a product).
TEST(OpsCudaElementwise, AdamWWritesTheProductCopy) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::vector<int64_t> sizes = {1, 16385, 40001, 3};
  ops::AdamWConfig config;
  config.lr = 3e-4;
  config.weight_decay = 0.01;
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    OptimizerState with = to_device(random_state(sizes, 3000)), without = to_device(random_state(sizes, 3000));
    std::vector<ops::AdamWTensor> tensors = adam_tensors(with);
    std::vector<Tensor> products;
    for (ops::AdamWTensor& t : tensors) {
      products.push_back(Tensor::zeros(t.param.shape(), dtype, Device::cuda()));
      t.product = products.back();
    }
    ops::adamw_step(tensors, config, 2);
    ops::adamw_step(adam_tensors(without), config, 2);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_TRUE(bit_equal(with.p[i].to(Device::cpu()), without.p[i].to(Device::cpu())));
      Tensor cast = Tensor::empty(with.p[i].shape(), dtype, Device::cuda());
      ops::cast(with.p[i], cast);
      EXPECT_TRUE(bit_equal(products[i].to(Device::cpu()), cast.to(Device::cpu()))) << "tensor " << i;
    }
  }
}

TEST(OpsCudaElementwise, GradNormAndClipMatchCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{1}, {5, 0, 16384, 16385, 3}, {1000003, 17, 250000}}) {
    SCOPED_TRACE("tensors " + std::to_string(sizes.size()) + ", first " + std::to_string(sizes[0]));
    std::vector<Tensor> cpu, dev;
    uint32_t seed = 2000;
    for (int64_t n : sizes) {
      cpu.push_back(random_tensor({n}, DType::F32, ++seed, -0.5f, 0.5f));
      dev.push_back(cpu.back().to(Device::cuda()));
    }
    const float expected = ops::grad_norm(cpu);
    const float got = ops::grad_norm(dev);
    EXPECT_LE(ulp_distance(got, expected), 1) << got << " vs " << expected;
    EXPECT_EQ(got, ops::grad_norm(dev)) << "deterministic";
    EXPECT_LE(ulp_distance(got, ops::ref::grad_norm(cpu)), 1);
    // No clipping when max_norm exceeds the norm: grads unchanged.
    EXPECT_EQ(ops::clip_grad_norm(dev, 1e9), got);
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(bit_equal(dev[i].to(Device::cpu()), cpu[i]));
    // Clipping: same total, grads scaled by the same float coefficient as the CPU.
    const double max_norm = 0.25 * expected;
    const float cpu_total = ops::clip_grad_norm(cpu, max_norm);
    const float dev_total = ops::clip_grad_norm(dev, max_norm);
    EXPECT_LE(ulp_distance(dev_total, cpu_total), 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (dev_total == cpu_total) {
        EXPECT_TRUE(bit_equal(dev[i].to(Device::cpu()), cpu[i]));
      } else {
        EXPECT_TRUE(all_close(dev[i].to(Device::cpu()), cpu[i], 0.0, 3e-7));
      }
    }
  }
  // A tensor whose data starts off 16-byte alignment (a view from element 1) takes scalar loads in the same order:
  // the bits of an aligned copy of the same elements.
  {
    const Tensor whole = random_tensor({40001}, DType::F32, 2500, -0.5f, 0.5f);
    const Tensor whole_dev = whole.to(Device::cuda());
    std::vector<Tensor> cpu = {whole.slice_rows(1, 40001)};
    std::vector<Tensor> off = {whole_dev.slice_rows(1, 40001)};
    std::vector<Tensor> aligned = {cpu[0].to(Device::cuda())};
    EXPECT_EQ(ops::grad_norm(off), ops::grad_norm(aligned));
    EXPECT_LE(ulp_distance(ops::grad_norm(off), ops::grad_norm(cpu)), 1);
  }
  // Empty list and all-empty tensors: 0.
  std::vector<Tensor> empty_dev = {Tensor::zeros({0}, DType::F32, Device::cuda())};
  EXPECT_EQ(ops::grad_norm(empty_dev), 0.0f);
}

TEST(OpsCudaElementwise, ScaleGradientsMatchesCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // One fp32 multiply per element, as the reference: bit-exact; an inf / NaN stays non-finite.
  for (const float factor : {1.0f / 65536.0f, 0.37f, 3.0f}) {
    std::vector<Tensor> cpu, dev;
    uint32_t seed = 2100;
    for (int64_t n : {int64_t{1}, int64_t{0}, int64_t{16385}, int64_t{1000003}, int64_t{7}}) {
      cpu.push_back(random_tensor({n}, DType::F32, ++seed, -1e4f, 1e4f));
      dev.push_back(cpu.back().to(Device::cuda()));
    }
    cpu[4].data<float>()[3] = std::numeric_limits<float>::infinity();
    dev[4] = cpu[4].to(Device::cuda());
    ops::ref::scale_gradients(cpu, factor);
    ops::scale_gradients(dev, factor);
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(bit_equal(dev[i].to(Device::cpu()), cpu[i])) << factor << " " << i;
    EXPECT_FALSE(std::isfinite(ops::grad_norm(dev)));
  }
}

// zero_gradients in one launch: every element of tensors across chunk boundaries (and a NaN) +0; a row block of a
// larger buffer leaves the other rows.
TEST(OpsCudaElementwise, ZeroGradientsZeroesEveryElementAndNothingElse) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  std::vector<Tensor> dev;
  uint32_t seed = 2200;
  for (int64_t n : {int64_t{1}, int64_t{0}, int64_t{16385}, int64_t{1000003}, int64_t{7}}) {
    Tensor t = random_tensor({n}, DType::F32, ++seed);
    if (n == 7) t.data<float>()[3] = std::nanf("");
    dev.push_back(t.to(Device::cuda()));
  }
  const Tensor whole_host = random_tensor({6, 33}, DType::F32, ++seed);
  Tensor whole = whole_host.to(Device::cuda());
  dev.push_back(whole.slice_rows(1, 5));
  ops::zero_gradients(dev);
  for (size_t i = 0; i + 1 < dev.size(); ++i) {
    EXPECT_TRUE(bit_equal(dev[i].to(Device::cpu()), Tensor::zeros(dev[i].shape(), DType::F32))) << i;
  }
  const Tensor got = whole.to(Device::cpu());
  for (int64_t r = 0; r < 6; ++r) {
    const Tensor want = r >= 1 && r < 5 ? Tensor::zeros({1, 33}, DType::F32) : whole_host.slice_rows(r, r + 1);
    EXPECT_TRUE(bit_equal(got.slice_rows(r, r + 1), want)) << "row " << r;
  }
}

// Opt-in timing (SWIFT_GPU_BENCH=1) of swiglu and swiglu_backward at the 0.5B's (16,384 x 4,864) and the 7B's
// (8,192 x 18,944) MLP shapes, BF16: 16-byte aligned operands (groups of 8) and the same calls on views 4 elements in
// (8-byte aligned: groups of 4, the kernels before groups of 8). A yardstick, not an assertion.
TEST(OpsCudaElementwise, BenchSwiglu) {
  if (std::getenv("SWIFT_GPU_BENCH") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_BENCH=1 to time model-sized calls";
  ASSERT_TRUE(have_device());
  for (const auto& [t, f] : {std::pair<int64_t, int64_t>{16384, 4864}, {8192, 18944}}) {
    const int64_t n = t * f;
    auto make = [&](uint32_t seed) {
      return on_device(random_tensor({n + 4}, DType::F32, seed, -3.0f, 3.0f), DType::BF16);
    };
    Tensor bufs[5] = {make(1), make(2), make(3), make(4), make(5)};
    for (const int64_t skip : {int64_t{0}, int64_t{4}}) {
      Tensor v[5];
      for (int k = 0; k < 5; ++k) v[k] = Tensor(bufs[k].storage(), static_cast<size_t>(2 * skip), {n}, DType::BF16);
      const double fwd = time_ms([&] { ops::swiglu(v[0], v[1], v[2]); }, 20);
      const double bwd = time_ms([&] { ops::swiglu_backward(v[0], v[1], v[2], v[3], v[4]); }, 20);
      std::printf("swiglu %ld x %ld bf16, groups of %d: forward %.4f ms (%.2f TB/s), backward %.4f ms (%.2f TB/s)\n",
                  t, f, skip == 0 ? 8 : 4, fwd, 3.0 * 2 * n / fwd * 1e-9, bwd, 5.0 * 2 * n / bwd * 1e-9);
    }
  }
}

// Opt-in timing (SWIFT_GPU_BENCH=1) of rmsnorm_backward at Qwen2.5-0.5B's full fine-tuning shape (16,384 x 896,
// BF16 activations, F32 weight; the narrow and the strided kernels) and at 3584 (two warps per row, or a block per
// row): dx only, dweight only, both. A yardstick, not an assertion.
TEST(OpsCudaElementwise, BenchRmsnormBackward) {
  if (std::getenv("SWIFT_GPU_BENCH") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_BENCH=1 to time model-sized calls";
  ASSERT_TRUE(have_device());
  const Device d = Device::cuda();
  auto time = [](auto&& fn) { return time_ms(fn, 20); };
  for (const int64_t c : {int64_t{896}, int64_t{3584}})
  for (const bool narrow : {true, false}) {
    ops::cuda::set_rmsnorm_narrow(narrow);
    const int64_t n = 16384;
    const Tensor x = on_device(random_tensor({n, c}, DType::F32, 1, -3.0f, 3.0f), DType::BF16);
    const Tensor dy = on_device(random_tensor({n, c}, DType::F32, 2), DType::BF16);
    const Tensor w = random_tensor({c}, DType::F32, 3, 0.5f, 1.5f).to(d);
    Tensor y = Tensor::empty({n, c}, DType::BF16, d), rstd = Tensor::empty({n}, DType::F32, d);
    ops::rmsnorm(x, w, 1e-6f, y, rstd);
    Tensor dx = Tensor::empty({n, c}, DType::BF16, d), dw = Tensor::zeros({c}, DType::F32, d), none;
    const double dx_ms = time([&] { ops::rmsnorm_backward(dy, x, w, rstd, dx, none); });
    const double dw_ms = time([&] { ops::rmsnorm_backward(dy, x, w, rstd, none, dw); });
    const double both_ms = time([&] { ops::rmsnorm_backward(dy, x, w, rstd, dx, dw); });
    const double acc_ms = time([&] { ops::rmsnorm_backward(dy, x, w, rstd, dx, dw, /*accumulate_dx=*/true); });
    const double fwd_ms = time([&] { ops::rmsnorm(x, w, 1e-6f, y, rstd); });
    const char* kernels = c > 1024 ? (narrow ? " two warps per row" : " block per row") : narrow ? " narrow" : " strided";
    std::printf("rmsnorm %ld x %ld bf16%s: backward both with dx += %.3f ms\n", n, c, kernels, acc_ms);
    std::printf("rmsnorm %ld x %ld bf16%s: forward %.3f ms; backward dx %.3f ms, dweight %.3f ms, both %.3f ms\n", n,
                c, kernels, fwd_ms, dx_ms, dw_ms, both_ms);
  }
  ops::cuda::set_rmsnorm_narrow(true);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
