// The MXFP4 expert GEMMs of prompt chunks on wgmma with the weights decoded in registers
// (m_grouped_mxfp4_gemm_bf16_wgmma_contiguous). Internal to kernels/cuda: moe_gemm_mxfp4.cu is the
// one file that includes it (its kernels and constants have internal linkage).
//
// The kernel computes y^T: the weights are wgmma's A operand, the tokens its B operand. A tile is
// 256 weight rows by 128 tokens of one expert. blockIdx.x walks the weight tiles and blockIdx.y the
// row tiles of all experts in expert order, so that the blocks running together share their rows
// and a few experts' weights (in the other order each weight tile would read every row again).
// Per K block of 128 columns thread 0 loads the tokens' two 64-column boxes (TMA, 128-byte
// swizzle: the K-major B operand; the rows in the wgmma layout, formats/mxfp4.h
// mxfp4_wgmma_position) and the 16 packed weight tiles (bulk copies, as loaded) into a ring of
// kYStages stages. Warpgroup c (of four) takes weight rows 64c.. as one m64 block. A thread
// decodes its A fragments as the decode path does (moe_gemm_mxfp4_decode.cuh mxfp4_kb_mma: its
// rows g and g + 8, group q, word u giving steps 2u and 2u + 1), so each k16 step multiplies the
// same products into the same slots as mma.sync there: the same bits, from the bias in the
// accumulators and the same K splits (split 0 from the bias, each later split's sum added in
// order). The four warpgroups take turns on the tensor cores: one decodes while the others' steps
// run. Measured against the other paths: docs/PERF.md, session 42 (faster than the tiled kernels
// at 32 to 1,024 rows an expert; slower than W4A8 at long chunks).
#pragma once

#include "kernels/cuda/moe_gemm_mxfp4_decode.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_tiled.cuh"
#include "kernels/cuda/sm90.cuh"

