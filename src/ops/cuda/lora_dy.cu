// ops/cuda/lora_dy.cu — the first step of a LoRA linear's backward on tensor cores (r 8, BF16): g = dy b and
// db += scale dy^T xa in one read of dy (launch_lora_dy), and its MLP form (launch_lora_swiglu_dy), in which gate's and
// up's dy are made by the swiglu's backward in the same pass and never read back from memory.
// Both products of a 16 x 16 tile of dy run on mma.sync.m16n8k16 (bf16 operands, fp32 accumulation: the operands and
// rounding of the two cuBLASLt products the pass replaces, b and xa rounded to bf16): the tile, staged in the warp's
// shared memory in 16-byte row pieces (lora_stream.cuh's ChunkStream), is loaded as an A fragment (ldmatrix) that
// multiplies b's rows for g, and transposed (ldmatrix.trans) to multiply xa's rows for db.
//
// Invariants:
//  - Blocks (column tile of 256, row block of rows_per_block, a multiple of 128): warp w takes the block's 16-row
//    steps w, w + 8, ..., each a stream of 4 chunks of 64 columns, each chunk's 4 k-tiles in order: g's C fragment
//    (16 rows x 8) sums the step's 16 k-tiles (the row's partial over the tile goes to part_g[tile][row], or to g with
//    one tile); db's 16 C fragments (16 columns x 8 each) sum over the warp's steps, and the 8 warps' sums are added in
//    warp order into part_db[row block][c][rr]; the launcher's reductions add the tiles and row blocks in order. Every
//    order is fixed by (n, m), so the swiglu form gives each job the bits of launch_lora_dy over the gradient it
//    writes (and those gradients the bits of launch_swiglu_backward: swiglu_math.cuh's arithmetic, rounded once).
//  - The swiglu form (ops' SWIFT_LORA_SWIGLU_DY=1, off by default: no faster than the two passes, docs/PERFORMANCE.md
//    run 28) reads dout, gate and up as three streams of the same pieces into 192 KB of staging: one block of 16
//    warps per SM, a warp per row group and job (the one-job kernel's 64 + 4 accumulators, 128 registers). Each lane
//    turns the pieces it copied into dgate and dup, stores them to global memory (dgate may be dout, dup may be up:
//    each piece is read and then written by the one lane that owns it) and over gate's and up's staged pieces, from
//    which the pair's mma read once both halves are there (mbarriers per stage).
//  - m % 8 == 0 (a 16-byte piece is all in or out); pieces outside (n, m) are zeros and are not stored.
#include <cuda_bf16.h>

#include "ops/cuda/kernels_lora.cuh"
#include "ops/cuda/lora_common.cuh"
#include "ops/cuda/lora_stream.cuh"
#include "ops/cuda/swiglu_math.cuh"

