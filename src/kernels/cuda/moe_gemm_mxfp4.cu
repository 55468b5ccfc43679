// MXFP4 expert GEMMs (moe_gemm_mxfp4.cuh). Both kernels put a thread's 16 bytes of one weight row
// (one 32-value group) into the k slots it owns in eight consecutive mma.m16n8k16 steps, in the
// order the nibble decode produces them; the activations are stored in that order already
// (formats/mxfp4.h), so each thread reads its activation slots as 16-byte loads.
#include <algorithm>
#include <string>

#include "formats/mxfp4.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_decode.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_tiled.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_wgmma.cuh"
#include "kernels/cuda/tma.cuh"

namespace osprey::cuda {

namespace {

// The row path, 8 rows a pass: activations staged in two chunks of K at three blocks an SM, or
// whole at two where the grid is one wave of two (a batch-1 step: the chunk barrier only costs).
// The SwiGLU epilogue (sw.a) only in the one-wave kernel: it saves a launch a layer, 2 us of a
// batch-1 layer's 38, while at three blocks an SM its code spills and measured 1-2% slower at
// 64 and 128 rows (bench/probes/mxfp4_decode_ring.cu, docs/PERF.md); there it is the SwiGLU kernel.
// kBig: Mxfp4ExpertsView::big_scales (false drops the second multiply's test from the K loop).
template <int kChunks, bool kBig>
__global__ void __launch_bounds__(kWarps * 32, kChunks == 1 ? 2 : 3)
    mxfp4_decode_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks, SwigluOut sw) {
  constexpr int kPassRows = 8;
  if constexpr (kChunks == 1)
    mxfp4_decode_body<1, PdlSync, decode_stages(1), 1, kBig>(W, x, rows, y, ks, VBlock::this_block(), PdlSync{}, kPassRows,
                                                             sw);
  else
    mxfp4_decode_body<1, PdlSync, decode_stages(1), kChunks, kBig>(W, x, rows, y, ks, VBlock::this_block(), PdlSync{});
}

// The row path at 16 rows a pass, for 13-16 rows an expert typically (the 20b at batch 49-64):
// one decode of each weight feeds both 8-row groups where 8-row passes decode it twice for an
// expert above 8 rows. Its activations are staged in four chunks of K, so that three blocks an SM
// still fit (67-68 KB each; ptxas: 80 registers, 12 bytes of spill). The same MMAs in the same
// order on every accumulator as 8-row passes: the same bits. On the H200 (docs/PERF.md, session
// 35) it took the 20b step at batch 64 from 12.15-12.20 to 11.43-11.48 ms and at 56 from 11.40 to
// 10.94-10.98; at 48 (12 rows an expert) it was even, at 40 (10) 3% slower. Session 15 measured
// 16-row passes at two blocks an SM slower than 8-row ones at three.
constexpr int kRows16NT = 2, kRows16Chunks = 4;  // 16 rows a pass; the launcher sizes its stage from these
template <bool kBig>
__global__ void __launch_bounds__(kWarps * 32, 3)
    mxfp4_decode16_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  mxfp4_decode_body<kRows16NT, PdlSync, decode_stages(kRows16NT), kRows16Chunks, kBig>(W, x, rows, y, ks,
                                                                                      VBlock::this_block(), PdlSync{},
                                                                                      8 * kRows16NT);
}

constexpr int kWideNT = 4, kWideStages = 4;  // 32 rows a pass; two blocks an SM at ks <= 2
__global__ void __launch_bounds__(kWarps * 32, 2)
    mxfp4_wide_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  mxfp4_wide_body<kWideNT, PdlSync, kWideStages>(W, x, rows, y, ks, VBlock::this_block(), PdlSync{});
}

// ---------------------------------------------------------------------------------------------
__global__ void to_bf16_layout_kernel(const float* x, int T, int K, bf16* out, const int32_t* in_rows) {
  to_bf16_layout_body(x, T, K, out, in_rows, VBlock::this_block(), PdlSync{});
}

__global__ void swiglu_bf16_kernel(const float* t, const int32_t* rows_end, int rows_max, int I, float alpha,
                                   float limit, bf16* a, const bf16* bias, const int32_t* seg, int experts) {
  swiglu_bf16_body(t, rows_end, rows_max, I, alpha, limit, a, bias, seg, experts, VBlock::this_block(), PdlSync{});
}

