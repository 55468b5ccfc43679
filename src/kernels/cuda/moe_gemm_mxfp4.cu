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

namespace osprey::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kBlk = kMxfp4ActBlock;  // columns per weight stage (4 groups of 32)
constexpr int kMaxExperts = 256;

__device__ inline uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Nibbles j and j + 4 of a word of packed E2M1 codes as a BF16 pair worth (value * 2^-126): the
// nibble's sign lands on bit 15 and its exponent and mantissa bits on 8..6, so exponent field e
// and mantissa m read 2^(e - 127) (1 + m/2), and the subnormal code 1 reads 2^-127.
__device__ inline uint32_t e2m1_pair_bits(uint32_t word, int j) {
  const uint32_t x = word << (12 - 4 * j);
  return (x & 0x80008000u) | ((x & 0x70007000u) >> 6);
}

// 2^(S - 1) as BF16 factors (a pair each): a = 2^(min(S, 128) - 1); b = 2^(S - 128) for S > 128
// (a single BF16 holds at most 2^127). The decoded weight is bits * a (* b): exact.
struct E8m0Factors {
  uint32_t a, b;
  bool big;
};
__device__ inline E8m0Factors e8m0_factors(uint32_t S) {
  const uint32_t ea = min(S, 128u) + 126u, eb = S > 128u ? S - 1u : 127u;
  return {(ea << 7) | (ea << 23), (eb << 7) | (eb << 23), S > 128u};
}

// The 16 BF16 pairs (w = 4m + j: word m, nibble pair j) of one 16-byte group, scaled.
__device__ inline void decode_group(const uint4& v, const E8m0Factors& f, bool any_big, uint32_t (&out)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j) out[4 * m + j] = mul_bf16x2(e2m1_pair_bits(words[m], j), f.a);
  if (any_big && f.big)
#pragma unroll
    for (int w = 0; w < 16; ++w) out[w] = mul_bf16x2(out[w], f.b);
}

// ---------------------------------------------------------------------------------------------
// Decode: 16 weight rows per warp on the M side, up to 8 NT rows (tokens) per pass on the N side,
// K split over ks warps of a block (partial sums added in a fixed order through shared memory).
// Each warp streams its rows' codes and scales through a ring of four stages with cp.async (a
// power of two: the slot is a mask, not a division); the pass's activation rows are staged once
// per block. blockIdx.y: the active expert.
__host__ __device__ constexpr int decode_stages(int) { return 4; }
constexpr int kStageBytes = kMxfp4TileBytes;  // one weight tile: rows g and g + 8 at 16 lane and 512 + 16 lane, scales at 1024

__host__ __device__ inline int x_stride_bytes(int K) { return mxfp4_act_cols(K) * 2 + 64; }
__host__ __device__ inline size_t skinny_smem(int NT, int K) {
  return size_t(8 * NT) * x_stride_bytes(K) + size_t(kWarps) * decode_stages(NT) * kStageBytes;
}