namespace swift::ops::cuda {

namespace {

using namespace lora_detail;

// One job of a dy pass: its factor b (m, 8) and xa (n, 8), F32; part_g (g itself with one column tile) and part_db,
// either null (not computed).
struct DyJob {
  const float* b;
  const float* xa;
  float* part_g;
  float* part_db;
};
// The swiglu form's operands: dout, gate and up read, dgate and dup written (dgate may be dout, dup may be up).
struct SwigluDyIo {
  const __nv_bfloat16* src[3];  // dout, gate, up
  __nv_bfloat16* dgate;
  __nv_bfloat16* dup;
};
constexpr int kSwigluStreams = 3;
constexpr int kSwigluThreads = 2 * kThreads;  // two warps per row group: one per job
constexpr uint32_t kStreamBytes = kStagingBytes;  // one stream's staging

// Stages the g B fragments of the tile's 16 k-tiles of b (m, 8) for lane l: sbg[t][l] (b rounded to bf16). `first` and
// `stride`: the caller's threads that share the work.
__device__ __forceinline__ void stage_g_fragments(uint32_t (&sbg)[kDyKTiles][32][2], const float* b, int64_t m,
                                                  int64_t c0, int first, int stride) {
  for (int i = first; i < kDyKTiles * 32; i += stride) {
    const int t = i / 32, l = i % 32;
    const int64_t col = c0 + 16 * t + 2 * (l % 4);
    const int rank = l / 4;
    const auto at = [&](int64_t c) { return c < m ? b[c * 8 + rank] : 0.0f; };
    sbg[t][l][0] = pack_bf16x2(at(col), at(col + 1));
    sbg[t][l][1] = pack_bf16x2(at(col + 8), at(col + 9));
  }
}

// db's B fragment of the step at r0: xa rows r0 + 2 tid (+1) and + 8, rank gid, rounded to bf16 (zeros without db).
__device__ __forceinline__ void db_fragment(const float* xa, bool want_db, int64_t n, int64_t r0, int gid, int tid,
                                            uint32_t& xb0, uint32_t& xb1) {
  xb0 = xb1 = 0;
  if (!want_db) return;
  const auto xa_at = [&](int64_t row) { return row < n ? xa[row * 8 + gid] : 0.0f; };
  xb0 = pack_bf16x2(xa_at(r0 + 2 * tid), xa_at(r0 + 2 * tid + 1));
  xb1 = pack_bf16x2(xa_at(r0 + 2 * tid + 8), xa_at(r0 + 2 * tid + 9));
}

// One staged chunk's 4 k-tiles in order: g's C fragment cg and db's 16 fragments cdb (the chunk's 4 of them).
__device__ __forceinline__ void dy_chunk_products(const StreamStage& buf, int chunk, int lane,
                                                  const uint32_t (&sbg)[kDyKTiles][32][2], bool want_g, bool want_db,
                                                  uint32_t xb0, uint32_t xb1, float (&cg)[4],
                                                  float (&cdb)[kDyKTiles][4]) {
  const int mrow = (lane & 7) + ((lane >> 3) & 1) * 8, mhalf = lane >> 4;
#pragma unroll
  for (int kt = 0; kt < kDyChunkCols / 16; ++kt) {
    const int t = chunk * (kDyChunkCols / 16) + kt;
    const uint4* row_address = &buf[mrow][(2 * kt + mhalf) ^ (mrow % 8)];
    if (want_g) {
      uint32_t a[4];
      attn::ldmatrix_x4(a, row_address);
      mma_bf16_16816(cg, a, sbg[t][lane][0], sbg[t][lane][1]);
    }
    if (want_db) {  // the transposed tile: its blocks (0,0), (1,0), (0,1), (1,1) are matrices 0, 2, 1, 3
      uint32_t tr[4];
      attn::ldmatrix_x4_trans(tr, row_address);
      const uint32_t at[4] = {tr[0], tr[2], tr[1], tr[3]};
      mma_bf16_16816(cdb[t], at, xb0, xb1);
    }
  }
}

// dy_chunk_products with the chunk known only at run time: a switch, so that cdb's indices stay compile-time constants
// (registers).
__device__ __forceinline__ void dy_chunk_products_dyn(const StreamStage& buf, int chunk, int lane,
                                                      const uint32_t (&sbg)[kDyKTiles][32][2], bool want_g,
                                                      bool want_db, uint32_t xb0, uint32_t xb1, float (&cg)[4],
                                                      float (&cdb)[kDyKTiles][4]) {
  switch (chunk) {
    case 0: return dy_chunk_products(buf, 0, lane, sbg, want_g, want_db, xb0, xb1, cg, cdb);
    case 1: return dy_chunk_products(buf, 1, lane, sbg, want_g, want_db, xb0, xb1, cg, cdb);
    case 2: return dy_chunk_products(buf, 2, lane, sbg, want_g, want_db, xb0, xb1, cg, cdb);
    default: return dy_chunk_products(buf, 3, lane, sbg, want_g, want_db, xb0, xb1, cg, cdb);
  }
}

// cg (rows r0 + gid (+ 8), ranks 2 tid, 2 tid + 1) into part_g[tile][row] (g itself with one tile).
__device__ __forceinline__ void store_g(float* part_g, int64_t tiles, int64_t n, int64_t r0, int gid, int tid,
                                        const float (&cg)[4]) {
  float* dst = tiles > 1 ? part_g + static_cast<int64_t>(blockIdx.x) * n * 8 : part_g;
  const int64_t ra = r0 + gid, rb = r0 + gid + 8;
  if (ra < n) *reinterpret_cast<float2*>(dst + ra * 8 + 2 * tid) = make_float2(cg[0], cg[1]);
  if (rb < n) *reinterpret_cast<float2*>(dst + rb * 8 + 2 * tid) = make_float2(cg[2], cg[3]);
}

// The summed tile (256 x 8 floats: tile[c][rr]) into part_db[row block][c][rr], c-major like db; threads `first`,
// `first + stride`, ... share it.
__device__ __forceinline__ void store_db(float* part_db, const float (*tile)[8], int64_t m, int64_t c0, int first,
                                         int stride) {
  for (int i = first; i < kDyTileCols * 8; i += stride) {
    const int c = i / 8, rr = i % 8;
    if (c0 + c < m) part_db[(static_cast<int64_t>(blockIdx.y) * m + c0 + c) * 8 + rr] = tile[c][rr];
  }
}

// g = dy b and db += scale dy^T xa over one dy (see the invariants).
__global__ void __launch_bounds__(kThreads, 2)
    lora_dy_mma_kernel(const __nv_bfloat16* __restrict__ dy, int64_t n, int64_t m, int64_t rows_per_block,
                       const DyJob job) {
  __shared__ uint32_t sbg[kDyKTiles][32][2];
  extern __shared__ __align__(16) uint4 stream_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tid = lane % 4;
  const ChunkStream cs(stream_smem, dy, n, m, rows_per_block, blockIdx.x);
  cs.start();
  const bool want_g = job.part_g != nullptr, want_db = job.part_db != nullptr;
  stage_g_fragments(sbg, job.b, m, cs.c0, threadIdx.x, kThreads);
  __syncthreads();
  float cdb[kDyKTiles][4];
  zero_fragments(cdb);
  const int64_t tiles = (m + kDyTileCols - 1) / kDyTileCols;
  for (int step = 0; step < cs.steps; ++step) {
    const int64_t r0 = cs.first_row + static_cast<int64_t>(step) * kDyBlockStep;
    float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t xb0, xb1;
    db_fragment(job.xa, want_db, n, r0, gid, tid, xb0, xb1);
#pragma unroll
    for (int chunk = 0; chunk < kDyChunks; ++chunk) {
      const int item = step * kDyChunks + chunk;
      ChunkStream::wait();
      __syncwarp();
      cs.issue(item + kStages - 1);
      dy_chunk_products(cs.stage[item % kStages], chunk, lane, sbg, want_g, want_db, xb0, xb1, cg, cdb);
    }
    if (want_g) store_g(job.part_g, tiles, n, r0, gid, tid, cg);
  }
  if (!want_db) return;
  attn::cp_async_wait_all();
  float (*tile)[8] = reinterpret_cast<float (*)[8]>(stream_smem);  // 256 x 8 floats over the staging
  sum_warp_fragments(tile, cdb, warp, gid, tid);
  store_db(job.part_db, tile, m, cs.c0, threadIdx.x, kThreads);
}

// The swiglu's backward of the lane's 8 elements staged at d_addr, g_addr, u_addr (shared addresses): dgate and dup as
// packed bf16 pairs (swiglu_grads, each rounded once to nearest even).
__device__ __forceinline__ void swiglu_piece(uint32_t d_addr, uint32_t g_addr, uint32_t u_addr, uint4& dgate,
                                             uint4& dup) {
  uint4 d, g, u;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(d.x), "=r"(d.y), "=r"(d.z), "=r"(d.w) : "r"(d_addr));
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(g.x), "=r"(g.y), "=r"(g.z), "=r"(g.w) : "r"(g_addr));
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "r"(u_addr));
  const uint32_t dw[4] = {d.x, d.y, d.z, d.w}, gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
  float dv[8], gv[8], uv[8], dg[8], du[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    pair_to_float2<__nv_bfloat16>(dw[w], dv[2 * w], dv[2 * w + 1]);
    pair_to_float2<__nv_bfloat16>(gw[w], gv[2 * w], gv[2 * w + 1]);
    pair_to_float2<__nv_bfloat16>(uw[w], uv[2 * w], uv[2 * w + 1]);
  }
  // (The 8 elements side by side, with the divisions' common path unbranched, spilled at this kernel's 128 registers
  // and were no faster: docs/PERFORMANCE.md run 28.)
