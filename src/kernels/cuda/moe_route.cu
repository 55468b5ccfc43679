// The MoE's routing front (fp8.cuh moe_route): the MLP norm, the router logits, the top-k
// softmax and the sort of the (token, choice) pairs by expert into the row layout every grouped
// GEMM reads (MoeSorted): one kernel for decode steps and short chunks (fp32 router sums); for
// prompt chunks tiles of tokens (up to 32 experts one kernel with fp32 router sums, above a kernel
// for the rows and one for the logits on the tensor cores, the choices and the runs) and the
// pairs' scatter; moe_sort for choices made elsewhere.
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
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/moe_route_body.cuh"

namespace osprey::cuda {

namespace {

// Up to this many tokens (decode steps and verify chunks, whose buckets go to 128 and more), a
// block per (token, 8 experts) that loads its router rows before its PDL wait; above, prompt
// chunks take tiles of tokens (at 128 tokens tiles took a 20b batch-128 step from 20.4 to 21.4 ms).
constexpr int kRouteTiledAbove = 512;

template <class W>
__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                  uint8_t* q, float* s, int ld, float* h_out,
                                                                  bf16* h_mxfp4, const W* router, const bf16* router_bias, int E,
                                                                  int k, float* logits, int32_t* counter, int32_t* idx,
                                                                  float* w, MoeSorted sorted) {
  moe_route_body(x, gain, H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias, E, k, logits, counter, idx, w, sorted,
                 VBlock::this_block(), PdlSync{});
}

// Prompt chunks: tiles of tokens. Up to 32 experts (gpt-oss-20b) one kernel makes the rows and
// the fp32 router sums of a tile (moe_route_tiled_kernel); above (gpt-oss-120b), the rows and the
// logits are two kernels (moe_norm_tiled_kernel, moe_route_wgmma_kernel), the logits on the tensor
// cores. Measured on an H100 (bench/probes/prefill_passes.cu route, docs/PERF.md sessions 38 and
// 39): at 128 experts the two kernels with this wgmma logits kernel take 177 us for 8,192 tokens
// against the fp32 tiled kernel's 398-400, and 106 against 121 for 1,024 (the mma.sync variant it
// replaced: 194 and 116-117). At 32 experts the two-kernel route (mma.sync logits) took 173
// against 190 us for 8,192 tokens but 101 against 54 for 1,024 (32 blocks of 32 tokens leave most
// SMs idle), so the 20b keeps its fp32 kernel. The pairs' scatter follows either.
constexpr int kRouteTile = 8, kRouteExperts = 4, kNormTile = 2, kRouteMaxExperts = 256, kRouteFp32MaxExperts = 32;

// The rows of a tile of nt tokens from t0 (H % 4 == 0), made as moe_route_kernel makes them, bit
// for bit: the x rows are copied to shared memory (rows, stride Hp) together, and the block
// normalizes and quantizes them together (tile_rmsnorm_quantize, the sums of
// rmsnorm_quantize_row<256>); the normalized rows stay in `rows`.
template <int kTile>
__device__ inline void tile_rows(const float* x, const bf16* gain, int H, float eps, uint8_t* q, float* s, int ld,
                                 float* h_out, bf16* h_mxfp4, float* rows, int Hp, int t0, int nt,
                                 float (*part)[kRouteThreads / 32]) {
  constexpr int NW = kRouteThreads / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int per_row = H / 4;  // 16-byte copies, all in flight at once
  const float* src = x + size_t(t0) * H;
  for (int i = threadIdx.x; i < nt * per_row; i += blockDim.x) {
    const int r = i / per_row, c = i % per_row;
    cp_async16(rows + size_t(r) * Hp + 4 * c, src + size_t(r) * H + 4 * c, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  tile_rmsnorm_quantize<kRouteThreads, kRouteThreads, kTile>(rows, Hp, nt, gain, H, eps, q, s, ld, t0, h_out, part);
  if (h_mxfp4)
    for (int i = warp; i < nt; i += NW)
      store_row_mxfp4_layout(rows + size_t(i) * Hp, H, h_mxfp4 + size_t(t0 + i) * mxfp4_act_cols(H), lane, 32);
}

// The choices of a tile of nt tokens from t0 whose logits lg [nt][E] are in shared memory: a warp
// per token does the top-k; the tile's pairs take their rank among the tile's pairs of their
// expert, then the block's place in each expert's run (counters[0, E): the runs' lengths so far,
// zero again when the kernel ends), and pair_row holds each pair's place in its run until
// moe_scatter_kernel; the last block to arrive lays the runs out (seg, active, the padding
// rows). cnt and base: E ints of shared memory each, cnt zero on entry.
template <int kMaxPairsPerThread>
__device__ inline void tile_choices(const float* lg, int t0, int nt, int T, int E, int k, int32_t* counter,
                                    int32_t* idx, float* w, MoeSorted sorted, int* cnt, int* base) {
  const int warp = threadIdx.x >> 5, NW = int(blockDim.x) >> 5;
  for (int i = warp; i < nt; i += NW)
    warp_topk_softmax(lg + i * E, E, k, idx + size_t(t0 + i) * k, w + size_t(t0 + i) * k);
  __syncthreads();  // idx, written by lane 0 of each warp, visible to the block
  const int np = nt * k;  // at most kMaxPairsPerThread * blockDim.x
  int ep[kMaxPairsPerThread], rank[kMaxPairsPerThread];
#pragma unroll
  for (int u = 0; u < kMaxPairsPerThread; ++u) {
    const int p = int(threadIdx.x) + u * int(blockDim.x);
    ep[u] = p < np ? idx[size_t(t0) * k + p] : -1;
    rank[u] = ep[u] >= 0 ? atomicAdd(&cnt[ep[u]], 1) : 0;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    if (cnt[e]) base[e] = atomicAdd(counter + e, cnt[e]);
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kMaxPairsPerThread; ++u)
    if (ep[u] >= 0) sorted.pair_row[size_t(t0) * k + threadIdx.x + u * blockDim.x] = base[ep[u]] + rank[u];
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

// moe_route_tiled_kernel (up to 32 experts): block b takes `tile` (at most kRouteTile) tokens:
// their rows (tile_rows), then the same fp32 router sums of the same values as moe_route_kernel,
// bit for bit: each warp takes kRouteExperts experts at a time and sums every token of the tile
// against them (router_tile): a row float4 read from shared memory serves four experts; then the
// choices (tile_choices). Two blocks an SM (8 tokens, at most 128 registers and about 100 KB of
// shared memory each), so that one block's loads and norms run beside the other's router sums.

// One warp's router sums of kRouteExperts experts from e0 (zero past E) against the tile's nt
// normalized rows (shared memory, row stride Hp; kFull: nt == kRouteTile), each in warp_dot_f32's
// order: lane l takes the float4 steps c = l + 32 j in order with dot4_step, then warp_sum. One
// staged row float4 feeds the four experts' sums. The router's step j (as loaded: float4s, or
// four BF16 each) sits in one of three register buffers, loaded two steps ahead (the buffers
// rotate by unrolling, no copies).
template <bool kFull, class W>
__device__ inline void router_tile(const float* rows, int Hp, int nt, const W* router, int H, int E, int e0,
                                   float (&acc)[kRouteTile][kRouteExperts]) {
  using Raw = typename Weights4<W>::Raw;
  const int lane = threadIdx.x & 31, H4 = H / 4, Hp4 = Hp / 4, steps = (H4 + 31) / 32;
  const float4* r4 = reinterpret_cast<const float4*>(rows);
#pragma unroll
  for (int t = 0; t < kRouteTile; ++t)
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e) acc[t][e] = 0.0f;
  auto load = [&](int j, Raw (&w)[kRouteExperts]) {
    const int c = lane + 32 * j;
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e)
      w[e] = j < steps && c < H4 && e0 + e < E ? Weights4<W>::load(router + size_t(e0 + e) * H, c) : Weights4<W>::zero();
  };
  auto step = [&](int j, const Raw (&raw)[kRouteExperts]) {
    const int c = lane + 32 * j;
    if (j >= steps || c >= H4) return;  // the last step: the lanes past H4
    float4 w[kRouteExperts];
#pragma unroll
    for (int e = 0; e < kRouteExperts; ++e) w[e] = Weights4<W>::f32(raw[e]);
#pragma unroll
    for (int t = 0; t < kRouteTile; ++t) {
      if (!kFull && t >= nt) break;  // uniform
      const float4 b = r4[t * Hp4 + c];
#pragma unroll
      for (int e = 0; e < kRouteExperts; ++e) acc[t][e] = dot4_step(acc[t][e], w[e], b);
    }
  };
  Raw w0[kRouteExperts], w1[kRouteExperts], w2[kRouteExperts];
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
template <class W>
__global__ void __launch_bounds__(kRouteThreads, 2)
    moe_route_tiled_kernel(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                           float* h_out, bf16* h_mxfp4, const W* router, const bf16* router_bias, int E, int k,
                           int tile, float* logits, int32_t* counter, int32_t* idx, float* w, MoeSorted sorted) {
  constexpr int NW = kRouteThreads / 32;
  extern __shared__ float sm[];  // [tile][Hp] rows, then [tile][E] logits
  __shared__ float part[kRouteTile][NW];
  __shared__ int cnt[kRouteMaxExperts], base[kRouteMaxExperts];
  const int Hp = (H + 3) & ~3, t0 = blockIdx.x * tile, nt = min(tile, T - t0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* rows = sm;
  float* lg = sm + size_t(tile) * Hp;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  pdl_wait();
  pdl_launch_dependents();
  tile_rows<kRouteTile>(x, gain, H, eps, q, s, ld, h_out, h_mxfp4, rows, Hp, t0, nt, part);
  for (int e0 = warp * kRouteExperts; e0 < E; e0 += NW * kRouteExperts) {
    float acc[kRouteTile][kRouteExperts];
    if (nt == kRouteTile) router_tile<true>(rows, Hp, nt, router, H, E, e0, acc);
    else router_tile<false>(rows, Hp, nt, router, H, E, e0, acc);
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
  tile_choices<1>(lg, t0, nt, T, E, k, counter, idx, w, sorted, cnt, base);  // nt * k <= 8 * 16 pairs
}

// moe_norm_tiled_kernel (more than 32 experts): the rows alone (tile_rows), tiles of 2 tokens (23
// KB of shared memory at H = 2880): several blocks an SM, so that some blocks' loads run beside
// other blocks' norms.
__global__ void __launch_bounds__(kRouteThreads)
    moe_norm_tiled_kernel(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                          float* h_out, bf16* h_mxfp4, int tile) {
  extern __shared__ float sm[];  // [tile][Hp] rows
  __shared__ float part[kNormTile][kRouteThreads / 32];
  const int Hp = (H + 3) & ~3, t0 = blockIdx.x * tile, nt = min(tile, T - t0);
  pdl_wait();
  pdl_launch_dependents();
  tile_rows<kNormTile>(x, gain, H, eps, q, s, ld, h_out, h_mxfp4, sm, Hp, t0, nt, part);
}

// moe_route_wgmma_kernel<N>: the router logits of kWgTokens tokens a block on the tensor cores
// (wgmma), then their top-k softmax and their places in the experts' runs.
//
// The logits. The router input is g * x (g the norm's BF16 gain), and a token's logit is
//   r * sum_k W[e][k] (g[k] x[k]) + bias[e],   r = rsqrt(sum_k x[k]^2 / H + eps),
// the norm's factor applied once to the sum (mathematically the router of the normalized row).
// Each g x is split into three BF16 terms, hi + mid + lo, which carry it to about 2^-26 of its
// size (split3_bf16): the router weights are BF16 as shipped, so every product is exact and the
// MMAs' fp32 sums see the fp32 inputs. A token's sum runs over k16 steps in order, each adding
// the hi, mid and lo products in that order; r's sum of squares runs per thread over its 4
// columns of each k16 step, then over the 4 threads of a row. Neither order depends on the tile, the row within it or T:
// a token's logits are the same bits in any prompt chunk. They are not the per-token kernel's
// (fp32 FMAs in another order): the two agree to fp32 rounding (the tests hold them within 1e-5).
//
// The block takes kWgTokens tokens with two warpgroups, warpgroup h the experts [N h, N h + N)
// (N = 32, 64 or 128: the block stages 2N experts, the rows past E zeros); warp w % 4 of a
// warpgroup holds tokens 16 (w % 4) .. + 15. The K loop stages kWgCols columns of x (fp32) and of
// the router (BF16, each expert's 64 columns one 128-byte row in the 128-byte swizzle, as wgmma's
// K-major B reads it) by cp.async, kWgStages deep. Each k16 step a thread makes the three terms of
// its own A fragments (m16n8k16 layout) from the staged x, and the warpgroup issues three
// wgmma m64nNk16 with A in registers (hi, mid, lo), two steps' terms in flight.
constexpr int kWgTokens = 64, kWgCols = 64, kWgStages = 3, kWgThreads = 256;
constexpr int kWgXStride = kWgCols + 8;  // floats: the A fragments' 64-bit loads without bank conflicts
__host__ __device__ constexpr size_t route_wgmma_smem(int experts_staged, int H) {
  return 1024 /* alignment of the swizzled router */ + size_t(kWgStages) * experts_staged * kWgCols * sizeof(bf16) +
         size_t(kWgStages) * kWgTokens * kWgXStride * sizeof(float) + size_t(H) * sizeof(float);
}

// v = hi + mid + lo to about 2^-26 of v (v in BF16's exponent range), each pair of values as a
// BF16 pair, each term v's rest rounded to nearest. (Terms cut instead of rounded sum to v
// exactly, but all share v's sign, and the MMAs' fp32 sums, which truncate, then err one way: the
// 120b-shape test measured 1.2e-5 of the largest logit against under 1e-5 with these.)
__device__ inline void split3_bf16(float a, float b, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  hi = pack_bf16(a, b);
  a -= __uint_as_float(hi << 16), b -= __uint_as_float(hi & 0xFFFF0000u);
  mid = pack_bf16(a, b);
  a -= __uint_as_float(mid << 16), b -= __uint_as_float(mid & 0xFFFF0000u);
  lo = pack_bf16(a, b);
}

// d += the three terms' products, one wgmma each (A in registers, B the warpgroup's experts).
template <int N>
__device__ inline void wgmma_terms(float (&d)[N / 2], const uint32_t (&a)[3][4], uint64_t b) {
#pragma unroll
  for (int u = 0; u < 3; ++u) {
    if constexpr (N == 32) sm90::wgmma_m64n32k16_bf16_rs_kmajor(d, a[u], b);
    else if constexpr (N == 64) sm90::wgmma_m64n64k16_bf16_rs_kmajor(d, a[u], b);
    else sm90::wgmma_m64n128k16_bf16_rs_kmajor(d, a[u], b);
  }
}

template <int N>
__global__ void __launch_bounds__(kWgThreads, 1)
    moe_route_wgmma_kernel(const float* x, const bf16* gain, int T, int H, float eps, const bf16* router,
                           const bf16* router_bias, int E, int k, float* logits, int32_t* counter, int32_t* idx,
                           float* w, MoeSorted sorted) {
  constexpr int Ep = 2 * N, R = N / 2;  // experts staged; accumulators a thread
  constexpr int kXPieces = kWgTokens * kWgCols / 4 / kWgThreads, kWPieces = Ep * kWgCols / 8 / kWgThreads;
  static_assert(Ep * kWgCols / 8 % kWgThreads == 0, "router copies: a whole number a thread");
  constexpr uint32_t kWStageBytes = Ep * kWgCols * sizeof(bf16);
  extern __shared__ __align__(16) uint8_t wg_smem[];
  uint8_t* const base = wg_smem + ((1024 - (sm90::smem_u32(wg_smem) & 1023)) & 1023);
  float* sx = reinterpret_cast<float*>(base + kWgStages * kWStageBytes);              // [stages][64][kWgXStride]
  float* sgf = sx + kWgStages * kWgTokens * kWgXStride;                               // [H] the gain in fp32
  float* lg = reinterpret_cast<float*>(base);  // after the K loop: [64][E] logits (the router stages' place)
  __shared__ int cnt[kRouteMaxExperts], base_e[kRouteMaxExperts];
  const int t0 = blockIdx.x * kWgTokens, nt = min(kWgTokens, T - t0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int wg = warp >> 2, wr = warp & 3;
  const int chunks = H / kWgCols;
  // This thread's copies, planned once (every chunk is whole: H % kWgCols == 0; a row past the
  // tile's tokens or the experts reads nothing and stages zeros, its source in bounds): x pieces p =
  // tid + 256 i (row p / 16, columns 4 (p % 16) ..), router pieces p (expert p / 8, 16-byte unit
  // p % 8, stored at unit (p % 8) ^ (expert % 8) of its row: the 128-byte swizzle).
  const float* x_src[kXPieces];
  const bf16* w_src[kWPieces];
  uint32_t x_dst[kXPieces], w_dst[kWPieces], x_bytes[kXPieces], w_bytes[kWPieces];
#pragma unroll
  for (int i = 0; i < kXPieces; ++i) {
    const int p = threadIdx.x + i * kWgThreads, r = p / (kWgCols / 4), col = 4 * (p % (kWgCols / 4));
    x_bytes[i] = r < nt ? 16 : 0;
    x_src[i] = x + (r < nt ? size_t(t0 + r) * H : 0) + col;
    x_dst[i] = sm90::smem_u32(sx + r * kWgXStride + col);
  }
#pragma unroll
  for (int i = 0; i < kWPieces; ++i) {
    const int p = threadIdx.x + i * kWgThreads, e = p / 8, u = p % 8;
    w_bytes[i] = e < E ? 16 : 0;
    w_src[i] = router + (e < E ? size_t(e) * H : 0) + 8 * u;
    w_dst[i] = sm90::smem_u32(base) + uint32_t(e * 128 + ((u ^ (e & 7)) << 4));
  }
  auto load_chunk = [&](int ch, int st) {
    const int k0 = ch * kWgCols;
#pragma unroll
    for (int i = 0; i < kXPieces; ++i)
      cp_async16_shared(x_dst[i] + uint32_t(st * kWgTokens * kWgXStride * sizeof(float)), x_src[i] + k0, x_bytes[i]);
#pragma unroll
    for (int i = 0; i < kWPieces; ++i) cp_async16_shared(w_dst[i] + uint32_t(st) * kWStageBytes, w_src[i] + k0, w_bytes[i]);
  };
  for (int e = threadIdx.x; e < E; e += kWgThreads) cnt[e] = 0;
  for (int i = threadIdx.x; i < H; i += kWgThreads) sgf[i] = __bfloat162float(gain[i]);  // a weight: before the wait
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int ch = 0; ch < kWgStages - 1; ++ch) {
    if (ch < chunks) load_chunk(ch, ch);
    cp_async_commit();
  }
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  float ss[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp: x^2 of this thread's columns
  uint32_t a[2][3][4];         // two k16 steps' terms (a step's registers are rewritten once its wgmmas are done)
  int step = 0;
  for (int ch = 0; ch < chunks; ++ch) {
    cp_async_wait<kWgStages - 2>();
    sm90::fence_proxy_async_shared();  // the router's staged rows (generic-proxy copies) before wgmma reads them
    // Chunk ch is in; every warp is past chunk ch - 1 (its wgmmas done), whose stage is refilled now.
    __syncthreads();
    if (ch + kWgStages - 1 < chunks) load_chunk(ch + kWgStages - 1, (ch + kWgStages - 1) % kWgStages);
    cp_async_commit();
    const int st = ch % kWgStages, k0 = ch * kWgCols;
    const float* xs = sx + (st * kWgTokens + wr * 16) * kWgXStride;
    const uint64_t wdesc = sm90::desc_k128_swizzle(sm90::smem_u32(base) + uint32_t(st) * kWStageBytes + uint32_t(wg * N * 128));
#pragma unroll
    for (int ks = 0; ks < kWgCols / 16; ++ks, ++step) {
      const int kk = ks * 16 + 2 * c;
      const float2 g0 = *reinterpret_cast<const float2*>(sgf + k0 + kk), g1 = *reinterpret_cast<const float2*>(sgf + k0 + kk + 8);
      sm90::wgmma_wait<1>();  // the wgmmas of two steps back, which read this step's registers, are done
      uint32_t (&t)[3][4] = a[step & 1];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // a0 (row g, k 2c..), a1 (g + 8), a2 (g, k 2c + 8..), a3 (g + 8, k 2c + 8..)
        const float2 v = *reinterpret_cast<const float2*>(xs + (g + 8 * (i & 1)) * kWgXStride + kk + 8 * (i >> 1));
        const float2 gv = (i >> 1) ? g1 : g0;
        ss[i & 1] = __fmaf_rn(v.y, v.y, __fmaf_rn(v.x, v.x, ss[i & 1]));
        split3_bf16(__fmul_rn(gv.x, v.x), __fmul_rn(gv.y, v.y), t[0][i], t[1][i], t[2][i]);
      }
      sm90::fence_regs(acc);
      sm90::wgmma_fence();
      wgmma_terms<N>(acc, t, sm90::desc_advance(wdesc, uint32_t(ks * 32)));
      sm90::wgmma_commit();
    }
    sm90::wgmma_wait<0>();  // this chunk's stage is refilled after the next barrier
    sm90::fence_regs(acc);
  }
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], 1);
    ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], 2);
  }
  __syncthreads();  // both warpgroups are done with the router stages: lg takes their place
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int t = wr * 16 + g + 8 * h;
    const float r = rsqrtf(ss[h] / float(H) + eps);
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const int e = wg * N + 8 * j + 2 * c + cc;
        if (t < nt && e < E) {
          const float v = __fadd_rn(__fmul_rn(acc[4 * j + 2 * h + cc], r), __bfloat162float(router_bias[e]));
          lg[t * E + e] = v, logits[size_t(t0 + t) * E + e] = v;
        }
      }
  }
  __syncthreads();
  tile_choices<kWgTokens * 16 / kWgThreads>(lg, t0, nt, T, E, k, counter, idx, w, sorted, cnt, base_e);  // k <= 16
}

