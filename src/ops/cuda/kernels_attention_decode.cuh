// ops/cuda/kernels_attention_decode.cuh — launcher of the attention-against-a-KV-cache kernels
// (attention_decode.cu), callable from C++ (g++) translation units.
//
// Invariants:
//  - Plain arguments only (no fmt, no core/error.h, no Tensor): raw device pointers, sizes, the dtype code
//    (0 = F32, 1 = BF16, 2 = F16 as in core/dtype.h) shared by q, the caches and out, the stream; returns the
//    launch status.
//  - Layouts: q/out (Tq, Hq, D); k/v caches (rows >= start + Tq, Hkv, D), contiguous row-major. Query i sits at
//    position start + i and sees keys j with j <= start + i and, when window > 0, start + i - j < window.
//  - Split-K (flash-decoding): the visible keys of each (query, head) row are cut into `splits` chunks of `chunk`
//    keys; each chunk's block writes (max, sum of exponentials, unnormalised output) in fp32 to the workspace and a
//    second kernel combines them. With one split the first kernel writes the output directly (no workspace).
//  - Position on the device (CUDA graphs): with start_device set, the kernels read the position of query 0 from that
//    I32 and `start` is only the bound it stays under (start_device[0] <= start): the split is sized for `start`, so
//    every launch with the same bound runs the same grid with the same chunk boundaries (bit-identical results
//    whatever the position). Keys past the bound are never read; the caller keeps the position within it.
//  - launch_kv_cache_write copies this step's keys and values into the cache rows at a position read on the device
//    (rows past the capacity are not written); a byte-exact copy.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

struct AttentionDecodeArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t queries = 0;  // Tq
  int64_t start = 0;    // position of query 0 (with start_device: the largest it may be)
  const int32_t* start_device = nullptr;  // (1) I32 on the device: the position of query 0, read by the kernels
  int64_t window = 0;   // 0 = unlimited
  int32_t hq = 0, hkv = 0, head_dim = 0;
  float scale = 1.0f;
  int dtype = 0;  // 0 = F32, 1 = BF16, 2 = F16
};

struct AttentionDecodeSplit {
  int32_t splits = 1;  // key chunks per row
  int32_t chunk = 0;   // keys per chunk (a multiple of 64, at most kAttentionDecodeMaxChunk)
};
constexpr int32_t kAttentionDecodeMaxChunk = 4096;  // keys per chunk (fp32 scores in shared memory: 16 KiB)
constexpr int32_t kAttentionDecodeMaxSplits = 1024;
constexpr int32_t kAttentionDecodeMaxHeadDim = 1024;

// Keys visible to the row that sees the most (the last query's).
int64_t attention_decode_max_keys(const AttentionDecodeArgs& a);
// The split for `a` on a device of `sm_count` multiprocessors: enough blocks to fill the device twice over, chunks
// of at least 64 keys. chunk > kAttentionDecodeMaxChunk means the cache is too long for these kernels.
AttentionDecodeSplit attention_decode_split(const AttentionDecodeArgs& a, int sm_count);
// F32 elements of workspace the launch needs (0 with one split).
int64_t attention_decode_workspace_floats(const AttentionDecodeArgs& a, const AttentionDecodeSplit& s);
cudaError_t launch_attention_decode(const AttentionDecodeArgs& a, const AttentionDecodeSplit& s, float* workspace,
                                    cudaStream_t stream);

// k_new, v_new: (rows, row_elems) -> rows [row[0], row[0] + rows) of k_cache, v_cache (capacity, row_elems); elements
// of elem_bytes (2 or 4) bytes; row: (1) I32 on the device. Rows at or past `capacity` (or before 0) are skipped.
cudaError_t launch_kv_cache_write(const void* k_new, const void* v_new, void* k_cache, void* v_cache, const int32_t* row,
                                  int64_t rows, int64_t row_elems, int64_t capacity, int elem_bytes, cudaStream_t stream);

}  // namespace swift::ops::cuda
