// The MoE routing front's pieces and its per-token body (moe_route.cu launches it as its own
// kernel; the persistent decode kernel runs it as a phase): internal to kernels/cuda.
#pragma once
#include <cfloat>

#include "formats/mxfp4.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// fn(p, idx[p]) for every pair p < P the block holds, eight choices a thread loaded at once before
// fn sees any (one L2 round trip per eight; fn's atomics would otherwise hold each load back).
template <class Fn>
__device__ inline void for_each_choice(const int32_t* idx, int P, Fn&& fn) {
  constexpr int kBatch = 8;
  for (int p0 = 0; p0 < P; p0 += kBatch * int(blockDim.x)) {
    int e[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int p = p0 + b * int(blockDim.x) + int(threadIdx.x);
      e[b] = p < P ? __ldcg(idx + p) : -1;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (e[b] >= 0) fn(p0 + b * int(blockDim.x) + int(threadIdx.x), e[b]);
  }
}

// Counting sort of (token, choice) pairs by expert by one block; each expert's run padded to a
// multiple of 4. idx is read coherently (.cg): in moe_route it was written by other blocks of the
// same kernel. sh: 3E + 1 ints of shared memory.
__device__ inline void moe_sort_block(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                               int32_t* pair_row, int32_t* active, int* sh) {
  int *cnt = sh, *base = sh + E, *cursor = sh + 2 * E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0, cursor[e] = 0;
  __syncthreads();
  for_each_choice(idx, P, [&](int, int e) { atomicAdd(&cnt[e], 1); });
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
  for_each_choice(idx, P, [&](int p, int e) {
    const int r = base[e] + atomicAdd(&cursor[e], 1);
    row_token[r] = p / k;
    pair_row[p] = r;
  });
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int r = base[e] + cnt[e]; r < base[e + 1]; ++r) row_token[r] = -1;
}

