// tests/ops/test_ops.cpp — fast CPU ops against the reference (ops::ref) on odd shapes and every weight dtype:
// cast, add, swiglu, embedding, linear, gemm, rmsnorm; plus argument errors and the CUDA "no kernel" path.
//
// Invariants:
//  - Every output is guarded (bytes around it must stay untouched), starts as NaN (unwritten elements fail
//    the finite check) and is compared with the reference under a named tolerance that says why.
//  - Shapes mix tiny and odd sizes (1, 5, 7, 13, 33) with sizes that take the parallel/blocked code paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>

#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// ---- tolerances ----------------------------------------------------------------------------------------------
// Exact ops: conversions and copies are deterministic roundings; an fp32 add of two fp32 values equals the
// double sum rounded once.
constexpr double kExact = 0.0;
// fp32 dot products of length K against double accumulation, |x|, |w| <= 1: partial sums random-walk to
// ~sqrt(K), each addition rounds by <= 0.5 ulp of the partial sum, and those errors random-walk too:
// ~sqrt(K) * sqrt(K) * eps / 2 = K eps / 2, whatever the final value (cancellation leaves the error). Allow
// 2 K eps absolute (4x margin), plus 4 eps relative for the final bias / accumulate / beta additions. A wrong
// element is off by O(0.1..1) and fails by orders of magnitude.
constexpr double kDotTolPerK = 2.0 * 1.1920929e-7;
constexpr double kFinalAddRtol = 4.0 * 1.1920929e-7;
// swiglu: exp_approx (<= 1 ulp) then a divide and a multiply in fp32: a few ulp relative.
constexpr double kSwigluRtol = 1e-6;
constexpr double kSwigluAtol = 1e-7;
// rmsnorm: variance rounded to fp32, then 1/sqrt, x*rstd and weight*(.) each rounded in fp32: <= ~4 ulp.
constexpr double kNormRtol = 8e-7;
constexpr double kNormAtol = 1e-7;

double dot_tol(int64_t k) { return kDotTolPerK * static_cast<double>(std::max<int64_t>(k, 1)); }

const DType kWeightDTypes[] = {DType::F32, DType::BF16, DType::F16};

std::string dname(DType d) { return dtype_name(d); }

// ---- cast ----------------------------------------------------------------------------------------------------
TEST(OpsCast, AllDTypePairsMatchReferenceBitExactly) {
  for (int64_t n : {1, 5, 13 * 33, 70001}) {
    for (DType from : kWeightDTypes) {
      for (DType to : kWeightDTypes) {
        SCOPED_TRACE(dname(from) + "->" + dname(to) + " n=" + std::to_string(n));
        Tensor src = random_tensor({n}, from, 11, -70000.0f, 70000.0f);  // overflows F16 at the ends
        Guarded fast({n}, to), ref({n}, to);
        ops::cast(src, fast.tensor);
        ops::ref::cast(src, ref.tensor);
        EXPECT_TRUE(fast.guards_intact());
        EXPECT_TRUE(bit_equal(fast.tensor, ref.tensor));
      }
    }
  }
}

TEST(OpsCast, SpecialValuesRoundLikeTheScalarConversions) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.5f, inf, -inf, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 6e-8f,
                               3e-8f, 2.98e-8f, 1e-40f, 3.4e38f, 1.00390625f, 1.001953125f, 0.1f, -7.0e-5f};
  while (values.size() % 8 != 3) values.push_back(static_cast<float>(values.size()) * 0.37f);  // tails too
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor src = Tensor::from_f32({n}, values);
  for (DType to : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dname(to));
    Guarded fast({n}, to), ref({n}, to);
    ops::cast(src, fast.tensor);
    ops::ref::cast(src, ref.tensor);
    EXPECT_TRUE(fast.guards_intact());
    EXPECT_TRUE(bit_equal(fast.tensor, ref.tensor));
    Guarded back({n}, DType::F32), back_ref({n}, DType::F32);
    ops::cast(fast.tensor, back.tensor);
    ops::ref::cast(ref.tensor, back_ref.tensor);
    EXPECT_TRUE(bit_equal(back.tensor, back_ref.tensor));
  }
  // NaN stays NaN.
  Tensor nan = Tensor::from_f32({9}, std::vector<float>(9, std::nanf("")));
  for (DType to : {DType::BF16, DType::F16}) {
    Guarded out({9}, to);
    out.tensor.zero_();
    ops::cast(nan, out.tensor);
    for (int64_t i = 0; i < 9; ++i) EXPECT_TRUE(std::isnan(out.tensor.item(i))) << dname(to) << " " << i;
  }
}

