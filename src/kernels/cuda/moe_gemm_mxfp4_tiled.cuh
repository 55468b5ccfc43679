// The MXFP4 expert GEMMs of prompt chunks: the tiled kernels, one a tile height (tiled_mt picks
// it; moe_gemm_mxfp4.cu launches them). Internal to kernels/cuda: moe_gemm_mxfp4.cu is the one
// file that includes it (its kernels and constants have internal linkage).
#pragma once
#include "formats/mxfp4.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_decode.cuh"
#include "kernels/cuda/sm90.cuh"

namespace osprey::cuda {
namespace {

// Prefill, two kernels by tile height (tiled_mt): 64-row tiles on mma.sync (mxfp4_tiled_mma_kernel),
// 128-row tiles on wgmma (mxfp4_tiled_wgmma_kernel, below). Both give the same bits as the decode
// paths (the tests compare them bit for bit).
//
// mma.sync: kTM = 32 kMT rows (tokens, M side) x 128 weight rows (N side) per block, 128 columns per
// stage, three stages; 8 warps as kWM x (8 / kWM), each kTM / kWM rows x 128 kWM / 8 weight rows.
// A warp decodes its own weight rows, so with kWM = 1 each weight of the tile is decoded once
// (kWM = 2: twice, once a warp row). blockIdx.x walks the row tiles of all
// experts in expert order (each expert's run cut into tiles of kTM rows), blockIdx.y the
// weight-row tiles. The K blocks are summed in ks splits as the decode path splits them (split 0
// from the bias, each later split's sum added to the output in order), so a row's result is the
// same on both paths and with either tile height.
constexpr int kTN = 128, kTStages = 3;
constexpr int kAStride = kBlk * 2 + 64;  // bytes of a staged activation row (16-byte loads conflict-free)
constexpr int kBStage = kTN / 16 * kMxfp4TileBytes;  // B: 8 weight tiles
__host__ __device__ constexpr int tiled_rows(int mt) { return 32 * mt; }
__host__ __device__ constexpr int tiled_stage_bytes(int mt) { return tiled_rows(mt) * kAStride + kBStage; }
// The wgmma kernel's: a decoded K block (128 x 128 BF16, 32 KB), two of them, and the stages.
constexpr int kTThreads = kWarps * 32;
constexpr uint32_t kBDecBytes = kTN * kBlk * 2;
__host__ __device__ constexpr size_t tiled_smem(int mt) {
  return 1024 /* alignment of the swizzled buffers */ + 2 * size_t(kBDecBytes) + size_t(kTStages) * tiled_stage_bytes(mt);
}

// The tile height for runs of about rows_per_expert / 2 rows an expert (the hint is twice the
// mean): 64 rows (kMT 2, two blocks an SM) up to 64 rows an expert on average, else 128 (kMT 4,
// one block an SM). A tile's cost is mostly its weight decode, whatever its height, so the best
// tile is the one that leaves the fewest tiles with few padding rows. Measured on an H100 (session
// 39, `bench --moe-batches`, both GEMMs of a layer, ms, 128 rows against 64 against 32):
// 120b shape at 1,024 tokens (32 rows an expert) 4.10 / 2.55 / 2.64, 1,536 (48) 4.22 / 2.64 /
// 3.57, 2,048 (64) 4.34 / 3.84 / 4.46, 3,072 (96) 4.51 / 5.17 / 6.20; the 20b shape at 384
// tokens (48) 1.08 / 0.71 / 0.92, 768 (96) 1.12 / 1.32 / 1.56. 32-row tiles never won. That was
// mma.sync 2 x 4 at both heights. Measured again with 64-row tiles on mma.sync 1 x 8 and 128-row
// tiles on wgmma (H100, session 41, the same bench, us, crossover at 64 against 32 rows an expert):
// 120b shape at 1,536 tokens 2,208 / 3,159, 2,048 3,212 / 3,174; the 20b at 384 594 / 782, 512
// 842 / 789. The crossover stays at 64: 32 loses 1.43x and 1.32x and wins at most 1.07x.
int tiled_mt(int rows_per_expert) { return rows_per_expert / 2 <= 64 ? 2 : 4; }
// The warp rows (kWM) of the 64-row tiles: one, so that each weight is decoded once a tile (128
// registers, 24 bytes of spill). Measured on an H100 (session 40, `bench --moe-batches`, both
// GEMMs of a layer, us, kWM 2 against 1): 120b shape at 1,024 tokens 2,540 / 2,115, 1,536 2,625
// / 2,209, 2,048 3,766 / 3,213; 20b at 256 659 / 543, 512 1,005 / 847.
constexpr int kTiledWM = 1;

// The row tile of this block (t_global, blockIdx.x by default, walks every expert's run cut into
// tiles of kTM rows, in expert order): expert e, rows m0 .. m_end - 1 of the sorted rows (m_end:
// the expert's end; a tile can stop short of it). find: a block-wide prefix sum of the experts'
// tile counts; false (the same for the whole block) past the last tile.
template <int kTM>
struct TiledBlock {
  int e = 0, m0 = 0, m_end = 0;
  __device__ bool find(const ExpertRows& rows, int E, int t_global = int(blockIdx.x)) {
    __shared__ int tile_start[257];
    __shared__ int found[2];
    const int tid = threadIdx.x;
    for (int i = tid; i <= E; i += blockDim.x) {
      int n = 0;
      if (i < E) n = (__ldcg(rows.seg + i + 1) - __ldcg(rows.seg + i) + kTM - 1) / kTM;
      tile_start[i] = n;
    }
    __syncthreads();
    if (tid == 0) {  // E <= 256 adds
      int run = 0;
      for (int i = 0; i <= E; ++i) {
        const int n = tile_start[i];
        tile_start[i] = run;
        run += n;
      }
    }
    __syncthreads();
    if (t_global >= tile_start[E]) return false;
    for (int i = tid; i < E; i += blockDim.x)
      if (tile_start[i] <= t_global && t_global < tile_start[i + 1]) found[0] = i;
    __syncthreads();
    e = found[0];
    m0 = __ldcg(rows.seg + e) + (t_global - tile_start[e]) * kTM, m_end = __ldcg(rows.seg + e + 1);
    return true;
  }
};

// A thread's copy work for a stage of a tile of kTM rows, in both tiled kernels (kWarps * 32
// threads): kTM / 16 activation pieces (rows tid / 16 + 16 i, piece tid % 16; a_src: their first
// K block, null past the expert's rows) and pieces tid, tid + 256, .. of the 8 weight tiles from
// weight row nb of expert We (68 pieces each), cp.async into stage kb % kTStages of smem, then a
// commit (also past the last K block, so that the waits count groups alike).
template <int kTM>
__device__ inline void tiled_stage_sources(const bf16* x, const ExpertRows& rows, const TiledBlock<kTM>& blk, int KB,
                                           const bf16* (&a_src)[kTM / 16]) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kTM / 16; ++i) {
    const int r = blk.m0 + tid / 16 + 16 * i;
    const int s = r < blk.m_end ? (rows.x_rows ? __ldcg(rows.x_rows + r) : r) : -1;
    a_src[i] = s >= 0 ? x + size_t(s) * (KB * kBlk) + (tid % 16) * 8 : nullptr;
  }
}
template <int kTM>
__device__ inline void tiled_stage_issue(uint8_t* smem, int kb, const bf16* const (&a_src)[kTM / 16], const bf16* x,
                                         const uint8_t* We, int nb, int N, int KB) {
  constexpr int kAStage = kTM * kAStride, kStageBytes = kAStage + kBStage;
  const int tid = threadIdx.x;
  if (kb < KB) {
    uint8_t* st = smem + (kb % kTStages) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kTM / 16; ++i)
      cp_async16(st + (tid / 16 + 16 * i) * kAStride + (tid % 16) * 16, a_src[i] ? a_src[i] + kb * kBlk : x,
                 a_src[i] != nullptr);
    uint8_t* bs = st + kAStage;
    constexpr int kPieces = kMxfp4TileBytes / 16;
    for (int i = tid; i < kTN / 16 * kPieces; i += kWarps * 32) {
      const int t = nb / 16 + i / kPieces;  // the weight tile
      const bool ok = t < N / 16;
      cp_async16(bs + i * 16, ok ? We + (size_t(t) * KB + kb) * kMxfp4TileBytes + (i % kPieces) * 16 : We, ok);
    }
  }
  cp_async_commit();
}