// Thread i: group g of 128-column block kb of row n of expert e (i = ((e N + n) KB + kb) 4 + g):
// its 16 code bytes and scale from the tile, 32 BF16 values written where the activation layout
// puts their columns (four runs of 8 positions: 128 kb + 32 u + 8 g + 0..7).
// Thread i of a pass over every 32-value group of the experts' tiles: group g of 128-column block
// kb of row n of expert e (i = ((e N + n) KB + kb) 4 + g), with its tile.
struct Mxfp4Group {
  int g, kb, n, e;
  const uint8_t* tile;
  __device__ Mxfp4Group(const Mxfp4ExpertsView& W, size_t i, int KB)
      : g(int(i % 4)), kb(int(i / 4 % KB)), n(int(i / 4 / KB % W.N)), e(int(i / 4 / KB / W.N)),
        tile(W.tiles + ((size_t(e) * (W.N / kMxfp4TileRows) + n / kMxfp4TileRows) * KB + kb) * kMxfp4TileBytes) {}
  // The row's four E8M0 scales (one a group of the block).
  __device__ const uint8_t* scales() const { return tile + 1024 + 4 * (n % kMxfp4TileRows); }
  // The group's 16 code bytes as four words in the checkpoint's nibble order (nibble j of word w:
  // column 8w + j).
  __device__ uint4 words() const {
    const uint4 raw = *reinterpret_cast<const uint4*>(tile + (n % kMxfp4TileRows) * 64 + g * 16);
    return make_uint4(mxfp4_unpack_word(raw.x), mxfp4_unpack_word(raw.y), mxfp4_unpack_word(raw.z),
                      mxfp4_unpack_word(raw.w));
  }
};

// E2M1 magnitude m (0..7): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ inline float e2m1_magnitude(int m) {
  return m < 4 ? 0.5f * float(m) : float(1 << (m / 2 - 1)) * (1.0f + 0.5f * float(m % 2));
}

__global__ void mxfp4_to_bf16_kernel(Mxfp4ExpertsView W, const int32_t* seg, bf16* out) {
  pdl_wait();
  pdl_launch_dependents();
  const int Kp = mxfp4_act_cols(W.K), KB = Kp / kBlk;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(W.experts) * W.N * KB * 4) return;
  const Mxfp4Group grp(W, i, KB);
  const int g = grp.g, kb = grp.kb, n = grp.n, e = grp.e;
  if (__ldcg(seg + e + 1) <= __ldcg(seg + e)) return;
  const uint4 raw = grp.words();
  const int exp2 = int(grp.scales()[g]) - 127;  // E8M0: 2^(S - 127)
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&raw);
  bf16* row = out + (size_t(e) * W.N + n) * Kp + size_t(kb) * kBlk;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint4 chunk;
    bf16* c = reinterpret_cast<bf16*>(&chunk);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int r = mxfp4_act_column(32 * u + 8 * g + t) - 32 * g;  // the value's index in the group
      const int code = (bytes[r / 2] >> (4 * (r % 2))) & 0xF;
      const float v = e2m1_magnitude(code & 7);
      c[t] = __float2bfloat16(ldexpf(code & 8 ? -v : v, exp2));  // exact: a BF16 value
    }
    *reinterpret_cast<uint4*>(row + 32 * u + 8 * g) = chunk;
  }
}

// The E4M3 codes of the 8 E2M1 magnitudes at scale distance d = 0 .. kMxfp4Fp8ZeroSpan, and one
// more entry of zeros for every larger d: bytes m of row d, PRMT's two source words.
constexpr int kFp8Distances = kMxfp4Fp8ZeroSpan + 2;
__device__ inline void fill_fp8_magnitudes(uint8_t (*mag)[8]) {
  for (int i = threadIdx.x; i < kFp8Distances * 8; i += blockDim.x) {
    const int d = i / 8, m = i % 8;
    mag[d][m] = d > kMxfp4Fp8ZeroSpan ? uint8_t(0) : e4m3_code(ldexpf(e2m1_magnitude(m), kMxfp4Fp8Shift - d));
  }
}

