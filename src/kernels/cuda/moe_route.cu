// The MoE's routing front (fp8.cuh moe_route): the MLP norm, the fp32 router logits, the top-k
// softmax and the sort of the (token, choice) pairs by expert into the row layout every grouped
// GEMM reads (MoeSorted), in one kernel; moe_sort for choices made elsewhere.
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

namespace osprey::cuda {

namespace {

// Up to this many tokens (decode steps and verify chunks, whose buckets go to 128 and more), a
// block per (token, 8 experts) that loads its router rows before its PDL wait; above, prompt
// chunks take moe_route_tiled_kernel (at 128 tokens its 8 blocks of 16 took a 20b batch-128 step
// from 20.4 to 21.4 ms).
constexpr int kRouteTiledAbove = 512;

// Counting sort of (token, choice) pairs by expert by one block; each expert's run padded to a
// multiple of 4. idx is read coherently (.cg): in moe_route it was written by other blocks of the
// same kernel. sh: 3E + 1 ints of shared memory.
__device__ void moe_sort_block(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                               int32_t* pair_row, int32_t* active, int* sh) {
  int *cnt = sh, *base = sh + E, *cursor = sh + 2 * E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0, cursor[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) atomicAdd(&cnt[__ldcg(idx + p)], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    base[0] = 0;
    int na = 0;
    for (int e = 0; e < E; ++e) {
      base[e + 1] = base[e] + round4(cnt[e]);
      if (cnt[e]) active[na++] = e;
    }
    for (; na < min(E, P); ++na) active[na] = -1;
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= E; e += blockDim.x) seg[e] = base[e];
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    const int e = __ldcg(idx + p), r = base[e] + atomicAdd(&cursor[e], 1);
    row_token[r] = p / k;
    pair_row[p] = r;
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int r = base[e] + cnt[e]; r < base[e + 1]; ++r) row_token[r] = -1;
}

// A warp's router row of expert e in registers (lane holds float4s lane, lane + 32, ..), or zeros
// when the row does not fit that layout (then router_logit reads it from memory).
constexpr int kRouterW4 = kRowMax / 4 / 32;
__device__ inline bool router_rows_in_regs(int H) { return H % 4 == 0; }
__device__ inline void load_router_row(const float* router, int e, int E, int H, float4 (&wr)[kRouterW4]) {
  const int lane = threadIdx.x & 31;
  const bool regs = router_rows_in_regs(H) && e < E;
  const float4* w4 = reinterpret_cast<const float4*>(router + size_t(regs ? e : 0) * H);
#pragma unroll
  for (int j = 0; j < kRouterW4; ++j) {
    const int i = lane + 32 * j;
    wr[j] = regs && i < H / 4 ? __ldg(w4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}
// Expert e's logit of the normalized row (shared memory) without its bias: linear_f32_small's
// products and order of sums (warp_dot_f32), from the registers when they hold the row.
__device__ inline float router_logit(const float4 (&wr)[kRouterW4], const float* router, int e, const float* row,
                                     int H) {
  if (!router_rows_in_regs(H)) return warp_dot_f32(router + size_t(e) * H, row, H);
  const int lane = threadIdx.x & 31;
  const float4* x4 = reinterpret_cast<const float4*>(row);
  float acc = 0;
#pragma unroll
  for (int j = 0; j < kRouterW4; ++j) {
    const int i = lane + 32 * j;
    if (i < H / 4) {
      const float4 a = wr[j], b = x4[i];
      acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
  }
  return warp_sum(acc);
}

// The last block of a grid to arrive at counter (reset for the next use) returns true, after
// the other blocks' writes are visible to it.
__device__ inline bool last_block_to_arrive(int32_t* counter, int blocks) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == blocks - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Block (t, rb): the MLP norm of token t (every block computes it, the same way; block 0 stores
// it quantized for the experts' first GEMM), then the fp32 router logits of experts
// [8 rb, 8 rb + 8) (a warp each: linear_f32_small's products) into logits [T][E]. The block
// that finishes last for the token (counter[t], reset for the next use) does the top-k softmax.
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                  uint8_t* q, float* s, int ld, float* h_out,
                                                                  const float* router, const bf16* router_bias, int E,
                                                                  int k, float* logits, int32_t* counter, int32_t* idx,
                                                                  float* w, MoeSorted sorted) {
  extern __shared__ float row[];  // [H] normalized row, then [E] logits for the top-k
  const int t = blockIdx.x, rb = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = rb * kExpertsPerRouteBlock + warp;
  // The warp's router row is a weight: into registers before pdl_wait, while the kernel before
  // this one (the o-projection) is still finishing.
  float4 wr[kRouterW4];
  load_router_row(router, e, E, H, wr);
  pdl_wait();
  pdl_launch_dependents();
  float v[kRowMax / kRouteThreads];
  load_row<kRouteThreads>(x + size_t(t) * H, H, v);
  const bool first = rb == 0;
  rmsnorm_quantize_row<kRouteThreads>(v, gain, H, eps, row, first ? q + size_t(t) * H : nullptr, s, ld, t,
                                      first && h_out ? h_out + size_t(t) * H : nullptr);
  if (e < E) {
    const float l = router_logit(wr, router, e, row, H);
    if (lane == 0) logits[size_t(t) * E + e] = l + __bfloat162float(router_bias[e]);
  }
  if (!last_block_to_arrive(counter + t, int(gridDim.y))) return;
  float* lg = row + ((H + 3) & ~3);
  for (int i = threadIdx.x; i < E; i += blockDim.x) lg[i] = __ldcg(logits + size_t(t) * E + i);
  __syncthreads();
  if (warp == 0) warp_topk_softmax(lg, E, k, idx + size_t(t) * k, w + size_t(t) * k);
  // The last token to finish sorts every token's choices by expert (counter[T], reset likewise);
  // with one token (a batch-1 step) that is this block, without a second round trip.
  if (gridDim.x > 1) {
    if (!last_block_to_arrive(counter + gridDim.x, int(gridDim.x))) return;
  } else {
    __syncthreads();  // warp 0's idx and w, visible to the block
  }
  moe_sort_block(idx, int(gridDim.x) * k, k, E, sorted.seg, sorted.row_token, sorted.pair_row, sorted.active,
                 reinterpret_cast<int*>(row));
}

// The same front for a prompt chunk: block b takes `tile` tokens. Their MLP norms go to shared
// memory (and out, quantized, as in moe_route_kernel), then each warp holds one expert's router
// row in registers at a time and scores every token of the tile with it, so the router weights
// are read once per tile instead of once per token; a warp per token does the top-k, and the last
// block sorts. The same functions of the same values as moe_route_kernel: the same bits.
__global__ void __launch_bounds__(kRouteThreads) moe_route_tiled_kernel(const float* x, const bf16* gain, int T, int H,
                                                                        float eps, uint8_t* q, float* s, int ld,
                                                                        float* h_out, const float* router,
                                                                        const bf16* router_bias, int E, int k,
                                                                        int tile, float* logits, int32_t* counter,
                                                                        int32_t* idx, float* w, MoeSorted sorted) {
  extern __shared__ float sm[];  // [tile][Hp] normalized rows, then [tile][E] logits
  const int Hp = (H + 3) & ~3, t0 = blockIdx.x * tile, nt = min(tile, T - t0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* rows = sm;
  float* lg = sm + size_t(tile) * Hp;
  pdl_wait();
  pdl_launch_dependents();
  for (int i = 0; i < nt; ++i) {
    const int t = t0 + i;
    float v[kRowMax / kRouteThreads];
    load_row<kRouteThreads>(x + size_t(t) * H, H, v);
    rmsnorm_quantize_row<kRouteThreads>(v, gain, H, eps, rows + size_t(i) * Hp, q + size_t(t) * H, s, ld, t,
                                        h_out ? h_out + size_t(t) * H : nullptr);
  }
  for (int e = warp; e < E; e += kRouteThreads / 32) {
    float4 wr[kRouterW4];
    load_router_row(router, e, E, H, wr);
    const float bias = __bfloat162float(router_bias[e]);
    for (int i = 0; i < nt; ++i) {
      const float l = router_logit(wr, router, e, rows + size_t(i) * Hp, H) + bias;
      if (lane == 0) lg[i * E + e] = l, logits[size_t(t0 + i) * E + e] = l;
    }
  }
  __syncthreads();
  for (int i = warp; i < nt; i += kRouteThreads / 32)
    warp_topk_softmax(lg + i * E, E, k, idx + size_t(t0 + i) * k, w + size_t(t0 + i) * k);
  if (!last_block_to_arrive(counter + T, int(gridDim.x))) return;
  moe_sort_block(idx, T * k, k, E, sorted.seg, sorted.row_token, sorted.pair_row, sorted.active,
                 reinterpret_cast<int*>(sm));
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
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st) {
  if (T == 0) return;
  if (k > 16 || k > E) fail_plain("moe_route: at most 16 experts per token, and no more than there are");
  check_row(H, "moe_route");
  const size_t Hp = size_t((H + 3) & ~3);
  if (T > kRouteTiledAbove) {
    // Prompt chunks: tiles of up to 16 tokens (as many as about 200 KB of shared memory holds), and
    // no larger than gives every SM two blocks of the grid.
    constexpr size_t kSmem = 200 * 1024;
    const int fits = int(std::clamp<size_t>((kSmem / sizeof(float) - 3 * E - 1) / (Hp + E), 1, 16));
    const int tile = std::clamp(T / (2 * sm_count()), 1, fits);
    const size_t smem = std::max((Hp + E) * tile, size_t(3 * E + 1)) * sizeof(float);
    static const bool attr = [&] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_route_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kSmem + 16 * 1024)));
      return true;
    }();
    (void)attr;
    launch_pdl("route", moe_route_tiled_kernel, unsigned((T + tile - 1) / tile), kRouteThreads, smem, st, x, gain, T,
               H, eps, q, s, ld, h_out, router, router_bias, E, k, tile, logits, counters, idx, w, sorted);
    return;
  }
  const size_t smem = std::max(Hp + E, size_t(3 * E + 1)) * sizeof(float);
  const dim3 grid(unsigned(T), unsigned((E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock));
  launch_pdl("route", moe_route_kernel, grid, kRouteThreads, smem, st, x, gain, H, eps, q, s, ld, h_out, router,
             router_bias, E, k, logits, counters, idx, w, sorted);
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  launch_pdl("sort", moe_sort_kernel, 1, 1024, (3 * E + 1) * sizeof(int), st, idx, T * k, k, E, seg, row_token, pair_row,
             active);
}

}  // namespace osprey::cuda