template <int NT>
__global__ void __launch_bounds__(kWarps * 32, NT == 1 ? 2 : 1)
    mxfp4_decode_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  constexpr int R = 8 * NT, kStages = decode_stages(NT);
  __shared__ float red[kWarps][NT][4][32];
  extern __shared__ __align__(16) uint8_t smem[];
  const int N = W.N, K = W.K, KB = mxfp4_act_cols(K) / kBlk, xs = x_stride_bytes(K);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tile = warp / ks, split = warp % ks, tiles_per_block = kWarps / ks;
  pdl_wait();  // the expert list, the offsets and the activations come from the kernels before
  pdl_launch_dependents();
  const int e = rows.active ? __ldcg(rows.active + blockIdx.y) : int(blockIdx.y);
  if (e < 0) return;  // uniform over the block
  const int s0 = __ldcg(rows.seg + e), s_end = __ldcg(rows.seg + e + 1);
  const int s1 = rows.row_live ? s0 + live_rows(rows.row_live, s0, s_end) : s_end;
  if (s1 <= s0) return;
  const int n0 = (blockIdx.x * tiles_per_block + tile) * 16;
  const int per_split = (KB + ks - 1) / ks, kb0 = min(KB, split * per_split), kb1 = min(KB, kb0 + per_split);
  const bool ok_lo = n0 + g < N, ok_hi = n0 + g + 8 < N, live = n0 < N;
  // This warp's tiles, one per K block: one contiguous kilobyte each, copied as they lie.
  const uint8_t* Wt = W.tiles + mxfp4_tiles_bytes(N, K) * e + size_t(live ? n0 / 16 : 0) * KB * kMxfp4TileBytes;
  uint8_t* stage = smem;
  uint8_t* ring = smem + size_t(R) * xs + size_t(warp) * kStages * kStageBytes;
  const unsigned ring_s = unsigned(__cvta_generic_to_shared(ring)) + lane * 16;
  const uint8_t* wl = Wt + lane * 16;
  auto issue = [&](int kb) {  // block kb into its slot; always one commit group
    if (live && kb < kb1) {
      const unsigned d = ring_s + ((kb - kb0) & (kStages - 1)) * kStageBytes;
      const uint8_t* src = wl + size_t(kb) * kMxfp4TileBytes;
      cp_async16_shared(d, src);
      cp_async16_shared(d + 512, src + 512);
      if (lane < 4) cp_async16_shared(d + 1024, src + 1024);
    }
    cp_async_commit();
  };
  const bf16* be = W.bias ? W.bias + size_t(e) * N : nullptr;
  const float b_lo = (split == 0 && be && ok_lo) ? __bfloat162float(be[n0 + g]) : 0.0f;
  const float b_hi = (split == 0 && be && ok_hi) ? __bfloat162float(be[n0 + g + 8]) : 0.0f;
  const int pieces = mxfp4_act_cols(K) / 8;  // 16-byte pieces of an activation row
  for (int base = s0; base < s1; base += R) {
    for (int i = 0; i < kStages - 1; ++i) issue(kb0 + i);
    for (int i = threadIdx.x; i < R * pieces; i += blockDim.x) {
      const int rl = i / pieces, p = i % pieces, r = base + rl;
      const int src = r < s1 ? (rows.x_rows ? __ldcg(rows.x_rows + r) : r) : -1;
      const uint4 v = src >= 0 ? __ldcg(reinterpret_cast<const uint4*>(x + size_t(src) * pieces * 8) + p)
                               : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(stage + size_t(rl) * xs + p * 16) = v;
    }
    __syncthreads();
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = b_lo, acc[t][2] = acc[t][3] = b_hi;
    if (live)
#pragma unroll 2
      for (int kb = kb0; kb < kb1; ++kb) {
        __syncwarp();  // every lane is done with the slot the next issue overwrites
        issue(kb + kStages - 1);
        cp_async_wait<kStages - 1>();
        __syncwarp();  // lanes 0-3's scale words are visible to the warp
        const uint8_t* src = ring + ((kb - kb0) & (kStages - 1)) * kStageBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(src + lane * 16);
        const uint4 hi = *reinterpret_cast<const uint4*>(src + 512 + lane * 16);
        const E8m0Factors flo = e8m0_factors(src[1024 + g * 4 + c]), fhi = e8m0_factors(src[1024 + (g + 8) * 4 + c]);
        const bool any_big = __any_sync(0xffffffffu, flo.big || fhi.big);
        uint32_t alo[16], ahi[16];
        decode_group(lo, flo, any_big, alo);
        decode_group(hi, fhi, any_big, ahi);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const uint8_t* xr = stage + size_t(t * 8 + g) * xs + size_t(kb) * 256 + c * 16;
#pragma unroll
          for (int u = 0; u < 4; ++u) {  // steps 2u and 2u + 1
            const uint4 b = *reinterpret_cast<const uint4*>(xr + u * 64);
            mma_bf16_16816(acc[t], alo[4 * u], ahi[4 * u], alo[4 * u + 1], ahi[4 * u + 1], b.x, b.y);
            mma_bf16_16816(acc[t], alo[4 * u + 2], ahi[4 * u + 2], alo[4 * u + 3], ahi[4 * u + 3], b.z, b.w);
          }
        }
      }
    auto store = [&](int t, int i, float v) {
      const int r = base + t * 8 + 2 * c + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (r < s1 && n < N) y[size_t(r) * N + n] = v;
    };
    if (ks == 1) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) store(t, i, acc[t][i]);
    } else {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[warp][t][i][lane] = acc[t][i];
      __syncthreads();
      if (split == 0)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float v = red[warp][t][i][lane];
            for (int w = 1; w < ks; ++w) v += red[warp + w][t][i][lane];
            store(t, i, v);
          }
    }
    cp_async_wait<0>();
    __syncthreads();  // the stage, red and the rings are reused by the next pass
  }
}