// A block of kConvThreads threads converts kConvItems x kConvTiles tiles, in the order they lie:
// thread i takes group g = i % 4 of row r = i / 4 % 16 of tiles (blockIdx.x kConvItems + u)
// kConvTiles + i / 64 for u < kConvItems, tile (e N/16 + n/16) KB + kb, all their loads issued
// before any is used (more bytes in flight). A group's 32 codes become E4M3 at the block's largest
// scale, in the checkpoint's column order; the block's first row's g == 0 thread writes the block
// scale. The 32 codes of a group share one distance d, whose 8 magnitudes the block's table holds,
// and are looked up four at a time from the packed words' bits (mxfp4_packed_magnitudes, no
// unpacking).
constexpr int kConvThreads = 256, kConvTiles = kConvThreads / 64, kConvItems = 2;
__global__ void __launch_bounds__(kConvThreads) mxfp4_to_fp8_kernel(Mxfp4ExpertsView W, const int32_t* seg,
                                                                     Mxfp4AsFp8 out) {
  __shared__ __align__(8) uint8_t mag[kFp8Distances][8];
  fill_fp8_magnitudes(mag);
  pdl_wait();
  pdl_launch_dependents();
  __syncthreads();
  const int KB = mxfp4_act_cols(W.K) / kBlk, G = W.K / kMxfp4Group, N16 = W.N / kMxfp4TileRows;
  const int tiles = W.experts * N16 * KB;
  const int g = threadIdx.x % 4, r = threadIdx.x / 4 % kMxfp4TileRows;
  const int NB = (W.N + out.block_rows - 1) / out.block_rows;
  int e[kConvItems], n[kConvItems], kb[kConvItems], groups[kConvItems], smax[kConvItems];
  bool live[kConvItems];
  uint32_t s4[kConvItems];
  uint4 raw[kConvItems];
#pragma unroll
  for (int u = 0; u < kConvItems; ++u) {
    const int tile = (int(blockIdx.x) * kConvItems + u) * kConvTiles + int(threadIdx.x) / 64;
    const int row16 = tile / KB;
    kb[u] = tile - row16 * KB, e[u] = row16 / N16, n[u] = (row16 - e[u] * N16) * kMxfp4TileRows + r;
    groups[u] = min(4, G - 4 * kb[u]);  // the block's groups K has
    live[u] = tile < tiles && g < groups[u] && !(seg && __ldcg(seg + e[u] + 1) <= __ldcg(seg + e[u]));
    if (!live[u]) continue;
    const uint8_t* t = W.tiles + size_t(tile) * kMxfp4TileBytes;
    s4[u] = *reinterpret_cast<const uint32_t*>(t + 1024 + 4 * r);
    raw[u] = *reinterpret_cast<const uint4*>(t + r * 64 + g * 16);
    if (out.block_rows != 1) smax[u] = out.smax[(size_t(e[u]) * NB + n[u] / out.block_rows) * KB + kb[u]];
  }
#pragma unroll
  for (int u = 0; u < kConvItems; ++u) {
    if (!live[u]) continue;
    if (out.block_rows == 1) {
      smax[u] = 0;
      for (int c = 0; c < groups[u]; ++c) smax[u] = max(smax[u], int((s4[u] >> (8 * c)) & 0xFF));
    }
    if (g == 0 && n[u] % out.block_rows == 0)
      out.scales[size_t(e[u]) * out.scales_per_expert + mxfp4_fp8_scale_index(W.N, W.K, out.block_rows, n[u], kb[u])] =
          ldexpf(1.0f, smax[u] - 127 - kMxfp4Fp8Shift);
    // d >= 0: Smax is the largest of the block's scales (clamped all the same: a table index).
    const int d = min(max(smax[u] - int((s4[u] >> (8 * g)) & 0xFF), 0), kMxfp4Fp8ZeroSpan + 1);
    const uint2 m = *reinterpret_cast<const uint2*>(mag[d]);
    const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t codes[8];  // column 8w + 4h + q: byte q of codes[2w + h]
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      codes[2 * w] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<0>(words[w])) | mxfp4_packed_signs<0>(words[w]);
      codes[2 * w + 1] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<1>(words[w])) | mxfp4_packed_signs<1>(words[w]);
    }
    uint4* dst = reinterpret_cast<uint4*>(out.codes + (size_t(e[u]) * W.N + n[u]) * W.K + size_t(kb[u]) * kBlk + 32 * g);
    dst[0] = make_uint4(codes[0], codes[1], codes[2], codes[3]);
    dst[1] = make_uint4(codes[4], codes[5], codes[6], codes[7]);
  }
}

}  // namespace