// ---- add / swiglu --------------------------------------------------------------------------------------------
TEST(OpsElementwise, AddMatchesReferenceAndMayAlias) {
  for (const Shape& shape : {Shape{1}, Shape{5, 7}, Shape{13, 33}, Shape{300, 301}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor a = random_tensor(shape, DType::F32, 1), b = random_tensor(shape, DType::F32, 2);
    Guarded fast(shape, DType::F32), ref(shape, DType::F32);
    ops::add(a, b, fast.tensor);
    ops::ref::add(a, b, ref.tensor);
    EXPECT_TRUE(fast.guards_intact());
    EXPECT_TRUE(all_finite(fast.tensor));
    EXPECT_TRUE(all_close(fast.tensor, ref.tensor, kExact, kExact));
    Tensor alias = a.clone();
    ops::add(alias, b, alias);
    EXPECT_TRUE(bit_equal(alias, fast.tensor));
  }
}

TEST(OpsElementwise, SwigluMatchesReferenceAndMayAlias) {
  for (const Shape& shape : {Shape{1, 1}, Shape{5, 7}, Shape{13, 33}, Shape{64, 1536}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor gate = random_tensor(shape, DType::F32, 3, -12.0f, 12.0f), up = random_tensor(shape, DType::F32, 4, -3.0f, 3.0f);
    Guarded fast(shape, DType::F32), ref(shape, DType::F32);
    ops::swiglu(gate, up, fast.tensor);
    ops::ref::swiglu(gate, up, ref.tensor);
    EXPECT_TRUE(fast.guards_intact());
    EXPECT_TRUE(all_finite(fast.tensor));
    EXPECT_TRUE(all_close(fast.tensor, ref.tensor, kSwigluAtol, kSwigluRtol));
    Tensor alias = up.clone();
    ops::swiglu(gate, alias, alias);
    EXPECT_TRUE(bit_equal(alias, fast.tensor));
  }
}

TEST(OpsElementwise, SwigluExtremes) {
  Tensor gate = Tensor::from_f32({8}, {-200.0f, -88.5f, -87.0f, -20.0f, 0.0f, 20.0f, 88.5f, 200.0f});
  Tensor up = Tensor::from_f32({8}, std::vector<float>(8, 1.5f));
  Guarded fast({8}, DType::F32), ref({8}, DType::F32);
  ops::swiglu(gate, up, fast.tensor);
  ops::ref::swiglu(gate, up, ref.tensor);
  EXPECT_TRUE(all_finite(fast.tensor));
  EXPECT_TRUE(all_close(fast.tensor, ref.tensor, kSwigluAtol, kSwigluRtol));
}

// ---- embedding -----------------------------------------------------------------------------------------------
TEST(OpsEmbedding, GathersRowsExactlyForEveryTableDType) {
  for (DType dtype : kWeightDTypes) {
    for (auto [vocab, c, tokens] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 5, 13}, {33, 64, 200},
                                    {1000, 576, 129}}) {
      SCOPED_TRACE(dname(dtype) + " V=" + std::to_string(vocab) + " C=" + std::to_string(c));
      Tensor table = random_tensor({vocab, c}, dtype, 5);
      std::vector<int32_t> id(static_cast<size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t) id[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 3) % vocab);
      id.back() = static_cast<int32_t>(vocab - 1);
      Tensor ids = Tensor::from_i32({tokens}, id);
      Guarded fast({tokens, c}, DType::F32), ref({tokens, c}, DType::F32);
      ops::embedding(table, ids, fast.tensor);
      ops::ref::embedding(table, ids, ref.tensor);
      EXPECT_TRUE(fast.guards_intact());
      EXPECT_TRUE(all_finite(fast.tensor));
      EXPECT_TRUE(bit_equal(fast.tensor, ref.tensor));
    }
  }
}