// The pairs of a prompt chunk in their experts' runs (after moe_route_wgmma_kernel): pair p's row is
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
               const bf16* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st, bf16* h_mxfp4) {
  if (T == 0) return;
  if (k > 16 || k > E) fail_plain("moe_route: at most 16 experts per token, and no more than there are");
  check_row(H, "moe_route");
  const size_t Hp = size_t((H + 3) & ~3);
  if (T > kRouteTiledAbove && H % kWgCols == 0) {
    if (E > kRouteMaxExperts) fail_plain("moe_route: prompt chunks route over at most 256 experts (got " + std::to_string(E) + ")");
    if (E <= kRouteFp32MaxExperts) {
      // Tiles of up to kRouteTile tokens (as many as about 100 KB of shared memory holds: two
      // blocks an SM), and no larger than gives every SM two blocks of the grid.
      constexpr size_t kSmem = 100 * 1024;
      const int fits = int(std::clamp<size_t>(kSmem / sizeof(float) / (Hp + E), 1, kRouteTile));
      const int tile = std::clamp(T / (2 * sm_count()), 1, fits);
      static const bool attr = [] {
        OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_route_tiled_kernel<bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kSmem + 16 * 1024)));
        return true;
      }();
      (void)attr;
      launch_pdl("route", moe_route_tiled_kernel<bf16>, unsigned((T + tile - 1) / tile), kRouteThreads,
                 (Hp + E) * tile * sizeof(float), st, x, gain, T, H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias,
                 E, k, tile, logits, counters, idx, w, sorted);
    } else {
      // The rows: tiles of kNormTile tokens, several blocks an SM.
      static const bool norm_attr = [] {
        OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_norm_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kNormTile * kRowMax * sizeof(float))));
        return true;
      }();
      (void)norm_attr;
      launch_pdl("route", moe_norm_tiled_kernel, unsigned((T + kNormTile - 1) / kNormTile), kRouteThreads,
                 Hp * kNormTile * sizeof(float), st, x, gain, T, H, eps, q, s, ld, h_out, h_mxfp4, kNormTile);
      // The logits, the choices and the runs: two warpgroups of N experts.
      auto launch_wgmma = [&]<int N>() {
        const size_t smem = route_wgmma_smem(2 * N, H);
        static const bool attr = [] {
          OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_route_wgmma_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 int(route_wgmma_smem(2 * N, kRowMax))));
          return true;
        }();
        (void)attr;
        launch_pdl("route", moe_route_wgmma_kernel<N>, unsigned((T + kWgTokens - 1) / kWgTokens), kWgThreads, smem,
                   st, x, gain, T, H, eps, router, router_bias, E, k, logits, counters, idx, w, sorted);
      };
      if (E <= 64) launch_wgmma.template operator()<32>();
      else if (E <= 128) launch_wgmma.template operator()<64>();
      else launch_wgmma.template operator()<128>();
    }
    launch_pdl("sort", moe_scatter_kernel, unsigned((T * k + 255) / 256), 256, 0, st, idx, T * k, k, sorted.seg,
               sorted.row_token, sorted.pair_row);
    return;
  }
  const size_t smem = std::max(Hp + E, size_t(3 * E + 1)) * sizeof(float);
  const dim3 grid(unsigned(T), unsigned((E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock));
  launch_pdl("route", moe_route_kernel<bf16>, grid, kRouteThreads, smem, st, x, gain, H, eps, q, s, ld, h_out, h_mxfp4,
             router, router_bias, E, k, logits, counters, idx, w, sorted);
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  launch_pdl("sort", moe_sort_kernel, 1, 1024, (3 * E + 1) * sizeof(int), st, idx, T * k, k, E, seg, row_token, pair_row,
             active);
}

}  // namespace osprey::cuda