void mxfp4_experts_to_fp8(const Mxfp4ExpertsView& W, const int32_t* seg, const Mxfp4AsFp8& out, cudaStream_t st) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || !out.codes || !out.scales ||
      (out.block_rows != 1 && out.block_rows != 128) || (out.block_rows == 128 && !out.smax) ||
      out.scales_per_expert < mxfp4_fp8_scales_size(W.N, W.K, out.block_rows))
    fail_plain("mxfp4_experts_to_fp8: N must be a multiple of 16, K of 32, blocks of 1 or "
               "128 rows (128: with their Smax table) and room for the scales (got N " + std::to_string(W.N) + ", K " +
               std::to_string(W.K) + ", block rows " + std::to_string(out.block_rows) + ")");
  const size_t tiles = size_t(W.experts) * (W.N / kMxfp4TileRows) * (mxfp4_act_cols(W.K) / kBlk);
  if (tiles > size_t(INT32_MAX)) fail_plain("mxfp4_experts_to_fp8: more than 2^31 tiles");
  const size_t per_block = size_t(kConvTiles) * kConvItems;
  launch_pdl("dequant", mxfp4_to_fp8_kernel, unsigned((tiles + per_block - 1) / per_block), kConvThreads, 0, st, W, seg,
             out);
}

void mxfp4_experts_to_bf16(const Mxfp4ExpertsView& W, const int32_t* seg, bf16* out, cudaStream_t st) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || !seg)
    fail_plain("mxfp4_experts_to_bf16: N must be a multiple of 16, K of 32, with the experts' segments (got N " +
               std::to_string(W.N) + ", K " + std::to_string(W.K) + ", " + std::to_string(W.experts) + " experts)");
  const size_t n = size_t(W.experts) * W.N * (mxfp4_act_cols(W.K) / kBlk) * 4;
  launch_pdl("dequant", mxfp4_to_bf16_kernel, unsigned((n + 255) / 256), 256, 0, st, W, seg, out);
}