template <int kMT, int kWM>
__global__ void __launch_bounds__(kWarps * 32, kMT == 4 ? 1 : 2)
    mxfp4_tiled_mma_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  constexpr int kTM = tiled_rows(kMT), kAStage = kTM * kAStride, kTStageBytes = tiled_stage_bytes(kMT);
  constexpr int kWN = kWarps / kWM, kWarpRows = kTM / kWM, kWarpCols = kTN / kWN;
  constexpr int kMTW = kWarpRows / 16, kNTW = kWarpCols / 8;  // a warp's m16 and n8 MMA tiles
  static_assert(kWarps % kWM == 0 && kTM % kWM == 0, "the warps split the tile evenly");
  static_assert(kWarpRows % 16 == 0 && kWarpCols % 16 == 0, "a warp takes whole 16-row weight tiles");
  extern __shared__ __align__(16) uint8_t smem[];
  const int N = W.N, KB = mxfp4_act_cols(W.K) / kBlk, E = W.experts;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  pdl_wait();
  pdl_launch_dependents();
  TiledBlock<kTM> blk;
  if (!blk.find(rows, E)) return;  // uniform: past the last tile
  const int e = blk.e, nb = int(blockIdx.y) * kTN;
  const uint8_t* We = W.tiles + mxfp4_tiles_bytes(N, W.K) * e;
  const bf16* a_src[kTM / 16];
  tiled_stage_sources(x, rows, blk, KB, a_src);
  auto issue = [&](int kb) { tiled_stage_issue<kTM>(smem, kb, a_src, x, We, nb, N, KB); };

  const int wm = warp / kWN, wn = warp % kWN;  // warp tile: rows wm*kWarpRows .., weight rows wn*kWarpCols ..
  float acc[kMTW][kNTW][4];