TEST(OpsEmbedding, BadIdThrowsNamingIdAndPosition) {
  Tensor table = random_tensor({10, 4}, DType::BF16, 6);
  Tensor out = Tensor::empty({3, 4}, DType::F32);
  Tensor ids = Tensor::from_i32({3}, {1, 10, 2});
  EXPECT_TRUE(throws_error([&] { ops::embedding(table, ids, out); }, {"embedding", "10", "position 1", "[0, 10)"}));
  Tensor negative = Tensor::from_i32({3}, {1, 2, -1});
  EXPECT_TRUE(throws_error([&] { ops::embedding(table, negative, out); }, {"embedding", "-1", "position 2"}));
  EXPECT_TRUE(throws_error([&] { ops::ref::embedding(table, negative, out); }, {"embedding", "-1"}));
}

// ---- linear --------------------------------------------------------------------------------------------------
struct LinearShape {
  int64_t n, k, m;
};
const LinearShape kLinearShapes[] = {
    {1, 1, 1},      {1, 5, 7},     {5, 7, 13},  {13, 33, 5},  {33, 64, 200}, {64, 200, 33}, {3, 576, 1536},
    {20, 576, 1000},  // 16-bit weights: several converted row blocks per thread panel
    {300, 200, 40},   // narrow output: rows of x split across threads
    {300, 200, 100}, {129, 13, 257},
};

class OpsLinear : public ::testing::TestWithParam<std::tuple<DType, bool, bool>> {};

TEST_P(OpsLinear, MatchesReference) {
  auto [wdtype, with_bias, accumulate] = GetParam();
  uint32_t seed = 100;
  for (const LinearShape& s : kLinearShapes) {
    SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " M=" + std::to_string(s.m));
    Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed);
    Tensor w = random_tensor({s.m, s.k}, wdtype, ++seed);
    Tensor bias = with_bias ? random_tensor({s.m}, wdtype, ++seed) : Tensor();
    Guarded fast({s.n, s.m}, DType::F32), ref({s.n, s.m}, DType::F32);
    if (accumulate) {
      Tensor init = random_tensor({s.n, s.m}, DType::F32, ++seed);
      fast.set(init);
      ref.set(init);
    }
    ops::linear(x, w, bias, fast.tensor, accumulate);
    ops::ref::linear(x, w, bias, ref.tensor, accumulate);
    EXPECT_TRUE(fast.guards_intact());
    EXPECT_TRUE(all_finite(fast.tensor));
    EXPECT_TRUE(all_close(fast.tensor, ref.tensor, dot_tol(s.k), kFinalAddRtol));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightsBiasAccumulate, OpsLinear,
                         ::testing::Combine(::testing::ValuesIn(kWeightDTypes), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return dname(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_bias" : "_nobias") +
                                  (std::get<2>(info.param) ? "_accumulate" : "_assign");
                         });

// linear_residual on the CPU: linear onto a copy of the residual, bit for bit, and the reference's within linear's
// tolerance; the residual untouched; y itself as
// the residual is linear with accumulate; a residual of another shape or dtype, or overlapping y in part, refused.
TEST(OpsLinearResidual, IsLinearOntoACopy) {
  const Tensor x = random_tensor({9, 13}, DType::F32, 1), w = random_tensor({7, 13}, DType::BF16, 2);
  const Tensor bias = random_tensor({7}, DType::F32, 3), residual = random_tensor({9, 7}, DType::F32, 4);
  const Tensor kept = residual.clone();
  Tensor y = Tensor::empty({9, 7}, DType::F32), want = residual.clone();
  ops::linear_residual(x, w, bias, residual, y);
  ops::linear(x, w, bias, want, /*accumulate=*/true);
  EXPECT_TRUE(bit_equal(y, want));
  Tensor ref = residual.clone();  // the reference: linear accumulating onto the residual, in double
  ops::ref::linear(x, w, bias, ref, /*accumulate=*/true);
  EXPECT_TRUE(all_close(y, ref, dot_tol(13), kFinalAddRtol));
  EXPECT_TRUE(bit_equal(residual, kept));
  Tensor in_place = residual.clone();
  ops::linear_residual(x, w, bias, in_place, in_place);
  EXPECT_TRUE(bit_equal(in_place, want));
  EXPECT_TRUE(throws_error([&] { ops::linear_residual(x, w, bias, Tensor::zeros({9, 6}, DType::F32), y); },
                           {"linear_residual", "residual", "same shape"}));
  Tensor big = Tensor::zeros({10, 7}, DType::F32);
  Tensor top = big.slice_rows(0, 9);
  EXPECT_TRUE(throws_error([&] { ops::linear_residual(x, w, bias, big.slice_rows(1, 10), top); },
                           {"linear_residual", "partly overlaps"}));
}