void m_grouped_mxfp4_gemm_bf16_contiguous(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                                          cudaStream_t st, const SwigluOut* swiglu) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || W.experts > kMaxExperts)
    fail_plain("m_grouped_mxfp4_gemm_bf16_contiguous: N must be a multiple of 16, K of 32, experts in [1, 256] (got N " +
               std::to_string(W.N) + ", K " + std::to_string(W.K) + ", " + std::to_string(W.experts) + " experts)");
  if (swiglu && (!swiglu->a || W.N % 2))
    fail_plain("m_grouped_mxfp4_gemm_bf16_contiguous: the SwiGLU epilogue needs its output and an even N (got N " +
               std::to_string(W.N) + ")");
  if (rows.rows == 0) return;
  // The paths without the epilogue: the product into y, then the SwiGLU kernel.
  auto swiglu_after = [&] {
    if (swiglu)
      moe_swiglu_bf16(y, rows.seg + W.experts, rows.rows, W.N / 2, swiglu->alpha, swiglu->limit, swiglu->a, st);
  };
  const int row_tiles = W.N / 16, sms = sm_count();
  const int ks = mxfp4_k_splits(W.N, W.K, sms);
  constexpr size_t kMaxSmem = 200 * 1024;
  // Up to 48 rows an expert the decode paths; beyond, tiles of tiled_mt's height.
  if (rows.rows_per_expert > kMxfp4PromptRowsHint) {
    static std::once_flag once;
    std::call_once(once, [] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(mxfp4_tiled_mma_kernel<2, kTiledWM>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kTStages * tiled_stage_bytes(2)));
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(mxfp4_tiled_wgmma_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(tiled_smem(4))));
    });
    const int mt = tiled_mt(rows.rows_per_expert), tm = tiled_rows(mt);
    const dim3 grid(unsigned((rows.rows + tm - 1) / tm + W.experts), unsigned((W.N + kTN - 1) / kTN));
    if (mt == 2)
      launch_pdl("gemm", mxfp4_tiled_mma_kernel<2, kTiledWM>, grid, kWarps * 32, size_t(kTStages) * tiled_stage_bytes(2),
                 st, W, x, rows, y, ks);
    else
      launch_pdl("gemm", mxfp4_tiled_wgmma_kernel<4>, grid, kTThreads, tiled_smem(4), st, W, x, rows, y, ks);
    swiglu_after();
    return;
  }
  // More than 16 rows an expert typically (twice the mean): the wide path, one pass over the
  // weights for up to 32 rows (20b batch 128: 1.83x the row path's speed). 13-16: the row path at
  // 16 rows a pass in four chunks (mxfp4_decode16_kernel; 20b batch 64: 1.06x the 8-row passes).
  // Fewer: the row path, 8 rows a pass (an expert above 8 rows takes a second pass, mostly from L2).
  const bool wide = rows.rows_per_expert > 16 && wide_fits(kWideNT, ks) &&
                    mxfp4_wide_smem(kWideNT, ks, kWideStages) <= kMaxSmem;
  const bool rows16 = !wide && rows.rows_per_expert > 12;
  const int segments = rows.active ? rows.active_max : W.experts;
  auto grid_of = [&](int warps) {
    const int tiles_per_block = warps / ks;
    return dim3(unsigned((row_tiles + tiles_per_block - 1) / tiles_per_block), unsigned(segments));
  };
  const int chunks = size_t(grid_of(kWarps).x) * segments > size_t(2 * sms) ? 2 : 1;
  // The row path's blocks in a one-wave grid: 8 warps, or 4 where that puts fewer warps on the
  // busiest SM (a batch-1 step: 180 blocks of 8 give 48 SMs 16 warps and the others 8; 360 blocks
  // of 4 give none more than 12; the MoE GEMMs 1.13x, call 1 of session 33). Not in larger grids:
  // at batch 4 (15 experts) 4-warp blocks measured 0.92x. The sums are the same bits either way
  // (mxfp4_warp_work).
  auto busiest = [&](int warps) {
    const dim3 g = grid_of(warps);
    return (size_t(g.x) * g.y + sms - 1) / sms * warps;
  };
  const int warps =
      !wide && !rows16 && chunks == 1 && ks <= kWarps / 2 && busiest(kWarps / 2) < busiest(kWarps) ? kWarps / 2 : kWarps;
  const dim3 grid = grid_of(warps);
  const size_t smem = wide     ? mxfp4_wide_smem(kWideNT, ks, kWideStages)
                      : rows16 ? mxfp4_decode_smem(kRows16NT, W.K, ks, kRows16Chunks, decode_stages(kRows16NT), 0, kWarps)
                               : mxfp4_decode_smem(1, W.K, ks, chunks, decode_stages(1), 0, warps);
  if (smem > kMaxSmem) fail_plain("m_grouped_mxfp4_gemm_bf16_contiguous: K = " + std::to_string(W.K) + " is too long to stage");
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto k : {mxfp4_decode_kernel<1, true>, mxfp4_decode_kernel<2, true>, mxfp4_decode_kernel<1, false>,
                   mxfp4_decode_kernel<2, false>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    for (auto k : {mxfp4_decode16_kernel<true>, mxfp4_decode16_kernel<false>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    OSPREY_CUDA_CHECK(cudaFuncSetAttribute(mxfp4_wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
  });
  if (wide) {
    launch_pdl("gemm", mxfp4_wide_kernel, grid, kWarps * 32, smem, st, W, x, rows, y, ks);
    swiglu_after();
  } else if (rows16) {
    launch_pdl("gemm", W.big_scales ? mxfp4_decode16_kernel<true> : mxfp4_decode16_kernel<false>, grid, kWarps * 32, smem,
               st, W, x, rows, y, ks);
    swiglu_after();
  } else {
    const bool epilogue = swiglu && chunks == 1;
    auto* kernel = W.big_scales ? (chunks == 1 ? mxfp4_decode_kernel<1, true> : mxfp4_decode_kernel<2, true>)
                                : (chunks == 1 ? mxfp4_decode_kernel<1, false> : mxfp4_decode_kernel<2, false>);
    launch_pdl("gemm", kernel, grid, warps * 32, smem, st, W, x, rows, y, ks, epilogue ? *swiglu : SwigluOut{});
    if (!epilogue) swiglu_after();
  }
}

void m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows,
                                                float* y, cudaStream_t st, const SwigluOut* swiglu) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || W.experts > kMaxExperts || (swiglu && W.N % 2))
    fail_plain("m_grouped_mxfp4_gemm_bf16_wgmma_contiguous: N must be a multiple of 16, K of 32, experts in [1, 256] "
               "(got N " + std::to_string(W.N) + ", K " + std::to_string(W.K) + ", " + std::to_string(W.experts) +
               " experts)");
  if (!x || !y || !rows.seg || reinterpret_cast<uintptr_t>(x) % 16)
    fail_plain("m_grouped_mxfp4_gemm_bf16_wgmma_contiguous: needs 16-byte aligned rows, an output and the segments");
  if (swiglu && !swiglu->a) fail_plain("m_grouped_mxfp4_gemm_bf16_wgmma_contiguous: the SwiGLU epilogue needs its output");
  if (rows.rows == 0) return;
  const int Kp = mxfp4_act_cols(W.K);
  const uint64_t dims[2] = {uint64_t(Kp), uint64_t(rows.rows)}, strides[1] = {uint64_t(Kp) * 2};
  const uint32_t box[2] = {uint32_t(kBlk / 2), uint32_t(kYTokens)};
  const CUtensorMap tx = tma_map_swizzled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, x, dims, strides, box,
                                          "m_grouped_mxfp4_gemm_bf16_wgmma_contiguous");
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto k : {mxfp4_wgmma_yt_kernel<false, false>, mxfp4_wgmma_yt_kernel<false, true>,
                   mxfp4_wgmma_yt_kernel<true, false>, mxfp4_wgmma_yt_kernel<true, true>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kYSmem)));
  });
  const int ks = mxfp4_k_splits(W.N, W.K, sm_count());  // the decode path's splits: the same bits
  const dim3 grid(unsigned((W.N + kYRows - 1) / kYRows), unsigned(rows.rows / kYTokens + W.experts));
  auto* kernel = swiglu ? (W.big_scales ? mxfp4_wgmma_yt_kernel<true, true> : mxfp4_wgmma_yt_kernel<true, false>)
                        : (W.big_scales ? mxfp4_wgmma_yt_kernel<false, true> : mxfp4_wgmma_yt_kernel<false, false>);
  launch_pdl("gemm", kernel, grid, kYThreads, kYSmem, st, tx, W, rows, y, ks, swiglu ? *swiglu : SwigluOut{});
}