#pragma unroll
  for (int q = 0; q < 8; ++q) swiglu_grads(dv[q], gv[q], uv[q], dg[q], du[q]);
  uint32_t og[4], ou[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    og[w] = float2_to_pair<__nv_bfloat16>(dg[2 * w], dg[2 * w + 1]);
    ou[w] = float2_to_pair<__nv_bfloat16>(du[2 * w], du[2 * w + 1]);
  }
  dgate = make_uint4(og[0], og[1], og[2], og[3]);
  dup = make_uint4(ou[0], ou[1], ou[2], ou[3]);
}

__device__ __forceinline__ void store_shared16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// mbarriers of a row group's two warps (sm_80+: arrive, test_wait; 64 arrivals complete a phase).
__device__ __forceinline__ void pair_bar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared.b64 [%0], 64;\n" ::"r"(attn::smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void pair_bar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared.b64 state, [%0];\n}\n" ::"r"(attn::smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void pair_bar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.test_wait.parity.shared.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(attn::smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// The swiglu's backward of (dout, gate, up) into dgate and dup, then job 0 over dgate and job 1 over dup. 16 warps: warp
// w takes row group w % 8 (the one-job kernel's warp w % 8: its rows, its order) for job w / 8. The pair of a row group
// shares its three streams' staging: each copies, and turns into dgate / dup, half of each chunk's pieces (job 0
// pieces 0 and 1 of its lanes, job 1 pieces 2 and 3), stores them to global memory and over gate's and up's staged
// pieces. The products of a chunk trail its arithmetic by one chunk, so that neither warp waits for the other's
// current one: in step i a warp turns chunk i into gradients (its copies landed: 2 chunks in flight), arrives on
// full[i % 4], waits for full of chunk i - 1 (its sibling's half) and runs that chunk's products, arrives on its
// empty, and refills the stage of chunk i - 2 with chunk i + 2 once both warps' products of i - 2 are done.
__global__ void __launch_bounds__(kSwigluThreads, 1)
    lora_swiglu_dy_kernel(const SwigluDyIo io, int64_t n, int64_t m, int64_t rows_per_block, const DyJob job0,
                          const DyJob job1) {
  __shared__ uint32_t sbg[2][kDyKTiles][32][2];
  __shared__ __align__(8) uint64_t full[kWarps][kStages], empty[kWarps][kStages];
  extern __shared__ __align__(16) uint4 stream_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tid = lane % 4;
  const int group = warp % kWarps, j = warp / kWarps;
  const DyJob job = j == 0 ? job0 : job1;
  const ChunkStream cs(stream_smem, io.src[0], n, m, rows_per_block, blockIdx.x, group);
  const auto copy = [&](int item) {  // this warp's pieces of `item` in every stream (no commit)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 2 * j + h;
      const int size = cs.piece_inside(item, i) ? 16 : 0;  // 0: zero-fill, nothing read
      const int64_t offset = cs.piece_offset(item, i);
      const uint32_t to = cs.piece_smem(item % kStages, i);
#pragma unroll
      for (int s = 0; s < kSwigluStreams; ++s) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to + s * kStreamBytes),
                     "l"(io.src[s] + offset), "r"(size));
      }
    }
  };
  const int items = cs.items;
  for (int item = 0; item < 2; ++item) {
    if (item < items) copy(item);
    attn::cp_async_commit();
  }
  if (threadIdx.x < kWarps * kStages) {
    pair_bar_init(&full[threadIdx.x / kStages][threadIdx.x % kStages]);
    pair_bar_init(&empty[threadIdx.x / kStages][threadIdx.x % kStages]);
  }
  const bool want_g = job.part_g != nullptr, want_db = job.part_db != nullptr;
  stage_g_fragments(sbg[0], job0.b, m, cs.c0, threadIdx.x, kSwigluThreads);
  stage_g_fragments(sbg[1], job1.b, m, cs.c0, threadIdx.x, kSwigluThreads);
  __syncthreads();
  float cdb[kDyKTiles][4];
  zero_fragments(cdb);
  const int64_t tiles = (m + kDyTileCols - 1) / kDyTileCols;
  const StreamStage* job_stage = cs.stage + (j + 1) * (kStreamBytes / sizeof(StreamStage));  // gate's / up's stream
  float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint32_t xb0 = 0, xb1 = 0;
  for (int item = 0; item <= items; ++item) {
    if (item < items) {
      attn::cp_async_wait<1>();  // this lane's pieces of `item` have landed (item + 1's may be in flight)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * j + h;
        const uint32_t at = cs.piece_smem(item % kStages, i);
        uint4 dgate, dup;
        swiglu_piece(at, at + kStreamBytes, at + 2 * kStreamBytes, dgate, dup);
        store_shared16(at + kStreamBytes, dgate);
        store_shared16(at + 2 * kStreamBytes, dup);
        if (cs.piece_inside(item, i)) {
          const int64_t offset = cs.piece_offset(item, i);
          *reinterpret_cast<uint4*>(io.dgate + offset) = dgate;
          *reinterpret_cast<uint4*>(io.dup + offset) = dup;
        }
      }
      pair_bar_arrive(&full[group][item % kStages]);
    }
    if (item > 0) {  // the products of the previous chunk, both halves made
      const int k = item - 1, step = k / kDyChunks, chunk = k % kDyChunks;
      const int64_t r0 = cs.first_row + static_cast<int64_t>(step) * kDyBlockStep;
      pair_bar_wait(&full[group][k % kStages], (k / kStages) & 1);
      if (chunk == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) cg[i] = 0.0f;
        db_fragment(job.xa, want_db, n, r0, gid, tid, xb0, xb1);
      }
      dy_chunk_products_dyn(job_stage[k % kStages], chunk, lane, sbg[j], want_g, want_db, xb0, xb1, cg, cdb);
      if (chunk == kDyChunks - 1 && want_g) store_g(job.part_g, tiles, n, r0, gid, tid, cg);
      pair_bar_arrive(&empty[group][k % kStages]);
    }
    if (item + 2 < items) {  // chunk item + 2 into the stage of chunk item - 2, once both warps' products of it are done
      if (item >= 2) pair_bar_wait(&empty[group][(item - 2) % kStages], ((item - 2) / kStages) & 1);
      copy(item + 2);
    }
    attn::cp_async_commit();
  }
  attn::cp_async_wait_all();
  // db: each job's 8 warps' fragments summed in row-group order (as sum_warp_fragments sums the one-job kernel's), the
  // two jobs into their own tiles at once.
  __syncthreads();
  float (*tiles_db)[kDyTileCols][8] = reinterpret_cast<float (*)[kDyTileCols][8]>(stream_smem);
  for (int i = threadIdx.x; i < 2 * kDyTileCols * 8; i += kSwigluThreads) (&tiles_db[0][0][0])[i] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (group == w && want_db) add_fragments(tiles_db[j], cdb, gid, tid);
  }
  __syncthreads();
  if (want_db) store_db(job.part_db, tiles_db[j], m, cs.c0, threadIdx.x % kThreads, kThreads);
}