namespace osprey::cuda {
namespace {

constexpr int kYRows = 256, kYTokens = 128, kYStages = 4;
// Four warpgroups, one m64 block of weight rows each (64 accumulators and 16 fragment registers a
// thread: 512 threads leave 128 registers each); thread 0 also issues the copies.
constexpr int kYWarps = 16, kYThreads = kYWarps * 32;
constexpr int kYActBytes = kYTokens * kBlk * 2;                        // two [128][64] BF16 boxes
constexpr int kYRawBytes = kYRows / kMxfp4TileRows * kMxfp4TileBytes;  // 16 packed tiles
struct YSmem {
  alignas(1024) uint8_t act[kYStages][kYActBytes];
  alignas(16) uint8_t raw[kYStages][kYRawBytes];
  uint64_t full[kYStages], empty[kYStages];
};
constexpr size_t kYSmem = sizeof(YSmem) + 1024;  // and the 1,024-byte alignment

template <bool kSwiglu, bool kBig>
__global__ void __launch_bounds__(kYThreads, 1)
    mxfp4_wgmma_yt_kernel(const __grid_constant__ CUtensorMap tx, Mxfp4ExpertsView W, ExpertRows rows, float* y, int ks,
                          SwigluOut sw) {
  extern __shared__ uint8_t smem_raw[];
  YSmem& s = *reinterpret_cast<YSmem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int N = W.N, KB = mxfp4_act_cols(W.K) / kBlk, E = W.experts;
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    for (int i = 0; i < kYStages; ++i) sm90::mbar_init(&s.full[i], 1), sm90::mbar_init(&s.empty[i], kYWarps);
    sm90::mbar_fence_init();
  }
  pdl_wait();
  pdl_launch_dependents();
  TiledBlock<kYTokens> blk;
  // Uniform: past the last tile. find's barriers also publish the mbarriers.
  if (!blk.find(rows, E, int(blockIdx.y))) return;
  const int e = blk.e, n0 = int(blockIdx.x) * kYRows;
  // The copies of K block kb into its stage (thread 0), once the stage's last readers let it go.
  const int ntiles = min(kYRows, N - n0) / kMxfp4TileRows;
  const uint8_t* wsrc = W.tiles + mxfp4_tiles_bytes(N, W.K) * e + size_t(n0 / kMxfp4TileRows) * KB * kMxfp4TileBytes;
  auto issue = [&](int kb) {
    const int st = kb % kYStages;
    sm90::mbar_wait(&s.empty[st], ((kb / kYStages) & 1) ^ 1);
    sm90::mbar_arrive_expect_tx(&s.full[st], uint32_t(kYActBytes + ntiles * kMxfp4TileBytes));
    sm90::tma_load_2d(s.act[st], &tx, &s.full[st], kb * kBlk, blk.m0);
    sm90::tma_load_2d(s.act[st] + kYActBytes / 2, &tx, &s.full[st], kb * kBlk + kBlk / 2, blk.m0);
    for (int i = 0; i < ntiles; ++i)
      sm90::bulk_load(s.raw[st] + i * kMxfp4TileBytes, wsrc + (size_t(i) * KB + kb) * kMxfp4TileBytes, kMxfp4TileBytes,
                      &s.full[st]);
  };
  if (tid == 0) {
    sm90::tma_prefetch_descriptor(&tx);
    for (int kb = 0; kb < min(KB, kYStages - 1); ++kb) issue(kb);
  }
  // The warpgroup (its m64 block: weight rows nb..) and the warp in it, uniform across the warp.
  const int c = __shfl_sync(0xffffffffu, tid >> 7, 0), wr = __shfl_sync(0xffffffffu, (tid >> 5) & 3, 0);
  const int g = lane >> 2, q = lane & 3;
  const int nb = n0 + 64 * c, n = nb + 16 * wr + g;  // this thread's weight rows n and n + 8
  const bool live = nb + 16 * wr < N;                 // the warp's 16 rows (N is a multiple of 16)
  float acc[64];
  {
    const float b0 = W.bias && live ? __bfloat162float(W.bias[size_t(e) * N + n]) : 0.0f;
    const float b1 = W.bias && live ? __bfloat162float(W.bias[size_t(e) * N + n + 8]) : 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[4 * j] = acc[4 * j + 1] = b0, acc[4 * j + 2] = acc[4 * j + 3] = b1;
  }
  const int per_split = (KB + ks - 1) / ks;
  // The outputs: row r = m0 + 8j + 2q + i (i = 0, 1) of the tile, weight row n (+ 8 for h = 1),
  // into fp32 y: a split's sum added to the earlier splits' (first: stored alone).
  auto flush = [&](bool first) {
    if (!live) return;
    // The row base through an opaque copy: its 64 addresses are made here, not kept live across
    // the K loop (hoisted, they spilled).
    int m0;
    asm volatile("mov.b32 %0, %1;" : "=r"(m0) : "r"(blk.m0));
    float* const base = y + (size_t(m0) + 2 * q) * N + n;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = m0 + 8 * j + 2 * q + i;
        if (r >= blk.m_end) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* out = base + size_t(8 * j + i) * N + 8 * h;
          const float v = acc[4 * j + 2 * h + i];
          *out = first ? v : *out + v;
        }
      }
  };
  // A K block: the thread's two 16-byte groups (rows n, n + 8) decoded to the eight steps' A
  // fragments (word u: steps 2u, 2u + 1), then the eight MMAs as one commit group. ptxas serializes
  // every wgmma when registers an unfinished group reads are written, even by a wait<1> pattern,
  // so each K block waits for the last one's group; the warpgroups overlap one another instead.
  // A later K split's first step starts from zero.
  uint32_t a[8][4];
  for (int kb = 0; kb < KB; ++kb) {
    const int st = kb % kYStages;
    const bool split_start = kb > 0 && kb % per_split == 0;
    sm90::wgmma_wait<0>();
    if (kb > 0) {  // every step of kb - 1 is done: its stage is free, and the next copies go
      sm90::fence_proxy_async_shared();
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&s.empty[(kb - 1) % kYStages]);
    }
    if (tid == 0 && kb + kYStages - 1 < KB) issue(kb + kYStages - 1);
    sm90::mbar_wait(&s.full[st], (kb / kYStages) & 1);
    const uint64_t bd0 = sm90::desc_k128_swizzle(sm90::smem_u32(s.act[st]));
    if (live) {
      const uint8_t* tile = s.raw[st] + (4 * c + wr) * kMxfp4TileBytes;
      const uint4 lo = *reinterpret_cast<const uint4*>(tile + g * 64 + q * 16);
      const uint4 hi = *reinterpret_cast<const uint4*>(tile + (g + 8) * 64 + q * 16);
      const E8m0Factors flo = e8m0_factors(tile[1024 + g * 4 + q]), fhi = e8m0_factors(tile[1024 + (g + 8) * 4 + q]);
      const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t vl = mul_bf16x2(e2m1_pair_bits(wl[u], j), flo.a), vh = mul_bf16x2(e2m1_pair_bits(wh[u], j), fhi.a);
          if constexpr (kBig) {  // b is 1 where the scale needs no second multiply: no branch
            vl = mul_bf16x2(vl, flo.b);
            vh = mul_bf16x2(vh, fhi.b);
          }
          // step 2u + j / 2: a0 / a1 (slots 2q..) for even j, a2 / a3 (slots 2q + 8..) for odd j
          a[2 * u + j / 2][2 * (j & 1)] = vl;
          a[2 * u + j / 2][2 * (j & 1) + 1] = vh;
        }
    } else {  // past N: zero weights (the MMAs still run: the same path for every warp)
#pragma unroll
      for (int k16 = 0; k16 < 8; ++k16) a[k16][0] = a[k16][1] = a[k16][2] = a[k16][3] = 0u;
    }
    sm90::wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < 8; ++k16)
      sm90::wgmma_m64n128k16_bf16_rs_kmajor(
          acc, a[k16], sm90::desc_advance(bd0, uint32_t((k16 >> 2) * (kYActBytes / 2) + (k16 & 3) * 32)),
          !(split_start && k16 == 0));
    sm90::wgmma_commit();
    if ((kb + 1) % per_split == 0 && kb + 1 < KB) {  // a split ends (not the last): into y
      sm90::wgmma_wait<0>();
      sm90::fence_regs(acc);
      flush(kb < per_split);
    }
  }
  sm90::wgmma_wait<0>();
  sm90::fence_regs(acc);
  const bool first = ks == 1 || KB <= per_split;
  if constexpr (!kSwiglu) {
    flush(first);
  } else {
    // Gate and up interleaved: even weight rows (even g) are gates, row n + 1 (lane + 4) its up.
    // Outputs o = n / 2 and o + 4 (rows n and n + 8) sit side by side in the wgmma layout.
    const int I = N / 2, Ip = mxfp4_act_cols(I), o = n / 2;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = blk.m0 + 8 * j + 2 * q + i;
        const bool ok = live && r < blk.m_end;
        float v[2], up[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          v[h] = acc[4 * j + 2 * h + i];
          if (!first && ok) v[h] += y[size_t(r) * N + n + 8 * h];
          up[h] = __shfl_down_sync(0xffffffffu, v[h], 4);
        }
        if (g % 2 == 0 && ok) {
          const float o0 = swiglu_clamped(v[0], up[0], sw.alpha, sw.limit), o1 = swiglu_clamped(v[1], up[1], sw.alpha, sw.limit);
          const __nv_bfloat162 p = __halves2bfloat162(__float2bfloat16_rn(o0), __float2bfloat16_rn(o1));
          *reinterpret_cast<__nv_bfloat162*>(sw.a + size_t(r) * Ip + mxfp4_wgmma_position(o)) = p;
        }
      }
    // The layout's columns past I are zeros: the first weight tile's blocks write them.
    if (blockIdx.x == 0 && Ip > I)
      for (int i = tid; i < kYTokens * (Ip - I); i += kYThreads) {
        const int r = blk.m0 + i / (Ip - I), oo = I + i % (Ip - I);
        if (r < blk.m_end) sw.a[size_t(r) * Ip + mxfp4_wgmma_position(oo)] = __float2bfloat16_rn(0.0f);
      }
  }
}