// ---------------------------------------------------------------------------------------------
// Prefill: 128 rows (tokens, M side) x 128 weight rows (N side) per block, 128 columns per stage,
// three stages; 8 warps as 2 x 4, each 64 x 32. blockIdx.x walks the row tiles of all experts in
// expert order (each expert's run cut into tiles of 128 rows), blockIdx.y the weight-row tiles.
// The K blocks are summed in ks splits as the decode path splits them (split 0 from the bias, each
// later split's sum added to the output in order), so a row's result is the same on both paths.
constexpr int kTM = 128, kTN = 128, kTStages = 3;
constexpr int kAStride = kBlk * 2 + 64;  // bytes of a staged activation row (16-byte loads conflict-free)
constexpr int kAStage = kTM * kAStride, kBStage = kTN / 16 * kMxfp4TileBytes;  // B: 8 weight tiles
constexpr int kTStageBytes = kAStage + kBStage;

__global__ void __launch_bounds__(kWarps * 32, 1)
    mxfp4_tiled_kernel(Mxfp4ExpertsView W, const bf16* x, ExpertRows rows, float* y, int ks) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int tile_start[257];
  __shared__ int found[2];
  const int N = W.N, K = W.K, KB = mxfp4_act_cols(K) / kBlk, Kp = KB * kBlk, E = W.experts;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  pdl_wait();
  pdl_launch_dependents();
  // Which expert and which of its row tiles: a block-wide prefix sum of the experts' tile counts.
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
  const int t_global = int(blockIdx.x);
  if (t_global >= tile_start[E]) return;  // uniform: past the last tile
  for (int i = tid; i < E; i += blockDim.x)
    if (tile_start[i] <= t_global && t_global < tile_start[i + 1]) found[0] = i;
  __syncthreads();
  const int e = found[0];
  const int m0 = __ldcg(rows.seg + e) + (t_global - tile_start[e]) * kTM, m_end = __ldcg(rows.seg + e + 1);
  const int nb = int(blockIdx.y) * kTN;
  const uint8_t* We = W.tiles + mxfp4_tiles_bytes(N, K) * e;

  // This thread's copy work per stage: 8 activation pieces (rows tid/16 + 16 i, piece tid % 16),
  // and pieces tid, tid + 256, .. of the 8 weight tiles (68 pieces each).
  const bf16* a_src[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = m0 + tid / 16 + 16 * i;
    const int s = r < m_end ? (rows.x_rows ? __ldcg(rows.x_rows + r) : r) : -1;
    a_src[i] = s >= 0 ? x + size_t(s) * Kp + (tid % 16) * 8 : nullptr;
  }
  auto issue = [&](int kb) {
    if (kb < KB) {
      uint8_t* st = smem + (kb % kTStages) * kTStageBytes;
#pragma unroll
      for (int i = 0; i < 8; ++i)
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
  };

  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm*64 .., weight rows wn*32 ..
  float acc[4][4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int n = nb + wn * 32 + nt * 8 + 2 * c;
    const float b0 = W.bias && n < N ? __bfloat162float(W.bias[size_t(e) * N + n]) : 0.0f;
    const float b1 = W.bias && n + 1 < N ? __bfloat162float(W.bias[size_t(e) * N + n + 1]) : 0.0f;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) acc[mt][nt][0] = b0, acc[mt][nt][1] = b1, acc[mt][nt][2] = b0, acc[mt][nt][3] = b1;
  }
  const int per_split = (KB + ks - 1) / ks;
  for (int i = 0; i < kTStages - 1; ++i) issue(i);
  for (int kb = 0; kb < KB; ++kb) {
    cp_async_wait<kTStages - 2>();
    __syncthreads();  // stage kb has landed for every thread; stage kb - 1 is free
    issue(kb + kTStages - 1);
    const uint8_t* st = smem + (kb % kTStages) * kTStageBytes;
    const uint8_t* bs = st + kAStage;
    uint4 wv[4];
    E8m0Factors f[4];
    bool big = false;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int nl = wn * 32 + nt * 8 + g;
      const uint8_t* tile = bs + (nl / 16) * kMxfp4TileBytes;
      wv[nt] = *reinterpret_cast<const uint4*>(tile + (nl % 16) * 64 + c * 16);
      f[nt] = e8m0_factors(tile[1024 + (nl % 16) * 4 + c]);
      big |= f[nt].big;
    }
    const bool any_big = __any_sync(0xffffffffu, big);
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // steps 2u, 2u + 1: word u of each weight group
      uint4 a_lo[4], a_hi[4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const uint8_t* ar = st + (wm * 64 + mt * 16 + g) * kAStride + u * 64 + c * 16;
        a_lo[mt] = *reinterpret_cast<const uint4*>(ar);
        a_hi[mt] = *reinterpret_cast<const uint4*>(ar + 8 * kAStride);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint32_t word = u == 0 ? wv[nt].x : u == 1 ? wv[nt].y : u == 2 ? wv[nt].z : wv[nt].w;
        uint32_t b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          b[j] = mul_bf16x2(e2m1_pair_bits(word, j), f[nt].a);
          if (any_big && f[nt].big) b[j] = mul_bf16x2(b[j], f[nt].b);
        }
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          mma_bf16_16816(acc[mt][nt], a_lo[mt].x, a_hi[mt].x, a_lo[mt].y, a_hi[mt].y, b[0], b[1]);
          mma_bf16_16816(acc[mt][nt], a_lo[mt].z, a_hi[mt].z, a_lo[mt].w, a_hi[mt].w, b[2], b[3]);
        }
      }
    }
    if ((kb + 1) % per_split == 0 || kb + 1 == KB) {  // a split ends: into the output, in split order
      const bool first = kb < per_split;
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int n = nb + wn * 32 + nt * 8 + 2 * c;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = m0 + wm * 64 + mt * 16 + g + 8 * half;
            float* out = y + size_t(r) * N + n;
            float v0 = acc[mt][nt][2 * half], v1 = acc[mt][nt][2 * half + 1];
            acc[mt][nt][2 * half] = acc[mt][nt][2 * half + 1] = 0.0f;
            if (r >= m_end) continue;
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

// ---------------------------------------------------------------------------------------------
// Activations into the layout: one thread per BF16 pair (positions 2i, 2i + 1 hold columns k, k + 4).
__global__ void to_bf16_layout_kernel(const float* x, int T, int K, bf16* out, const int32_t* in_rows) {
  pdl_wait();
  pdl_launch_dependents();
  const int Kp = mxfp4_act_cols(K), pairs = Kp / 2;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(T) * pairs) return;
  const int t = int(i / pairs), p = int(i % pairs) * 2, k = mxfp4_act_column(p);
  const int src = in_rows ? __ldcg(in_rows + t) : t;
  const float* row = x + size_t(src < 0 ? 0 : src) * K;
  const bool ok = src >= 0;
  const float v0 = ok && k < K ? __ldcg(row + k) : 0.0f, v1 = ok && k + 4 < K ? __ldcg(row + k + 4) : 0.0f;
  reinterpret_cast<__nv_bfloat162*>(out + size_t(t) * Kp)[p / 2] = __floats2bfloat162_rn(v0, v1);
}