#pragma unroll
  for (int nt = 0; nt < kNTW; ++nt) {
    const int n = nb + wn * kWarpCols + nt * 8 + 2 * c;
    const float b0 = W.bias && n < N ? __bfloat162float(W.bias[size_t(e) * N + n]) : 0.0f;
    const float b1 = W.bias && n + 1 < N ? __bfloat162float(W.bias[size_t(e) * N + n + 1]) : 0.0f;
#pragma unroll
    for (int mt = 0; mt < kMTW; ++mt) acc[mt][nt][0] = b0, acc[mt][nt][1] = b1, acc[mt][nt][2] = b0, acc[mt][nt][3] = b1;
  }
  const int per_split = (KB + ks - 1) / ks;
  for (int i = 0; i < kTStages - 1; ++i) issue(i);
  for (int kb = 0; kb < KB; ++kb) {
    cp_async_wait<kTStages - 2>();
    __syncthreads();  // stage kb has landed for every thread; stage kb - 1 is free
    issue(kb + kTStages - 1);
    const uint8_t* st = smem + (kb % kTStages) * kTStageBytes;
    const uint8_t* bs = st + kAStage;
    uint4 wv[kNTW];
    E8m0Factors f[kNTW];
    bool big = false;
#pragma unroll
    for (int nt = 0; nt < kNTW; ++nt) {
      const int nl = wn * kWarpCols + nt * 8 + g;
      const uint8_t* tile = bs + (nl / 16) * kMxfp4TileBytes;
      wv[nt] = *reinterpret_cast<const uint4*>(tile + (nl % 16) * 64 + c * 16);
      f[nt] = e8m0_factors(tile[1024 + (nl % 16) * 4 + c]);
      big |= f[nt].big;
    }
    const bool any_big = __any_sync(0xffffffffu, big);
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // steps 2u, 2u + 1: word u of each weight group
      uint4 a_lo[kMTW], a_hi[kMTW];
#pragma unroll
      for (int mt = 0; mt < kMTW; ++mt) {
        const uint8_t* ar = st + (wm * kWarpRows + mt * 16 + g) * kAStride + u * 64 + c * 16;
        a_lo[mt] = *reinterpret_cast<const uint4*>(ar);
        a_hi[mt] = *reinterpret_cast<const uint4*>(ar + 8 * kAStride);
      }
#pragma unroll
      for (int nt = 0; nt < kNTW; ++nt) {
        const uint32_t word = u == 0 ? wv[nt].x : u == 1 ? wv[nt].y : u == 2 ? wv[nt].z : wv[nt].w;
        uint32_t b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          b[j] = mul_bf16x2(e2m1_pair_bits(word, j), f[nt].a);
          if (any_big && f[nt].big) b[j] = mul_bf16x2(b[j], f[nt].b);
        }
#pragma unroll
        for (int mt = 0; mt < kMTW; ++mt) {
          mma_bf16_16816(acc[mt][nt], a_lo[mt].x, a_hi[mt].x, a_lo[mt].y, a_hi[mt].y, b[0], b[1]);
          mma_bf16_16816(acc[mt][nt], a_lo[mt].z, a_hi[mt].z, a_lo[mt].w, a_hi[mt].w, b[2], b[3]);
        }
      }
    }
    if ((kb + 1) % per_split == 0 || kb + 1 == KB) {  // a split ends: into the output, in split order
      const bool first = kb < per_split;
#pragma unroll
      for (int mt = 0; mt < kMTW; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTW; ++nt) {
          const int n = nb + wn * kWarpCols + nt * 8 + 2 * c;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = blk.m0 + wm * kWarpRows + mt * 16 + g + 8 * half;
            float* out = y + size_t(r) * N + n;
            float v0 = acc[mt][nt][2 * half], v1 = acc[mt][nt][2 * half + 1];
            acc[mt][nt][2 * half] = acc[mt][nt][2 * half + 1] = 0.0f;
            if (r >= blk.m_end) continue;
            if (n + 1 < N) {
              if (!first) {
                const float2 o = *reinterpret_cast<const float2*>(out);
                v0 = o.x + v0, v1 = o.y + v1;
              }
              *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
            } else if (n < N) {
              out[0] = first ? v0 : out[0] + v0;
            }
          }
        }
    }
  }
  cp_async_wait<0>();
}

