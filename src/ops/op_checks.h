// ops/op_checks.h — shape, dtype and device checks shared by the dispatcher (ops::) and the references (ops::ref::).
// Internal to src/ops: layers above include ops.h only.
//
// Invariants:
//  - Each check_<op> validates everything the op's kernels rely on (ranks, sizes, dtypes, one device for all
//    defined tensors, data-dependent rules such as token ids when the data is on the CPU) and throws
//    swift::Error with a message that starts with the op name and shows the offending tensors.
//  - After check_<op> returns, a kernel may index its tensors without further bounds checks.
//  - Checks never modify data.
#pragma once

#include <initializer_list>

#include "ops/ops.h"

namespace swift::ops::detail {

// True for F32, BF16 and F16: the dtypes weights may be stored in.
bool is_float_dtype(DType dtype);
// Returns the device shared by every defined tensor; throws naming the op when they disagree.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws "op <name>: no CUDA kernel yet (CUDA backend issue)".
[[noreturn]] void no_cuda_kernel(const char* op);
// Throws when a reference op is handed a non-CPU tensor.
void require_cpu(const char* op, Device device);

// Each returns the device all tensors live on.
Device check_cast(const Tensor& src, const Tensor& dst);
Device check_add(const Tensor& a, const Tensor& b, const Tensor& out);
Device check_swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
Device check_embedding(const Tensor& table, const Tensor& ids, const Tensor& out);
Device check_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
Device check_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c);
Device check_rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& y, const Tensor& rstd);
Device check_rope(const Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
Device check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
                       int64_t window, const Tensor& out, const Tensor& lse);

}  // namespace swift::ops::detail