__global__ void swiglu_bf16_kernel(const float* t, const int32_t* rows_end, int rows_max, int I, float alpha,
                                   float limit, bf16* a, const bf16* bias, const int32_t* seg, int experts) {
  pdl_wait();
  pdl_launch_dependents();
  __shared__ int seg_sh[kMaxExperts + 1];  // with a bias: the segments, searched per row
  if (bias) {
    for (int e = threadIdx.x; e <= experts; e += blockDim.x) seg_sh[e] = __ldcg(seg + e);
    __syncthreads();
  }
  const int Ip = mxfp4_act_cols(I), pairs = Ip / 2;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows_max) * pairs) return;
  const int r = int(i / pairs), p = int(i % pairs) * 2, k = mxfp4_act_column(p);
  if (r >= __ldcg(rows_end)) return;
  const float* row = t + size_t(r) * 2 * I;
  const bf16* b = nullptr;
  if (bias) {  // the row's expert: the last e with seg[e] <= r
    int lo = 0, hi = experts;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (seg_sh[mid] <= r) lo = mid;
      else hi = mid;
    }
    b = bias + size_t(lo) * 2 * I;
  }
  float v[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int col = k + 4 * h;
    if (col < I) {
      float gt = __ldcg(row + 2 * col), up = __ldcg(row + 2 * col + 1);
      if (b) gt += __bfloat162float(b[2 * col]), up += __bfloat162float(b[2 * col + 1]);
      v[h] = swiglu_clamped(gt, up, alpha, limit);
    }
  }
  reinterpret_cast<__nv_bfloat162*>(a + size_t(r) * Ip)[p / 2] = __floats2bfloat162_rn(v[0], v[1]);
}

