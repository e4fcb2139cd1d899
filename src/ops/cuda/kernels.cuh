// ops/cuda/kernels.cuh — launchers of the CUDA kernels, callable from C++ (g++) translation units.
//
// Invariants: .cu files include only this header and CUDA headers (no fmt, no core/error.h: nvcc and fmt's
// consteval checks do not mix); launchers take raw device pointers and a stream, return the launch status,
// and the C++ side turns a failure into swift::Error naming the op.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

// dtype codes as in core/dtype.h: 0 = F32, 1 = BF16, 2 = F16.
cudaError_t launch_cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n, cudaStream_t stream);

}  // namespace swift::ops::cuda
