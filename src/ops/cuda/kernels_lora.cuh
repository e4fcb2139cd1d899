// ops/cuda/kernels_lora.cuh — launchers of the rank-r LoRA passes (lora.cu). Host-callable, no CUDA headers beyond
// the runtime; errors come back as cudaError_t (the ops_*.cpp wrappers throw naming the op).
//
// Every launcher takes the fast path's conditions (lora_fast_shape(k, r): r in {8, 16}, k % 8 == 0; activations F32,
// BF16 or F16, dtype code 0 / 1 / 2; pointers 16-byte aligned) and returns cudaErrorInvalidValue otherwise, so the caller
// falls back to its GEMM path. Dropout multipliers are those of ops.h (threshold 0, keep_scale 1: none), at the
// stream indices of `map` (ops/philox.h DropoutMap: the operand's place in the full tensor; {} = identity).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/philox.h"

namespace swift::ops::cuda {

bool lora_fast_shape(int64_t k, int r);

// Work shapes of the passes: rows per group, all of a group's loads issued before its math (xa: 2 or 4, 0 = by rank:
// 4 for r = 8, 2 for r = 16; rank update 2 or 4; da 2, 4 or 8 rows per warp and chunk). Every configuration gives
// the same bits (the summation order does not depend on it). The default is the fastest measured on an H200 at the
// 7B shapes (bench/bench_lora.cpp, docs/PERFORMANCE.md); the others exist for BF16 only (other types:
// cudaErrorInvalidValue).
struct LoraKernelConfig {
  int xa_rows = 0;
  int update_rows = 2;
  int da_rows = 4;
  // xa and da on tensor cores where they can (r 8, BF16 x, the default xa_rows / da_rows; with a dropout, a map whose
  // 8-column groups are whole Philox blocks): the fp32 factor as three bf16 terms, exact products (lora.cu). False:
  // the CUDA-core kernels.
  bool tensor_cores = true;
  // The rank update for r 8 (the default update_rows) with each lane's 4 columns of the factor in registers and the
  // rows streamed through a cp.async ring (lora_ring.cu) instead of the factor read from shared memory per element
  // (with cached keep bits: where k % 32 == 0); the same bits.
  bool factor_in_registers = true;
};

// Column splits of the xa pass; `part` needs lora_xa_splits(k) * n * r floats when that is > 1 (else unused).
int64_t lora_xa_splits(int64_t k);
// xa (n, r) F32 = dropout(x) a^T in one read of x (x: (n, k), a: (r, k) F32). With a dropout (threshold != 0) and
// keep_bits non-null, the mask is also stored there: (n, k / 8) bytes, bit j of byte (row, c) = element
// (row, 8c + j) kept.
cudaError_t launch_lora_xa(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r, uint64_t seed,
                           uint32_t threshold, float keep_scale, const DropoutMap& map, float* part, float* xa,
                           uint8_t* keep_bits, cudaStream_t stream, const LoraKernelConfig& config = {});
// launch_lora_xa with the mask read from keep_bits (the (n, k / 8) cache of this very mask, already written:
// swiglu_drawing_mask) where the tensor-core pass runs (its draws and its reads of the cache give the same bits);
// elsewhere the mask is drawn again (the same mask) and keep_bits is left as it is.
cudaError_t launch_lora_xa_from_bits(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r,
                                     uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                                     float* part, float* xa, const uint8_t* keep_bits, cudaStream_t stream,
                                     const LoraKernelConfig& config = {});

// Several LoRA linears reading the same x (a layer's q, k, v; gate, up): the xa / da passes of up to kLoraMaxXJobs
// of them in one launch, each job's blocks next to the others' on the same rows and columns of x (the later reads hit
// L2). Per job: its factor (xa: a (r, k); da: g (n, r)), dropout seed, keep bits (xa: stored if non-null; da: read
// if non-null), partial buffer (as the single launcher's) and output (xa (n, r) = ; da (r, k) +=). The threshold,
// keep_scale, map and scale are the group's. Every job's result has the bits of the single launcher's.
constexpr int kLoraMaxXJobs = 3;
struct LoraXJob {
  const float* f = nullptr;
  uint64_t seed = 0;
  uint8_t* keep_bits = nullptr;
  float* part = nullptr;
  float* out = nullptr;
};
cudaError_t launch_lora_xa_group(const void* x, int x_dtype, int64_t n, int64_t k, int r, uint32_t threshold,
                                 float keep_scale, const DropoutMap& map, const LoraXJob* jobs, int count,
                                 cudaStream_t stream, const LoraKernelConfig& config = {});
cudaError_t launch_lora_da_group(const void* x, int x_dtype, int64_t n, int64_t k, int r, float scale,
                                 uint32_t threshold, float keep_scale, const DropoutMap& map, const LoraXJob* jobs,
                                 int count, cudaStream_t stream, const LoraKernelConfig& config = {});

// y (n, k) += scale * multiplier * (g F) in one read and write of y; g: (n, r) F32; F = f as (r, k), or
// f_transposed: f stored (k, r) (LoRA's b for the forward's B product). The multipliers come from keep_bits (the
// forward's cache of the same mask) when it is non-null, else from the generator. overwrite: y = that product, y is
// not read (the forward writes it before the frozen product accumulates onto it). residual (n, k) in y's dtype,
// non-null for the B product of r 8 only (f_transposed, no overwrite, the default config): y = (y + residual) +
// scale * (g F), each read once (add_lora_residual).
cudaError_t launch_lora_rank_update(void* y, int y_dtype, const float* g, const float* f, bool f_transposed, int64_t n,
                                    int64_t k, int r, float scale, uint64_t seed, uint32_t threshold, float keep_scale,
                                    const DropoutMap& map, const uint8_t* keep_bits, cudaStream_t stream,
                                    const LoraKernelConfig& config = {}, bool overwrite = false,
                                    const void* residual = nullptr);

// The dx terms of 2 or 3 LoRA linears over one x (r 8) in one read and write of y (n, k): y += scale * mult_j *
// (g_j f_j) for j in order, g_j (n, 8) and f_j (8, k) F32, each sum rounded as launch_lora_rank_update rounds y (the
// bits of those launches in order). The multipliers come from each job's keep-bits cache (threshold > 0: all
// non-null). lora_rank_update_group_fits: whether the launch takes these (else call launch_lora_rank_update per job).
bool lora_rank_update_group_fits(int64_t k, int count, uint32_t threshold, const uint8_t* const* keep_bits);
cudaError_t launch_lora_rank_update_group(void* y, int y_dtype, const float* const* g, const float* const* f,
                                          const uint8_t* const* keep_bits, int count, int64_t n, int64_t k,
                                          float scale, uint32_t threshold, float keep_scale, cudaStream_t stream);

// The MLP's down (a LoRA linear over act = swiglu(gate, up), r 8) into the swiglu's backward, in one pass: d = dact +
// scale * mult * (g a) rounded as launch_lora_rank_update rounds dx, then dgate, dup as launch_swiglu_backward computes
// them from that d (the bits of those two launches; act's gradient is not stored). dact, gate, up, dgate, dup: (n, k)
// of dtype code 0 / 1 / 2, dgate may be dact and dup may be up; g (n, 8), a (8, k) F32; the multipliers from keep_bits
// when non-null, else drawn. lora_swiglu_backward_fits: whether the launch takes k (else the two launches).
bool lora_swiglu_backward_fits(int64_t k, uint32_t threshold, const uint8_t* keep_bits);
cudaError_t launch_lora_swiglu_backward(const void* dact, const void* gate, const void* up, int dtype, const float* g,
                                        const float* a, int64_t n, int64_t k, float scale, uint64_t seed,
                                        uint32_t threshold, float keep_scale, const DropoutMap& map,
                                        const uint8_t* keep_bits, void* dgate, void* dup, cudaStream_t stream);

// LoRA's B product as our Hopper GEMM's tail (lora_tail.cu, gemm_sm90.cuh tail_*; r 8): xa (n, 8) F32 into its
// (n, 64) BF16 tail, scale * b (m, 8) F32 and the bias (m) (BF16 or F32 by bias_bf16; null: none) into its (m, 64)
// BF16 tail; tail_xa tail_b^T = scale * xa b^T (+ bias) to ~2^-24.
cudaError_t launch_lora_tail_xa(const float* xa, int64_t n, void* tail, cudaStream_t stream);
cudaError_t launch_lora_tail_b(const float* b, int64_t m, float scale, const void* bias, bool bias_bf16, void* tail,
                               cudaStream_t stream);
// LoRA's dx term as the first k-block of our Hopper GEMM with B stored (k, m): g (n, 8) F32 into its (n, 64) tail
// (launch_lora_tail_xa), scale * a (8, m) F32 into its (64, m) BF16 rows (b's pieces, transposed; rows 48-63 zero):
// tail_g tail_a = scale * g a to ~2^-24.
cudaError_t launch_lora_tail_a_rows(const float* a, int64_t m, float scale, void* tail, cudaStream_t stream);

// Row slices of the da pass (a function of the shape only); `part` needs lora_da_slices(n, k, r) * r * k floats.
int64_t lora_da_slices(int64_t n, int64_t k, int r);
// da (r, k) += scale * g^T dropout(x) in one read of x; g: (n, r) F32; the mask from keep_bits when non-null.
cudaError_t launch_lora_da(const void* x, int x_dtype, const float* g, int64_t n, int64_t k, int r, float scale,
                           uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                           const uint8_t* keep_bits, float* part, float* da, cudaStream_t stream,
                           const LoraKernelConfig& config = {});

// The dy pass's work (a function of the shape only): column tiles and row blocks, and the floats of its two
// partial buffers (part_g: column partials of g, 0 with one tile; part_db: row-block partials of db).
struct LoraDyWork {
  int64_t col_tiles = 0, row_blocks = 0, part_g_floats = 0, part_db_floats = 0;
};
LoraDyWork lora_dy_work(int64_t n, int64_t m, int r);
// The backward's two products of dy (n, m) in one read of dy, r = 8, BF16 dy, m % 8 == 0, 4-byte aligned dy:
// g (n, r) F32 = dy b and db (m, r) F32 += scale * dy^T xa, with b (m, r) and xa (n, r) F32 rounded to bf16 as the
// two cuBLASLt products round them (tensor cores, fp32 accumulation). g or db may be null (not computed).
// Deterministic: g sums its column tiles in order, db its row blocks in order, each in a fixed order.
cudaError_t launch_lora_dy(const void* dy, int dy_dtype, const float* b, const float* xa, int64_t n, int64_t m, int r,
                           float scale, float* g, float* db, float* part_g, float* part_db, cudaStream_t stream);
// One job of launch_lora_swiglu_dy: b (m, 8) and xa (n, 8) F32; g (n, 8) F32 written and db (m, 8) F32 += (either
// null: not computed), with their partial buffers sized by lora_dy_work(n, m, 8) as launch_lora_dy's.
struct LoraDyOutputs {
  const float* b = nullptr;
  const float* xa = nullptr;
  float* g = nullptr;
  float* db = nullptr;
  float* part_g = nullptr;
  float* part_db = nullptr;
};
// The swiglu's backward (launch_swiglu_backward, BF16: dgate, dup of out = silu(gate) * up at gradient dout, all
// (n, m)) with launch_lora_dy over each of its outputs in the same pass: jobs[0] over dgate, jobs[1] over dup, the
// bits of launch_swiglu_backward then launch_lora_dy for each (lora_dy.cu). dgate may be dout and dup may be up (in
// place); m % 8 == 0, 16-byte aligned rows.
cudaError_t launch_lora_swiglu_dy(const void* dout, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                                  int64_t m, const LoraDyOutputs (&jobs)[2], float scale, cudaStream_t stream);

// The MLP's gate and up get their B products and feed the swiglu in one pass (r = 8 only; gate, up, out (n, k) of
// dtype code 0 / 1 / 2; xg, xu: (n, 8) F32; bg, bu: (k, 8) F32, LoRA's b): gate += scale * xg bg^T and up likewise,
// in place and rounded exactly as launch_lora_rank_update rounds y, then out = swiglu(gate, up) as launch_swiglu.
// factor_in_registers: as LoraKernelConfig's (lora_ring.cu); the same bits either way.
cudaError_t launch_lora_swiglu(void* gate, void* up, int dtype, const float* xg, const float* bg, const float* xu,
                               const float* bu, int64_t n, int64_t k, int r, float scale, void* out,
                               cudaStream_t stream, bool factor_in_registers = true);

}  // namespace swift::ops::cuda