// Prefill on wgmma: kTM = 32 kMT rows (tokens, M side) x 128 weight rows (N side) per block, two
// warpgroups; the model runs it for 128-row tiles. blockIdx.x walks the row tiles of all experts in
// expert order (each expert's run cut into tiles of kTM rows), blockIdx.y the weight-row tiles.
// Each K block of 128 columns:
// - cp.async stages the tile's activation rows and its 8 packed weight tiles, three stages deep;
// - the block decodes the weights once, exactly, to BF16 in the 128-byte swizzle that wgmma's
//   K-major B reads (two 64-column halves of 128 rows), two buffers: the decode of block kb + 1
//   runs while the wgmmas of block kb do;
// - each warpgroup's threads load their A fragments (the m16n8k16 layout; the activations are
//   stored in the MXFP4 activation layout, whose K order matches the decode's), and the warpgroup
//   issues 8 wgmma k16 steps with A in registers: kTM 64, both warpgroups the 64 rows, warpgroup
//   h the weight rows 64 h.. (m64n64k16); kTM 128, warpgroup h the rows 64 h.., all 128 weight
//   rows (m64n128k16).
// The K blocks are summed in ks splits as the decode path splits them (split 0 from the bias,
// each later split's sum added to the output in order). Measured on an H100 (session 40, `bench
// --moe-batches`, both GEMMs of a layer, us, mma.sync 2 x 4 warps against wgmma): 128-row tiles,
// 120b shape at 3,072 tokens 4,431 / 3,244, 4,096 6,454 / 4,700; 20b at 768 1,125 / 806, 1,000
// 1,519 / 1,060. With 64-row tiles it was even with mma.sync 2 x 4 (120b at 1,024 2,540 / 2,549),
// slower than 1 x 8 (2,115).
//
// The 4-byte BF16 pair of weight row n at K position k (even) of a decoded K block, in the 128-byte
// swizzle: half k / 64, row n's 128 bytes, 16-byte unit ((k % 64) / 8) ^ (n % 8).
__device__ inline uint32_t bdec_offset(int n, int k) {
  const int byte = (k & 63) * 2;
  return uint32_t((k >> 6) * (kTN * 128) + n * 128 + ((((byte >> 4) ^ (n & 7))) << 4) + (byte & 15));
}