TEST(OpsLinearEdge, EmptyRowsAndZeroK) {
  Tensor w = random_tensor({7, 5}, DType::BF16, 1);
  Tensor x0 = Tensor::empty({0, 5}, DType::F32);
  Tensor y0 = Tensor::empty({0, 7}, DType::F32);
  ops::linear(x0, w, Tensor(), y0);  // nothing to do, must not crash
  Tensor xk = Tensor::empty({3, 0}, DType::F32);
  Tensor wk = Tensor::empty({4, 0}, DType::F16);
  Tensor bias = Tensor::from_f32({4}, {1, 2, 3, 4});
  Guarded y({3, 4}, DType::F32), yr({3, 4}, DType::F32);
  ops::linear(xk, wk, bias, y.tensor);
  ops::ref::linear(xk, wk, bias, yr.tensor);
  EXPECT_TRUE(bit_equal(y.tensor, yr.tensor));
  EXPECT_EQ(y.tensor.item(5), 2.0);
}

// ---- gemm ----------------------------------------------------------------------------------------------------
class OpsGemm : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(OpsGemm, MatchesReference) {
  auto [trans_a, trans_b] = GetParam();
  uint32_t seed = 500;
  for (const LinearShape& s : {LinearShape{1, 1, 1}, {5, 7, 13}, {13, 33, 5}, {64, 200, 33}, {200, 64, 33},
                               {33, 150, 300}, {257, 300, 7}}) {
    for (auto [alpha, beta] : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}}) {
      SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " M=" + std::to_string(s.m) +
                   " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta));
      Tensor a = trans_a ? random_tensor({s.k, s.n}, DType::F32, ++seed) : random_tensor({s.n, s.k}, DType::F32, ++seed);
      Tensor b = trans_b ? random_tensor({s.m, s.k}, DType::F32, ++seed) : random_tensor({s.k, s.m}, DType::F32, ++seed);
      Guarded fast({s.n, s.m}, DType::F32), ref({s.n, s.m}, DType::F32);
      if (beta != 0.0f) {  // with beta == 0, c stays NaN: BLAS semantics say it is not read
        Tensor init = random_tensor({s.n, s.m}, DType::F32, ++seed);
        fast.set(init);
        ref.set(init);
      }
      ops::gemm(trans_a, trans_b, alpha, a, b, beta, fast.tensor);
      ops::ref::gemm(trans_a, trans_b, alpha, a, b, beta, ref.tensor);
      EXPECT_TRUE(fast.guards_intact());
      EXPECT_TRUE(all_finite(fast.tensor));
      EXPECT_TRUE(all_close(fast.tensor, ref.tensor, dot_tol(s.k) * std::fabs(alpha), kFinalAddRtol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transposes, OpsGemm, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "At" : "A") +
                                  (std::get<1>(info.param) ? "Bt" : "B");
                         });

// ---- rmsnorm -------------------------------------------------------------------------------------------------
class OpsRmsnorm : public ::testing::TestWithParam<DType> {};