void mxfp4_rows_to_wgmma_layout(const bf16* x, const int32_t* src, const int32_t* rows_end, int rows, int K, bf16* out,
                                cudaStream_t st) {
  if (rows == 0) return;
  if (!x || !out || (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16)
    fail_plain("mxfp4_rows_to_wgmma_layout: needs 16-byte aligned rows in and out");
  const int Kp = mxfp4_act_cols(K);
  const size_t n = size_t(rows) * (Kp / 32);
  launch_pdl("quant", act_rows_to_wgmma_kernel, unsigned((n + 255) / 256), 256, 0, st, x, src, rows_end, rows, Kp, out);
}

void to_bf16_mxfp4_layout(const float* x, int T, int K, bf16* out, cudaStream_t st, const int32_t* in_rows) {
  if (T == 0) return;
  const size_t n = size_t(T) * mxfp4_act_cols(K) / 2;
  launch_pdl("quant", to_bf16_layout_kernel, unsigned((n + 255) / 256), 256, 0, st, x, T, K, out, in_rows);
}

void moe_swiglu_bf16(const float* t, const int32_t* rows_end, int rows_max, int I, float alpha, float limit, bf16* a,
                     cudaStream_t st, const bf16* bias, const int32_t* seg, int experts) {
  if (bias && (!seg || experts < 1 || experts > kMaxExperts))
    fail_plain("moe_swiglu_bf16: an expert bias needs the segments of 1 to 256 experts");
  if (rows_max == 0) return;
  const size_t n = size_t(rows_max) * mxfp4_act_cols(I) / 2;
  launch_pdl("swiglu", swiglu_bf16_kernel, unsigned((n + 255) / 256), 256, 0, st, t, rows_end, rows_max, I, alpha,
             limit, a, bias, seg, experts);
}

}  // namespace osprey::cuda