template <int kMT>
__global__ void __launch_bounds__(kTThreads, 1)
    mxfp4_tiled_wgmma_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  constexpr int kTM = tiled_rows(kMT), kAStage = kTM * kAStride, kTStageBytes = tiled_stage_bytes(kMT);
  constexpr int kWgN = kTM == 64 ? 64 : 128;    // a warpgroup's weight rows
  constexpr int R = kWgN / 2;                   // its accumulators a thread
  static_assert(kTM == 64 || kTM == 128, "64- or 128-row tiles");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* const bdec = smem_raw + ((1024 - (sm90::smem_u32(smem_raw) & 1023)) & 1023);  // [2][32 KB]
  uint8_t* const smem = bdec + 2 * kBDecBytes;                                            // the stages
  const int N = W.N, KB = mxfp4_act_cols(W.K) / kBlk, E = W.experts;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int wg = warp >> 2, wr = warp & 3;
  const int row0 = (kTM == 64 ? 0 : 64 * wg) + 16 * wr;  // this warp's 16 rows of the tile
  const int nwg = kTM == 64 ? 64 * wg : 0;                // the warpgroup's first weight row
  pdl_wait();
  pdl_launch_dependents();
  TiledBlock<kTM> blk;
  if (!blk.find(rows, E)) return;  // uniform: past the last tile
  const int e = blk.e, nb = int(blockIdx.y) * kTN;
  const uint8_t* We = W.tiles + mxfp4_tiles_bytes(N, W.K) * e;
  const bf16* a_src[kTM / 16];
  tiled_stage_sources(x, rows, blk, KB, a_src);
  auto issue = [&](int kb) { tiled_stage_issue<kTM>(smem, kb, a_src, x, We, nb, N, KB); };
  // The decode of K block kb (staged) into buffer kb % 2: units (weight row n = tid / 4 + 64 i, group
  // cg = tid % 4), the group's 16 bytes as the mma path takes them: word u, pair j goes to k16
  // step 2u + j / 2, slots 2 cg (+ 8 for odd j). A warp's stores hit 32 distinct banks (8 rows, each
  // in its own swizzled unit, 4 groups a unit).
  auto decode = [&](int kb) {
    const uint8_t* bs = smem + (kb % kTStages) * kTStageBytes + kAStage;
    uint8_t* out = bdec + (kb & 1) * kBDecBytes;
    const int cg = tid & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int n = tid / 4 + 64 * i;
      const uint8_t* tile = bs + (n / 16) * kMxfp4TileBytes;
      const uint4 wv = *reinterpret_cast<const uint4*>(tile + (n % 16) * 64 + cg * 16);
      const E8m0Factors f = e8m0_factors(tile[1024 + (n % 16) * 4 + cg]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint32_t word = u == 0 ? wv.x : u == 1 ? wv.y : u == 2 ? wv.z : wv.w;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t b = mul_bf16x2(e2m1_pair_bits(word, j), f.a);
          if (f.big) b = mul_bf16x2(b, f.b);
          const int k = 16 * (2 * u + (j >> 1)) + 2 * cg + 8 * (j & 1);
          *reinterpret_cast<uint32_t*>(out + bdec_offset(n, k)) = b;
        }
      }
    }
  };

  float acc[R];