// Thread i: group g of 128-column block kb of row n of expert e (i = ((e N + n) KB + kb) 4 + g):
// its 16 code bytes and scale from the tile, 32 BF16 values written where the activation layout
// puts their columns (four runs of 8 positions: 128 kb + 32 u + 8 g + 0..7).
__global__ void mxfp4_to_bf16_kernel(Mxfp4ExpertsView W, const int32_t* seg, bf16* out) {
  pdl_wait();
  pdl_launch_dependents();
  const int Kp = mxfp4_act_cols(W.K), KB = Kp / kBlk;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(W.experts) * W.N * KB * 4) return;
  const int g = int(i % 4), kb = int(i / 4 % KB), n = int(i / 4 / KB % W.N), e = int(i / 4 / KB / W.N);
  if (__ldcg(seg + e + 1) <= __ldcg(seg + e)) return;
  const uint8_t* tile = W.tiles + ((size_t(e) * (W.N / kMxfp4TileRows) + n / kMxfp4TileRows) * KB + kb) * kMxfp4TileBytes;
  const uint4 raw = *reinterpret_cast<const uint4*>(tile + (n % kMxfp4TileRows) * 64 + g * 16);
  const int exp2 = int(tile[1024 + 4 * (n % kMxfp4TileRows) + g]) - 127;  // E8M0: 2^(S - 127)
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
      const int m = code & 7;  // E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6
      const float v = m < 4 ? 0.5f * float(m) : float(1 << (m / 2 - 1)) * (1.0f + 0.5f * float(m % 2));
      c[t] = __float2bfloat16(ldexpf(code & 8 ? -v : v, exp2));  // exact: a BF16 value
    }
    *reinterpret_cast<uint4*>(row + 32 * u + 8 * g) = chunk;
  }
}

}  // namespace

void mxfp4_experts_to_bf16(const Mxfp4ExpertsView& W, const int32_t* seg, bf16* out, cudaStream_t st) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || !seg)
    fail_plain("mxfp4_experts_to_bf16: N must be a multiple of 16, K of 32, with the experts' segments (got N " +
               std::to_string(W.N) + ", K " + std::to_string(W.K) + ", " + std::to_string(W.experts) + " experts)");
  const size_t n = size_t(W.experts) * W.N * (mxfp4_act_cols(W.K) / kBlk) * 4;
  launch_pdl("dequant", mxfp4_to_bf16_kernel, unsigned((n + 255) / 256), 256, 0, st, W, seg, out);
}

void m_grouped_mxfp4_gemm_bf16_contiguous(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                                          cudaStream_t st) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || W.experts > kMaxExperts)
    fail_plain("m_grouped_mxfp4_gemm_bf16_contiguous: N must be a multiple of 16, K of 32, experts in [1, 256] (got N " +
               std::to_string(W.N) + ", K " + std::to_string(W.K) + ", " + std::to_string(W.experts) + " experts)");
  if (rows.rows == 0) return;
  const int row_tiles = W.N / 16, KB = mxfp4_act_cols(W.K) / kBlk, sms = sm_count();
  // K-splits: the fewest that give every SM a block of the decode path when 4 experts have rows
  // (a batch-1 step of gpt-oss, top-4), never more than the K blocks. They depend on the shape
  // only, and both paths sum in these splits, so a row's result does not depend on the batch.
  constexpr int kTopK = 4;
  int ks = 1;
  while (ks < kWarps && ks * 2 <= KB && size_t(row_tiles * ks + kWarps - 1) / kWarps * kTopK < size_t(sms)) ks *= 2;
  constexpr size_t kMaxSmem = 200 * 1024;  // dynamic, beside the decode kernel's static reduction buffer
  // Up to 48 rows an expert (three passes of 16 over weights that stay in L2) the decode path;
  // beyond, 128-row tiles.
  if (rows.rows_per_expert > 48) {
    static std::once_flag once;
    std::call_once(once, [] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(mxfp4_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             kTStages * kTStageBytes));
    });
    const dim3 grid(unsigned((rows.rows + kTM - 1) / kTM + W.experts), unsigned((W.N + kTN - 1) / kTN));
    launch_pdl("gemm", mxfp4_tiled_kernel, grid, kWarps * 32, size_t(kTStages) * kTStageBytes, st, W, x, rows, y, ks);
    return;
  }
  // 8 rows a pass up to 16 rows an expert (two blocks an SM; a second pass finds the block's
  // weights in L2), 16 beyond.
  const int NT = rows.rows_per_expert > 16 ? 2 : 1;
  const size_t smem = skinny_smem(NT, W.K);
  if (smem > kMaxSmem) fail_plain("m_grouped_mxfp4_gemm_bf16_contiguous: K = " + std::to_string(W.K) + " is too long to stage");
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto k : {mxfp4_decode_kernel<1>, mxfp4_decode_kernel<2>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
  });
  const int segments = rows.active ? rows.active_max : W.experts;
  auto kernel = NT == 1 ? mxfp4_decode_kernel<1> : mxfp4_decode_kernel<2>;
  const int tiles_per_block = kWarps / ks;
  const dim3 grid(unsigned((row_tiles + tiles_per_block - 1) / tiles_per_block), unsigned(segments));
  launch_pdl("gemm", kernel, grid, kWarps * 32, smem, st, W, x, rows, y, ks);
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