bool dy_grid_fits(int64_t n, int64_t m) { return m / kDyTileCols < (1LL << 31) && n < (1LL << 40); }

// The kernel's job for g (null: not wanted) and db (null: not wanted) with the work's partial buffers.
DyJob dy_job(const LoraDyWork& work, const float* b, const float* xa, float* g, float* db, float* part_g,
             float* part_db) {
  return DyJob{b, xa, g == nullptr ? nullptr : (work.col_tiles > 1 ? part_g : g), db == nullptr ? nullptr : part_db};
}

// g = the sum of its column tiles' partials (with more than one), db += scale * the sum of its row blocks'.
cudaError_t reduce_dy(const LoraDyWork& work, int64_t n, int64_t m, float scale, float* g, float* db,
                      const float* part_g, const float* part_db, cudaStream_t stream) {
  if (g != nullptr && work.col_tiles > 1) {
    sum_splits_kernel<<<blocks_for(n * 8, 256), 256, 0, stream>>>(part_g, work.col_tiles, n * 8, g);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  if (db != nullptr) {
    lora_da_reduce_kernel<<<blocks_for(m * 8, 256), 256, 0, stream>>>(part_db, work.row_blocks, m * 8, scale, db);
  }
  return cudaGetLastError();
}

}  // namespace