// A warp's router row of expert e in registers as loaded (lane holds steps lane, lane + 32, ..:
// float4s, or four BF16 in a uint2 for a BF16 router), or zeros when the row does not fit that
// layout (then router_logit reads it from memory).
constexpr int kRouterW4 = kRowMax / 4 / 32;
template <class W>
using RouterRegs = typename Weights4<W>::Raw[kRouterW4];
__device__ inline bool router_rows_in_regs(int H) { return H % 4 == 0; }
template <class W>
__device__ inline void load_router_row(const W* router, int e, int E, int H, RouterRegs<W>& wr) {
  const int lane = threadIdx.x & 31;
  const bool regs = router_rows_in_regs(H) && e < E;
  const W* row = router + size_t(regs ? e : 0) * H;
#pragma unroll
  for (int j = 0; j < kRouterW4; ++j) {
    const int i = lane + 32 * j;
    wr[j] = regs && i < H / 4 ? Weights4<W>::load(row, i) : Weights4<W>::zero();
  }
}
// Expert e's logits of N normalized rows (shared memory) without its bias: linear_f32_small's
// products and order of sums (warp_dot_f32) for each row, from the registers when they hold the
// router row; N > 1 keeps N independent sums in flight.
template <int N, class W>
__device__ inline void router_logits(const RouterRegs<W>& wr, const W* router, int e, const float* const (&rows)[N],
                                     int H, float (&out)[N]) {
  if (!router_rows_in_regs(H)) {
#pragma unroll
    for (int n = 0; n < N; ++n) out[n] = warp_dot_f32(router + size_t(e) * H, rows[n], H);
    return;
  }
  const int lane = threadIdx.x & 31;
  float acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0;
#pragma unroll
  for (int j = 0; j < kRouterW4; ++j) {
    const int i = lane + 32 * j;
    if (i < H / 4) {
      const float4 w4 = Weights4<W>::f32(wr[j]);
#pragma unroll
      for (int n = 0; n < N; ++n) acc[n] = dot4_step(acc[n], w4, reinterpret_cast<const float4*>(rows[n])[i]);
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) out[n] = warp_sum(acc[n]);
}
template <class W>
__device__ inline float router_logit(const RouterRegs<W>& wr, const W* router, int e, const float* row, int H) {
  const float* const rows[1] = {row};
  float out[1];
  router_logits<1>(wr, router, e, rows, H, out);
  return out[0];
}

// A normalized row (shared memory, H floats) as BF16 in the MXFP4 activation layout (out
// [round128(H)]: positions 2i, 2i + 1 hold columns k, k + 4 of k = mxfp4_act_column(2i); zeros
// past H), the values to_bf16_mxfp4_layout writes. Block-wide (or, with `first` the lane and
// `step` 32, by one warp).
__device__ inline void store_row_mxfp4_layout(const float* row, int H, bf16* out, int first = int(threadIdx.x),
                                              int step = int(blockDim.x)) {
  const int pairs = mxfp4_act_cols(H) / 2;
  for (int i = first; i < pairs; i += step) {
    const int k = mxfp4_act_column(2 * i);
    reinterpret_cast<__nv_bfloat162*>(out)[i] = __floats2bfloat162_rn(k < H ? row[k] : 0.0f, k + 4 < H ? row[k + 4] : 0.0f);
  }
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

// Block (t, rb) of a T x E/8 grid: the MLP norm of token t (every block computes it, the same way; block 0 stores
// it quantized for the experts' first GEMM, and in fp32 and BF16 when h_out and h_mxfp4 are given), then the fp32 router logits of experts
// [8 rb, 8 rb + 8) (a warp each: linear_f32_small's products) into logits [T][E]. The block
// that finishes last for the token (counter[t], reset for the next use) does the top-k softmax.
// kRouterInRegs: each warp holds its router row in registers, loaded before the wait (128 of
// them); false: read from memory in the dot product (the same sums; the persistent kernel, whose
// registers are the most any of its phases needs). kChoicesLater: only the norm and the logits
// (counter, idx, w and sorted unused); every block of the persistent kernel's next phase takes
// the top-k and the sort itself (route_choices_block) instead of one block while the others wait.
// W: the router's element type (bf16 as the checkpoint ships it, or float).
template <class Sync, bool kRouterInRegs = true, bool kChoicesLater = false, class W>
__device__ inline void moe_route_body(const float* x, const bf16* gain, int H, float eps, uint8_t* q, float* s, int ld,
                                      float* h_out, bf16* h_mxfp4, const W* router, const bf16* router_bias, int E, int k,
                                      float* logits, int32_t* counter, int32_t* idx, float* w, MoeSorted sorted,
                                      VBlock blk, const Sync& sync) {
  extern __shared__ float row[];  // [H] normalized row, then [E] logits for the top-k
  const int t = blk.x, rb = blk.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = rb * kExpertsPerRouteBlock + warp;
  // The warp's router row is a weight: into registers before pdl_wait, while the kernel before
  // this one (the o-projection) is still finishing.
  RouterRegs<W> wr;  // (unused without kRouterInRegs: the compiler drops it)
  if constexpr (kRouterInRegs) load_router_row(router, e, E, H, wr);
  sync.wait();
  sync.release();
  float v[kRowMax / kRouteThreads];
  load_row<kRouteThreads>(x + size_t(t) * H, H, v);
  const bool first = rb == 0;
  rmsnorm_quantize_row<kRouteThreads>(v, gain, H, eps, row, first ? q + size_t(t) * H : nullptr, s, ld, t,
                                      first && h_out ? h_out + size_t(t) * H : nullptr);
  if (first && h_mxfp4) store_row_mxfp4_layout(row, H, h_mxfp4 + size_t(t) * mxfp4_act_cols(H));
  if (e < E) {
    float l;
    if constexpr (kRouterInRegs) l = router_logit(wr, router, e, row, H);
    else l = warp_dot_f32(router + size_t(e) * H, row, H);
    if (lane == 0) logits[size_t(t) * E + e] = l + __bfloat162float(router_bias[e]);
  }
  if constexpr (kChoicesLater) return;
  if (!last_block_to_arrive(counter + t, blk.ny)) return;
  float* lg = row + ((H + 3) & ~3);
  for (int i = threadIdx.x; i < E; i += blockDim.x) lg[i] = __ldcg(logits + size_t(t) * E + i);
  __syncthreads();
  if (warp == 0) warp_topk_softmax(lg, E, k, idx + size_t(t) * k, w + size_t(t) * k);
  // The last token to finish sorts every token's choices by expert (counter[T], reset likewise);
  // with one token (a batch-1 step) that is this block, without a second round trip.
  if (blk.nx > 1) {
    if (!last_block_to_arrive(counter + blk.nx, blk.nx)) return;
  } else {
    __syncthreads();  // warp 0's idx and w, visible to the block
  }
  moe_sort_block(idx, blk.nx * k, k, E, sorted.seg, sorted.row_token, sorted.pair_row, sorted.active,
                 reinterpret_cast<int*>(row));
}

// The routing's second half, by one block, for the persistent decode kernel: the top-k softmax of
// T tokens' router logits ([T][E], written by other blocks: read .cg; warp_topk_softmax, the
// route kernel's) and their T k pairs sorted by expert as moe_sort_block lays them out (runs padded
// to multiples of 4, padding rows -1, the active experts in order then -1), but deterministic: a
// pair's row in its expert's run is its rank among that expert's pairs, so every block that runs
// this finds the same rows. (moe_sort_block's atomics order a run's rows by arrival; a row's
// results do not depend on its place in the run, so both give the same bits.) Into `mine` (seg
// [E + 1], active [min(E, T k)], row_token [T k + 4 E] at mine, mine + E + 1, mine + 2 E + 1) and,
// with `all` (the canonical buffers: idx, w [T][k], sorted), there too. E <= blockDim.x <= 256 (the
// warps' totals take 8 slots), k <= 16.
// sh: route_choices_smem(T, E, k) bytes of shared memory. Ends synchronized.
__host__ __device__ inline int route_choices_smem(int T, int E, int k) { return (T * E + 2 * T * k + 2 * E + 1 + 16) * 4; }
__device__ inline void route_choices_block(const float* logits, int T, int E, int k, int32_t* mine, bool all,
                                           int32_t* idx, float* w, MoeSorted sorted, float* sh) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5, P = T * k;
  float* lg = sh;                                          // [T][E]
  int32_t* idx_s = reinterpret_cast<int32_t*>(lg + T * E);  // [P]
  float* w_s = reinterpret_cast<float*>(idx_s + P);        // [P]
  int32_t* cnt = reinterpret_cast<int32_t*>(w_s + P);      // [E]
  int32_t* base = cnt + E;                                 // [E + 1]
  int32_t* wsum = base + E + 1;                            // [8][2]: the warps' totals
  for (int i = threadIdx.x; i < T * E; i += blockDim.x) lg[i] = __ldcg(logits + i);
  __syncthreads();
  for (int t = warp; t < T; t += nw) warp_topk_softmax(lg + t * E, E, k, idx_s + t * k, w_s + t * k);
  __syncthreads();
  // Each expert's pairs, then the runs' offsets and the active experts' places: exclusive scans
  // of round4(count) and (count > 0) over the experts, a thread each.
  const int e = threadIdx.x;
  int c = 0;
  if (e < E)
    for (int p = 0; p < P; ++p) c += idx_s[p] == e;
  const int v = round4(c), f = c > 0;
  int sv = v, sf = f;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, sv, o), b = __shfl_up_sync(0xffffffffu, sf, o);
    if (lane >= o) sv += a, sf += b;
  }
  if (lane == 31) wsum[2 * warp] = sv, wsum[2 * warp + 1] = sf;
  __syncthreads();
  for (int i = 0; i < warp; ++i) sv += wsum[2 * i], sf += wsum[2 * i + 1];
  int32_t *seg = mine, *active = mine + E + 1, *row_token = mine + 2 * E + 1;
  // Entry i of one of the sorted arrays, into the block's copy and, with `all`, the canonical one.
  auto put = [all](int32_t* copy, int32_t* canonical, int i, int32_t value) {
    copy[i] = value;
    if (all) canonical[i] = value;
  };
  if (e < E) {
    cnt[e] = c, base[e] = sv - v;
    put(seg, sorted.seg, e, sv - v);
    if (f) put(active, sorted.active, sf - 1, e);
    if (e == E - 1) {
      base[E] = sv;
      put(seg, sorted.seg, E, sv);
      for (int j = sf; j < min(E, P); ++j) put(active, sorted.active, j, -1);  // sf: the active experts
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    const int ep = idx_s[p];
    int rank = 0;
    for (int q = 0; q < p; ++q) rank += idx_s[q] == ep;
    const int r = base[ep] + rank;
    put(row_token, sorted.row_token, r, p / k);
    if (all) sorted.pair_row[p] = r, idx[p] = ep, w[p] = w_s[p];
  }
  if (e < E)
    for (int r = base[e] + cnt[e]; r < base[e + 1]; ++r) put(row_token, sorted.row_token, r, -1);
  __syncthreads();
}

}  // namespace osprey::cuda