// Rows of the activation layout into the wgmma layout (each 64-byte chunk's 4 x 4 units of 4 bytes
// transposed), gathered: out row r from x row src[r] (null: r; negative, or r at or past *rows_end
// when given: zeros). A thread a chunk.
__global__ void act_rows_to_wgmma_kernel(const bf16* x, const int32_t* src, const int32_t* rows_end, int rows, int Kp,
                                         bf16* out) {
  pdl_wait();
  pdl_launch_dependents();
  const int chunks = Kp / 32;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * chunks) return;
  const int r = int(i / chunks), ch = int(i % chunks);
  const int sr = rows_end && r >= __ldg(rows_end) ? -1 : src ? __ldg(src + r) : r;
  uint4 v[4] = {};
  if (sr >= 0) {
    const uint4* in = reinterpret_cast<const uint4*>(x + size_t(sr) * Kp + 32 * ch);
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = __ldg(in + k);
  }
  const uint32_t u[4][4] = {{v[0].x, v[0].y, v[0].z, v[0].w},
                            {v[1].x, v[1].y, v[1].z, v[1].w},
                            {v[2].x, v[2].y, v[2].z, v[2].w},
                            {v[3].x, v[3].y, v[3].z, v[3].w}};
  uint4* o = reinterpret_cast<uint4*>(out + size_t(r) * Kp + 32 * ch);
#pragma unroll
  for (int j = 0; j < 4; ++j) o[j] = make_uint4(u[0][j], u[1][j], u[2][j], u[3][j]);
}

}  // namespace
}  // namespace osprey::cuda