LoraDyWork lora_dy_work(int64_t n, int64_t m, int r) {
  LoraDyWork w;
  if (n <= 0 || m <= 0) return w;
  const int64_t rows = dy_rows_per_block(n, m);
  w.col_tiles = (m + kDyTileCols - 1) / kDyTileCols;
  w.row_blocks = (n + rows - 1) / rows;
  w.part_g_floats = w.col_tiles > 1 ? w.col_tiles * n * r : 0;
  w.part_db_floats = w.row_blocks * m * r;
  return w;
}

cudaError_t launch_lora_dy(const void* dy, int dy_dtype, const float* b, const float* xa, int64_t n, int64_t m, int r,
                           float scale, float* g, float* db, float* part_g, float* part_db, cudaStream_t stream) {
  if (n <= 0 || (g == nullptr && db == nullptr)) return cudaSuccess;
  if (r != 8 || dy_dtype != 1 || m <= 0 || m % 8 != 0 || !dy_grid_fits(n, m)) return cudaErrorInvalidValue;
  const LoraDyWork work = lora_dy_work(n, m, r);
  const dim3 grid(static_cast<unsigned>(work.col_tiles), static_cast<unsigned>(work.row_blocks));
  const cudaError_t status =
      launch_staged<lora_dy_mma_kernel>(grid, stream, static_cast<const __nv_bfloat16*>(dy), n, m,
                                        dy_rows_per_block(n, m), dy_job(work, b, xa, g, db, part_g, part_db));
  if (status != cudaSuccess) return status;
  return reduce_dy(work, n, m, scale, g, db, part_g, part_db, stream);
}