TEST_P(OpsRmsnorm, MatchesReferenceWithAndWithoutRstd) {
  const DType wdtype = GetParam();
  uint32_t seed = 900;
  for (const Shape& shape : {Shape{1, 1}, Shape{5, 7}, Shape{13, 33}, Shape{64, 576}, Shape{200, 64}, Shape{3, 1537}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor x = random_tensor(shape, DType::F32, ++seed, -4.0f, 4.0f);
    Tensor w = random_tensor({shape[1]}, wdtype, ++seed, 0.5f, 1.5f);
    Guarded y(shape, DType::F32), yr(shape, DType::F32), rstd({shape[0]}, DType::F32), rstd_ref({shape[0]}, DType::F32);
    ops::rmsnorm(x, w, 1e-5f, y.tensor, rstd.tensor);
    ops::ref::rmsnorm(x, w, 1e-5f, yr.tensor, rstd_ref.tensor);
    EXPECT_TRUE(y.guards_intact());
    EXPECT_TRUE(rstd.guards_intact());
    EXPECT_TRUE(all_finite(y.tensor));
    EXPECT_TRUE(all_finite(rstd.tensor));
    EXPECT_TRUE(all_close(y.tensor, yr.tensor, kNormAtol, kNormRtol));
    EXPECT_TRUE(all_close(rstd.tensor, rstd_ref.tensor, 0.0, kNormRtol));
    Guarded y2(shape, DType::F32);
    Tensor none;
    ops::rmsnorm(x, w, 1e-5f, y2.tensor, none);
    EXPECT_TRUE(bit_equal(y2.tensor, y.tensor));
    Tensor inplace = x.clone();
    ops::rmsnorm(inplace, w, 1e-5f, inplace, none);
    EXPECT_TRUE(bit_equal(inplace, y.tensor));
  }
}

INSTANTIATE_TEST_SUITE_P(WeightDTypes, OpsRmsnorm, ::testing::ValuesIn(kWeightDTypes),
                         [](const auto& info) { return dname(info.param); });

TEST(OpsRmsnormEdge, ZeroRowGivesZeroAndFiniteRstd) {
  Tensor x = Tensor::zeros({2, 8}, DType::F32);
  Tensor w = random_tensor({8}, DType::F32, 1);
  Guarded y({2, 8}, DType::F32), rstd({2}, DType::F32);
  ops::rmsnorm(x, w, 1e-6f, y.tensor, rstd.tensor);
  EXPECT_TRUE(all_finite(y.tensor));
  EXPECT_EQ(y.tensor.item(3), 0.0);
  EXPECT_NEAR(rstd.tensor.item(0), 1000.0, 1e-3);
}

// ---- backend information -------------------------------------------------------------------------------------
TEST(OpsBackend, InfoNamesOpenBlasKernels) {
  const std::string info = ops::cpu_backend_info();
  std::printf("[ backend  ] %s\n", info.c_str());
  EXPECT_NE(info.find("kernels:"), std::string::npos);
}

// ---- argument errors -----------------------------------------------------------------------------------------
TEST(OpsErrors, ShapeAndDTypeMismatchesThrowNamingTheOp) {
  Tensor x = Tensor::zeros({3, 5}, DType::F32);
  Tensor w = Tensor::zeros({7, 4}, DType::F32);
  Tensor y = Tensor::zeros({3, 7}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w, Tensor(), y); }, {"linear: x F32[3, 5]", "w F32[7, 4]", "disagree on K"}));
  EXPECT_TRUE(throws_error([&] { ops::ref::linear(x, w, Tensor(), y); }, {"linear:", "disagree on K"}));
  Tensor w5 = Tensor::zeros({7, 5}, DType::F32);
  Tensor y_bad = Tensor::zeros({3, 6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w5, Tensor(), y_bad); }, {"linear: y F32[3, 6]"}));
  Tensor w_int = Tensor::zeros({7, 5}, DType::I32);
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w_int, Tensor(), y); }, {"linear: w I32[7, 5]", "F32, BF16 or F16"}));
  Tensor bias_bad = Tensor::zeros({6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w5, bias_bad, y); }, {"linear: bias"}));
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w5, Tensor(), x); }, {"linear:"}));  // y is x: wrong shape
  Tensor c = Tensor::zeros({3, 7}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::gemm(false, false, 1, x, w, 0, c); }, {"gemm:", "disagree on K"}));
  EXPECT_TRUE(throws_error([&] { ops::gemm(false, true, 1, x, w5, 0, y_bad); }, {"gemm: c"}));
  Tensor norm_w = Tensor::zeros({4}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { Tensor r; ops::rmsnorm(x, norm_w, 1e-6f, y, r); }, {"rmsnorm:"}));
  Tensor x_copy = x.clone();
  Tensor nw = Tensor::zeros({5}, DType::F32);
  Tensor rstd_bad = Tensor::zeros({4}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::rmsnorm(x, nw, 1e-6f, x_copy, rstd_bad); }, {"rmsnorm: rstd"}));
  EXPECT_TRUE(throws_error([&] { Tensor r; ops::rmsnorm(x, nw, -1.0f, x_copy, r); }, {"rmsnorm: eps"}));
  EXPECT_TRUE(throws_error([&] { ops::add(x, y, y); }, {"add:"}));
  EXPECT_TRUE(throws_error([&] { ops::swiglu(x, x, y); }, {"swiglu:"}));
  Tensor ints = Tensor::zeros({3, 5}, DType::I32);
  EXPECT_TRUE(throws_error([&] { ops::cast(ints, x_copy); }, {"cast: src I32[3, 5]"}));
  EXPECT_TRUE(throws_error([&] { ops::cast(x, y); }, {"cast:", "element count"}));
  Tensor halves(x.storage(), 0, {3, 5}, DType::BF16);  // the first half of x's bytes, as BF16
  EXPECT_TRUE(throws_error([&] { ops::cast(x, halves); }, {"cast: dst", "overlaps"}));
  EXPECT_NO_THROW(ops::cast(x, x));  // the same tensor: nothing to do
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { ops::add(x, undefined, y); }, {"add: b is undefined"}));
  // Outputs may not view read-only memory (a mapped weight file): an error, not a segfault.
  static float mapped[21];
  Tensor read_only(Storage::wrap(mapped, sizeof(mapped), Device::cpu(), nullptr), 0, {3, 7}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w5, Tensor(), read_only); }, {"linear:", "read-only"}));
}