#pragma unroll
  for (int j = 0; j < kWgN / 8; ++j) {
    const int n = nb + nwg + 8 * j + 2 * c;
    const float b0 = W.bias && n < N ? __bfloat162float(W.bias[size_t(e) * N + n]) : 0.0f;
    const float b1 = W.bias && n + 1 < N ? __bfloat162float(W.bias[size_t(e) * N + n + 1]) : 0.0f;
    acc[4 * j] = b0, acc[4 * j + 1] = b1, acc[4 * j + 2] = b0, acc[4 * j + 3] = b1;
  }
  const int per_split = (KB + ks - 1) / ks;
  for (int i = 0; i < kTStages - 1; ++i) issue(i);
  cp_async_wait<kTStages - 2>();
  __syncthreads();  // stage 0 has landed for every thread
  decode(0);
  sm90::fence_proxy_async_shared();  // the decoded weights (generic stores) before wgmma reads them
  __syncthreads();
  for (int kb = 0; kb < KB; ++kb) {
    const uint8_t* st = smem + (kb % kTStages) * kTStageBytes;
    uint32_t a[8][4];  // the 8 k16 steps' A fragments: a0 (row g, k 2c..), a1 (g + 8), a2 (g, k 2c + 8..), a3 (g + 8, ..)
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // steps 2u, 2u + 1: word u of each activation group
      const uint8_t* ar = st + (row0 + g) * kAStride + u * 64 + c * 16;
      const uint4 lo = *reinterpret_cast<const uint4*>(ar), hi = *reinterpret_cast<const uint4*>(ar + 8 * kAStride);
      a[2 * u][0] = lo.x, a[2 * u][1] = hi.x, a[2 * u][2] = lo.y, a[2 * u][3] = hi.y;
      a[2 * u + 1][0] = lo.z, a[2 * u + 1][1] = hi.z, a[2 * u + 1][2] = lo.w, a[2 * u + 1][3] = hi.w;
    }
    const uint32_t bbase = sm90::smem_u32(bdec + (kb & 1) * kBDecBytes) + uint32_t(nwg * 128);
    sm90::fence_regs(acc);
    sm90::wgmma_fence();
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint64_t bd = sm90::desc_k128_swizzle(bbase + uint32_t((s >> 2) * (kTN * 128) + (s & 3) * 32));
      if constexpr (kWgN == 64) sm90::wgmma_m64n64k16_bf16_rs_kmajor(acc, a[s], bd);
      else sm90::wgmma_m64n128k16_bf16_rs_kmajor(acc, a[s], bd);
    }
    sm90::wgmma_commit();
    // Stage kb + 2 reuses the stage of kb - 1: its activations were read (into registers) and its
    // weights decoded before the barrier that ended iteration kb - 1.
    issue(kb + kTStages - 1);
    if (kb + 1 < KB) {
      cp_async_wait<kTStages - 2>();  // stage kb + 1 has landed for this thread (kb + 2 may be in flight)
      __syncthreads();                // .. and for every thread
      decode(kb + 1);                 // into the buffer the wgmmas of kb - 1 read (done: waited below)
      sm90::fence_proxy_async_shared();
    }
    sm90::wgmma_wait<0>();
    sm90::fence_regs(acc);
    if ((kb + 1) % per_split == 0 || kb + 1 == KB) {  // a split ends: into the output, in split order
      const bool first = kb < per_split;
#pragma unroll
      for (int j = 0; j < kWgN / 8; ++j) {
        const int n = nb + nwg + 8 * j + 2 * c;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = blk.m0 + row0 + g + 8 * half;
          float* out = y + size_t(r) * N + n;
          float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
          acc[4 * j + 2 * half] = acc[4 * j + 2 * half + 1] = 0.0f;
          if (r >= blk.m_end) continue;
          if (n + 1 < N) {
            if (!first) {
              const float2 o = *reinterpret_cast<const float2*>(out);
              v0 = o.x + v0, v1 = o.y + v1;
            }
            *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
          } else if (n < N) {
            out[0] = first ? v0 : out[0] + v0;
          }
        }
      }
    }
    __syncthreads();  // the next decode's buffer is free (every warpgroup's wgmmas of kb are done)
  }
  cp_async_wait<0>();
}

}  // namespace
}  // namespace osprey::cuda