cudaError_t launch_lora_swiglu_dy(const void* dout, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                                  int64_t m, const LoraDyOutputs (&jobs)[2], float scale, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  if (m % 8 != 0 || !dy_grid_fits(n, m)) return cudaErrorInvalidValue;
  const LoraDyWork work = lora_dy_work(n, m, 8);
  const dim3 grid(static_cast<unsigned>(work.col_tiles), static_cast<unsigned>(work.row_blocks));
  SwigluDyIo io{};
  io.src[0] = static_cast<const __nv_bfloat16*>(dout);
  io.src[1] = static_cast<const __nv_bfloat16*>(gate);
  io.src[2] = static_cast<const __nv_bfloat16*>(up);
  io.dgate = static_cast<__nv_bfloat16*>(dgate);
  io.dup = static_cast<__nv_bfloat16*>(dup);
  DyJob k[2];
  for (int j = 0; j < 2; ++j) {
    const LoraDyOutputs& o = jobs[j];
    k[j] = dy_job(work, o.b, o.xa, o.g, o.db, o.part_g, o.part_db);
  }
  cudaError_t status = launch_staged_bytes<lora_swiglu_dy_kernel>(
      grid, kSwigluThreads, static_cast<int>(kSwigluStreams * kStreamBytes), stream, io, n, m,
      dy_rows_per_block(n, m), k[0], k[1]);
  if (status != cudaSuccess) return status;
  for (int j = 0; j < 2; ++j) {
    const LoraDyOutputs& o = jobs[j];
    status = reduce_dy(work, n, m, scale, o.g, o.db, o.part_g, o.part_db, stream);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace swift::ops::cuda