// A stand-in CUDA backend (host memory) so tensors can claim to live on a GPU: ops must refuse them by name.
struct FakeCudaBackend : DeviceBackend {
  void* allocate(size_t bytes, int) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void release(void* ptr, size_t, int) override { std::free(ptr); }
  void copy(void* dst, Device, const void* src, Device, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void memset_zero(void* ptr, size_t bytes, int) override { std::memset(ptr, 0, bytes); }
};

TEST(OpsErrors, CudaTensorsThrowNoKernelAndMixedDevicesThrow) {
  static FakeCudaBackend fake;
  const bool had_cuda = device_backend_available(DeviceType::CUDA);
  if (had_cuda) GTEST_SKIP() << "a real CUDA backend is registered";
  register_device_backend(DeviceType::CUDA, &fake);
  {
    Tensor x = Tensor::zeros({3, 5}, DType::F32, Device::cuda());
    Tensor w = Tensor::zeros({7, 5}, DType::BF16, Device::cuda());
    Tensor y = Tensor::zeros({3, 7}, DType::F32, Device::cuda());
    EXPECT_TRUE(throws_error([&] { ops::linear(x, w, Tensor(), y); }, {"op linear: no CUDA kernel yet"}));
    EXPECT_TRUE(throws_error([&] { ops::add(y, y, y); }, {"op add: no CUDA kernel yet"}));
    EXPECT_TRUE(throws_error([&] { ops::ref::add(y, y, y); }, {"ref::add", "CPU only"}));
    Tensor y_cpu = Tensor::zeros({3, 7}, DType::F32);
    EXPECT_TRUE(throws_error([&] { ops::linear(x, w, Tensor(), y_cpu); }, {"linear:", "different devices"}));
    Tensor cu = Tensor::from_i32({2}, {0, 4}).to(Device::cuda());
    EXPECT_TRUE(throws_error([&] { ops::check_cu_seqlens(cu, 3, "attention"); }, {"attention: cu_seqlens", "ends at 4"}));
    // BF16 and F16 activations pass the argument checks on CUDA: the fake backend is reached.
    for (DType act : {DType::BF16, DType::F16}) {
      Tensor h = Tensor::zeros({3, 7}, act, Device::cuda());
      EXPECT_TRUE(throws_error([&] { ops::add(h, h, h); }, {"op add: no CUDA kernel yet"})) << dtype_name(act);
    }
  }
  register_device_backend(DeviceType::CUDA, nullptr);
}

// Activations are F32 on the CPU: BF16 and F16 ones are refused by the argument checks, naming the rule.
TEST(OpsErrors, CpuActivationsMustBeF32) {
  for (DType act : {DType::BF16, DType::F16}) {
    Tensor h = Tensor::zeros({3, 7}, act);
    EXPECT_TRUE(throws_error([&] { ops::add(h, h, h); },
                             {"add: a", "must be F32 (BF16 and F16 activations are accepted on CUDA devices only)"}))
        << dtype_name(act);
  }
}

}  // namespace
}  // namespace swift::test
