// The MoE's routing front (fp8.cuh moe_route): the MLP norm, the fp32 router logits, the top-k
// softmax and the sort of the (token, choice) pairs by expert into the row layout every grouped
// GEMM reads (MoeSorted): one kernel for decode steps and short chunks, and for prompt chunks a
// tiled kernel and the pairs' scatter; moe_sort for choices made elsewhere.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>
#include <cuda_fp8.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_route_body.cuh"

namespace osprey::cuda {

namespace {

// Up to this many tokens (decode steps and verify chunks, whose buckets go to 128 and more), a
// block per (token, 8 experts) that loads its router rows before its PDL wait; above, prompt
// chunks take moe_route_tiled_kernel (at 128 tokens its 8 blocks of 16 took a 20b batch-128 step
// from 20.4 to 21.4 ms).
constexpr int kRouteTiledAbove = 512;

__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                  uint8_t* q, float* s, int ld, float* h_out,
                                                                  bf16* h_mxfp4, const float* router, const bf16* router_bias, int E,
                                                                  int k, float* logits, int32_t* counter, int32_t* idx,
                                                                  float* w, MoeSorted sorted) {
  moe_route_body(x, gain, H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias, E, k, logits, counter, idx, w, sorted,
                 VBlock::this_block(), PdlSync{});
}

// The same front for a prompt chunk: block b takes `tile` (at most kRouteTile) tokens, the same
// functions of the same values as moe_route_kernel, bit for bit:
// - their rows are copied to shared memory together;
// - the block normalizes and quantizes them together (tile_rmsnorm_quantize, the sums of
//   rmsnorm_quantize_row<256>);
// - each warp takes kRouteExperts experts at a time and sums every token of the tile against them
//   (router_tile): a row float4 read from shared memory serves four experts;
// - a warp per token does the top-k;
// - the tile's choices are counted by expert, the block reserves its place in each expert's run
//   (counters[0, E): the runs' lengths so far, zero again when the kernel ends) and writes each
//   pair's place in its run into pair_row; the last block lays the runs out (seg, active, the
//   padding rows) and moe_scatter_kernel places the pairs.
// Two blocks an SM (8 tokens, at most 128 registers and about 100 KB of shared memory each), so
// that one block's loads and norms run beside the other's router sums: with one block of 16 tokens
// an SM the phases ran one after another (ncu, a 20b 8k prefill: 240 us a layer, 12.5% occupancy,
// 57% of the warp samples in the rows' load, norm and quantization).
constexpr int kRouteTile = 8, kRouteExperts = 4, kRouteMaxExperts = 256;

// One warp's router sums of kRouteExperts experts from e0 (zero past E) against the tile's nt
// normalized rows (shared memory, row stride Hp; kFull: nt == kRouteTile), each in warp_dot_f32's
// order: lane l takes the float4 steps c = l + 32 j in order with dot4_step, then warp_sum. One
// staged row float4 feeds the four experts' sums. The router's float4s of step j sit in one of
// three register buffers, loaded two steps ahead (the buffers rotate by unrolling, no copies).
template <bool kFull>
__device__ inline void router_tile(const float* rows, int Hp, int nt, const float* router, int H, int E, int e0,
                                   float (&acc)[kRouteTile][kRouteExperts]) {
  const int lane = threadIdx.x & 31, H4 = H / 4, Hp4 = Hp / 4, steps = (H4 + 31) / 32;
  const float4* w4 = reinterpret_cast<const float4*>(router);
  const float4* r4 = reinterpret_cast<const float4*>(rows);
#pragma unroll
  for (int t = 0; t < kRouteTile; ++t)
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e) acc[t][e] = 0.0f;
  auto load = [&](int j, float4 (&w)[kRouteExperts]) {
    const int c = lane + 32 * j;
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e)
      w[e] = j < steps && c < H4 && e0 + e < E ? __ldg(w4 + size_t(e0 + e) * H4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  auto step = [&](int j, const float4 (&w)[kRouteExperts]) {
    const int c = lane + 32 * j;
    if (j >= steps || c >= H4) return;  // the last step: the lanes past H4
#pragma unroll
    for (int t = 0; t < kRouteTile; ++t) {
      if (!kFull && t >= nt) break;  // uniform
      const float4 b = r4[t * Hp4 + c];
#pragma unroll
      for (int e = 0; e < kRouteExperts; ++e) acc[t][e] = dot4_step(acc[t][e], w[e], b);
    }
  };
  float4 w0[kRouteExperts], w1[kRouteExperts], w2[kRouteExperts];
  load(0, w0);
  load(1, w1);
  for (int j = 0; j < steps; j += 3) {
    load(j + 2, w2);
    step(j, w0);
    load(j + 3, w0);
    step(j + 1, w1);
    load(j + 4, w1);
    step(j + 2, w2);
  }
#pragma unroll
  for (int t = 0; t < kRouteTile; ++t)
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e) acc[t][e] = warp_sum(acc[t][e]);
}
__global__ void __launch_bounds__(kRouteThreads, 2)
    moe_route_tiled_kernel(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                           float* h_out, bf16* h_mxfp4, const float* router, const bf16* router_bias, int E, int k,
                           int tile, float* logits, int32_t* counter, int32_t* idx, float* w, MoeSorted sorted) {
  constexpr int NW = kRouteThreads / 32;
  extern __shared__ float sm[];  // [tile][Hp] rows, then [tile][E] logits
  __shared__ float part[kRouteTile][NW];
  __shared__ int cnt[kRouteMaxExperts], base[kRouteMaxExperts];
  const int Hp = (H + 3) & ~3, t0 = blockIdx.x * tile, nt = min(tile, T - t0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* rows = sm;
  float* lg = sm + size_t(tile) * Hp;
  pdl_wait();
  pdl_launch_dependents();
  if (H % 4 == 0) {  // 16-byte copies, all in flight at once
    const int per_row = H / 4;
    const float* src = x + size_t(t0) * H;
    for (int i = threadIdx.x; i < nt * per_row; i += blockDim.x) {
      const int r = i / per_row, c = i % per_row;
      cp_async16(rows + size_t(r) * Hp + 4 * c, src + size_t(r) * H + 4 * c, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
  } else {
    for (int i = threadIdx.x; i < nt * H; i += blockDim.x)
      rows[size_t(i / H) * Hp + i % H] = x[size_t(t0) * H + i];
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  // The norms with rmsnorm_quantize_row<kRouteThreads>'s sums, and the quantization.
  tile_rmsnorm_quantize<kRouteThreads, kRouteThreads, kRouteTile>(rows, Hp, nt, gain, H, eps, q, s, ld, t0, h_out, part);
  if (h_mxfp4)
    for (int i = warp; i < nt; i += NW)
      store_row_mxfp4_layout(rows + size_t(i) * Hp, H, h_mxfp4 + size_t(t0 + i) * mxfp4_act_cols(H), lane, 32);
  // The router: kRouteExperts experts a warp at a time against every token of the tile.
  for (int e0 = warp * kRouteExperts; e0 < E; e0 += NW * kRouteExperts) {
    float acc[kRouteTile][kRouteExperts];
    if (H % 4 == 0) {
      if (nt == kRouteTile) router_tile<true>(rows, Hp, nt, router, H, E, e0, acc);
      else router_tile<false>(rows, Hp, nt, router, H, E, e0, acc);
    } else {
#pragma unroll
      for (int t = 0; t < kRouteTile; ++t)
#pragma unroll
        for (int e = 0; e < kRouteExperts; ++e)
          acc[t][e] = t < nt && e0 + e < E ? warp_dot_f32(router + size_t(e0 + e) * H, rows + size_t(t) * Hp, H) : 0.0f;
    }
    // (Unrolled, so that acc stays in registers.)
#pragma unroll
    for (int t = 0; t < kRouteTile; ++t)
#pragma unroll
      for (int e = 0; e < kRouteExperts; ++e)
        if (lane == 0 && t < nt && e0 + e < E) {
          const float v = acc[t][e] + __bfloat162float(router_bias[e0 + e]);
          lg[t * E + e0 + e] = v, logits[size_t(t0 + t) * E + e0 + e] = v;
        }
  }
  __syncthreads();
  for (int i = warp; i < nt; i += NW)
    warp_topk_softmax(lg + i * E, E, k, idx + size_t(t0 + i) * k, w + size_t(t0 + i) * k);
  __syncthreads();  // idx, written by lane 0 of each warp, visible to the block
  // The tile's pairs: their rank among the tile's pairs of their expert, then the block's place in
  // each expert's run; pair_row holds the pair's place in its expert's run until moe_scatter_kernel.
  const int np = nt * k;  // at most kRouteTile * 16 = kRouteThreads
  int ep = -1, rank = 0;
  if (int(threadIdx.x) < np) {
    ep = idx[size_t(t0) * k + threadIdx.x];
    rank = atomicAdd(&cnt[ep], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    if (cnt[e]) base[e] = atomicAdd(counter + e, cnt[e]);
  __syncthreads();
  if (ep >= 0) sorted.pair_row[size_t(t0) * k + threadIdx.x] = base[ep] + rank;
  if (!last_block_to_arrive(counter + T, int(gridDim.x))) return;
  // The last block: each expert's run padded to a multiple of 4, the active experts, the padding
  // rows (-1); the run lengths back to zero for the next use.
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    cnt[e] = __ldcg(counter + e);
    counter[e] = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int b = 0, na = 0;
    for (int e = 0; e < E; ++e) {
      base[e] = b;
      sorted.seg[e] = b;
      b += round4(cnt[e]);
      if (cnt[e]) sorted.active[na++] = e;
    }
    sorted.seg[E] = b;
    for (; na < min(E, T * k); ++na) sorted.active[na] = -1;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int r = base[e] + cnt[e]; r < round4(cnt[e]) + base[e]; ++r) sorted.row_token[r] = -1;
}

// The pairs of a prompt chunk in their experts' runs (after moe_route_tiled_kernel): pair p's row is
// its run's start plus its place in the run (what pair_row holds until now).
__global__ void moe_scatter_kernel(const int32_t* idx, int P, int k, const int32_t* seg, int32_t* row_token,
                                   int32_t* pair_row) {
  pdl_wait();
  pdl_launch_dependents();
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const int r = __ldcg(seg + __ldcg(idx + p)) + __ldcg(pair_row + p);
  pair_row[p] = r;
  row_token[r] = p / k;
}

// Counting sort of (token, choice) pairs by expert; each expert's run padded to a multiple of 4.
__global__ void moe_sort_kernel(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                                int32_t* pair_row, int32_t* active) {
  extern __shared__ int sh[];
  pdl_wait();
  pdl_launch_dependents();
  moe_sort_block(idx, P, k, E, seg, row_token, pair_row, active, sh);
}

}  // namespace

void moe_route(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld, float* h_out,
               const float* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st, bf16* h_mxfp4) {
  if (T == 0) return;
  if (k > 16 || k > E) fail_plain("moe_route: at most 16 experts per token, and no more than there are");
  check_row(H, "moe_route");
  const size_t Hp = size_t((H + 3) & ~3);
  if (T > kRouteTiledAbove) {
    if (E > kRouteMaxExperts) fail_plain("moe_route: prompt chunks route over at most 256 experts (got " + std::to_string(E) + ")");
    // Prompt chunks: tiles of up to kRouteTile tokens (as many as about 100 KB of shared memory
    // holds: two blocks an SM), and no larger than gives every SM two blocks of the grid.
    constexpr size_t kSmem = 100 * 1024;
    const int fits = int(std::clamp<size_t>(kSmem / sizeof(float) / (Hp + E), 1, kRouteTile));
    const int tile = std::clamp(T / (2 * sm_count()), 1, fits);
    const size_t smem = (Hp + E) * tile * sizeof(float);
    static const bool attr = [&] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_route_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kSmem + 16 * 1024)));
      return true;
    }();
    (void)attr;
    launch_pdl("route", moe_route_tiled_kernel, unsigned((T + tile - 1) / tile), kRouteThreads, smem, st, x, gain, T,
               H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias, E, k, tile, logits, counters, idx, w, sorted);
    launch_pdl("sort", moe_scatter_kernel, unsigned((T * k + 255) / 256), 256, 0, st, idx, T * k, k, sorted.seg,
               sorted.row_token, sorted.pair_row);
    return;
  }
  const size_t smem = std::max(Hp + E, size_t(3 * E + 1)) * sizeof(float);
  const dim3 grid(unsigned(T), unsigned((E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock));
  launch_pdl("route", moe_route_kernel, grid, kRouteThreads, smem, st, x, gain, H, eps, q, s, ld, h_out, h_mxfp4, router,
             router_bias, E, k, logits, counters, idx, w, sorted);
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  launch_pdl("sort", moe_sort_kernel, 1, 1024, (3 * E + 1) * sizeof(int), st, idx, T * k, k, E, seg, row_token, pair_row,
             active);
}

}  // namespace osprey::cuda
