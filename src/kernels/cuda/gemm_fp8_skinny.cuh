// The skinny FP8 GEMM's body (gemm_fp8.cu launches it as its own kernel; the persistent decode
// kernel runs it as a phase): internal to kernels/cuda.
#pragma once
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// ---------------------------------------------------------------------------------------------
// The skinny FP8 GEMM (fp8.cuh fp8_gemm_dense, m_grouped_fp8_gemm_contiguous) puts 16 weight rows on the M side of an
// mma.m16n8k32 e4m3 and up to 8 activation rows (tokens) on the N side, so a decode step reads
// each weight byte once and the tensor cores do the arithmetic. Because a dot product may visit
// k in any order as long as both operands agree, each thread loads 16 contiguous bytes of its
// weight row and of its token row and feeds them to the mma's k slots in the same order:
// 16-byte coalesced loads and no shuffles.


// Activations: written by the kernel before, which under PDL may still have been running when
// this one started, so never through the non-coherent path (L2 only, .cg).
__device__ inline uint4 load16_act(const uint8_t* p, bool ok) {
  return ok ? __ldcg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

constexpr int kSkinnyWarps = 8;

// Shared-memory row stride of staged activation codes: K bytes padded so that two consecutive rows
// start 16 banks apart (a quarter-warp's 16-byte loads then touch every bank once).
__host__ __device__ inline int skinny_x_stride(int K) {
  const int words = K / 4;
  return K + 4 * ((16 - words % 32 + 32) % 32);
}
// Stages of each warp's weight ring: one 128-column block of its 16 rows (2 KB) per stage.
__host__ __device__ constexpr int skinny_stages(int NT) { return NT == 1 ? 4 : NT == 2 ? 6 : 3; }
constexpr int kRingStage = 16 * kB;
// Staged activation rows of one pass (R of them): codes + scales.
__host__ __device__ inline size_t skinny_stage_bytes(int R, int K) {
  const int KB = (K + kB - 1) / kB;
  return (size_t(R) * skinny_x_stride(K) + size_t(R) * KB * sizeof(float) + 15) / 16 * 16;
}
__host__ __device__ inline size_t skinny_smem_bytes(int NT, int R, int K, int stages = 0) {
  return skinny_stage_bytes(R, K) + size_t(kSkinnyWarps) * (stages ? stages : skinny_stages(NT)) * kRingStage;
}

// The arguments of one skinny GEMM launch (the launcher's choice of ks included).
struct Fp8SkinnyArgs {
  const uint8_t* W;  // [E][N][K] codes
  const float* ws;   // [E][round4(N/128)][ws_stride]
  int ws_stride;
  const bf16* bias;  // [E][N] or null
  const uint8_t* x;  // activation codes
  const float* xs;   // their scales
  ActSegments sg;
  float* y;
  int y_ld;
  bool accumulate;
  int N, K, ks;
};

// Block: 8 warps = (8 / ks) tiles of 16 weight rows x ks K-splits (a tile's ks partial sums are
// added in a fixed order through shared memory, so results do not depend on timing; ks = 1: each
// warp owns a tile over the whole K and writes it directly). blk.y = segment. Each pass
// covers 8 * NT activation rows, staged with their scales in shared memory by the whole block
// (one round trip). Each warp streams its weights through a ring of S stages with cp.async
// (S - 1 blocks of 2 KB in flight per warp, no registers held); every thread copies and later
// reads back only its own 64 bytes of a stage, so the ring needs no synchronization beyond
// cp.async.wait_group. A dense GEMM fills its ring before its wait, i.e. while the kernel (or
// phase) before it is still finishing.
// R: activation rows staged per pass (compile time: 8 NT, or 1 for a batch-1 step, which leaves
// shared memory and, with MINB = 3, registers for a third block per SM). S: the weight ring's
// depth (S - 1 blocks of 2 KB in flight a warp).
template <int NT, int R, class Sync, int S = skinny_stages(NT)>
__device__ inline void fp8_skinny_body(const Fp8SkinnyArgs& args, VBlock blk, const Sync& sync) {
  const uint8_t* __restrict__ W = args.W;
  const float* __restrict__ ws = args.ws;
  const int ws_stride = args.ws_stride;
  const bf16* __restrict__ bias = args.bias;
  const uint8_t* x = args.x;
  const float* xs = args.xs;
  const ActSegments& sg = args.sg;
  float* y = args.y;
  const int y_ld = args.y_ld, N = args.N, K = args.K, ks = args.ks;
  const bool accumulate = args.accumulate;
  __shared__ float red[kSkinnyWarps][NT][4][32];
  extern __shared__ __align__(16) uint8_t stage[];  // [8 NT][x_stride] codes, [8 NT][KB] scales, then the rings
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int tile = warp / ks, split = warp % ks, tiles_per_block = kSkinnyWarps / ks;
  const bool grouped = sg.seg != nullptr;
  int e = 0;
  if (grouped) {  // the expert comes from the routing kernels
    if (!sg.routed_early) sync.wait();
    e = sg.active ? __ldcg(sg.active + blk.y) : blk.y;
  }
  const int n0 = (blk.x * tiles_per_block + tile) * 16;
  const int KB = (K + kB - 1) / kB, per_split = (KB + ks - 1) / ks;
  const int kb0 = min(KB, split * per_split), kb1 = min(KB, kb0 + per_split);
  const bool ok_lo = n0 + g < N, ok_hi = n0 + g + 8 < N, active = e >= 0 && n0 < N;
  const uint8_t* We = W + size_t(max(e, 0)) * N * K;
  const uint8_t* wlo = We + size_t(ok_lo ? n0 + g : 0) * K + c * 16;
  const uint8_t* whi = We + size_t(ok_hi ? n0 + g + 8 : 0) * K + c * 16;
  static_assert(R >= 1 && R <= 8 * NT, "rows per pass");
  uint8_t* ring = stage + skinny_stage_bytes(R, K) + size_t(warp) * S * kRingStage + lane * 16;
  auto issue = [&](int kb) {  // block kb into its slot; always one commit group
    if (active && kb < kb1) {
      const int k0 = kb * kB;
      const bool in0 = k0 + c * 16 < K, in1 = k0 + 64 + c * 16 < K;  // K % 16 == 0: a 16-byte piece is in or out
      uint8_t* d = ring + ((kb - kb0) % S) * kRingStage;
      cp_async16(d, wlo + k0, ok_lo && in0);
      cp_async16(d + 512, whi + k0, ok_hi && in0);
      cp_async16(d + 1024, wlo + k0 + 64, ok_lo && in1);
      cp_async16(d + 1536, whi + k0 + 64, ok_hi && in1);
    }
    cp_async_commit();
  };
  for (int i = 0; i < S - 1; ++i) issue(kb0 + i);
  if (!grouped || sg.routed_early) sync.wait();
  sync.release();
  if (e < 0) return;  // uniform over the block
  const int s0 = grouped ? sg.seg[e] : 0, s_end = grouped ? sg.seg[e + 1] : sg.rows;
  if (s_end <= s0) {  // uniform over the block
    cp_async_wait<0>();
    return;
  }
  // The one-row tile skips the segment's padding rows (a suffix) when row_live marks them; the
  // wider tiles keep the code they had (no runtime row count: fewer registers, measured faster).
  const int s1 = R == 1 && grouped && sg.row_live ? s0 + live_rows(sg.row_live, s0, s_end) : s_end;
  // Activation scales: [KB][sld] at sbase for this segment, or by source row with stride x_ld
  // when rows are gathered (x_rows).
  const int sld = grouped ? s_end - s0 : sg.ld;  // the whole segment's rows, padding included
  const size_t sbase = grouped ? size_t(KB) * s0 : 0;
  const int sstride = sg.x_rows ? sg.x_ld : sld;
  const int x_stride = skinny_x_stride(K);
  constexpr int rows_pass = R;
  float* stage_s = reinterpret_cast<float*>(stage + size_t(rows_pass) * x_stride);
  const int ws_rows = round4((N + kB - 1) / kB);
  const float* wse = n0 < N ? ws + size_t(e) * ws_rows * ws_stride + size_t(n0 / kB) * ws_stride : nullptr;
  const bf16* be = bias ? bias + size_t(e) * N : nullptr;
  const float b_lo = (split == 0 && be && ok_lo) ? __bfloat162float(be[n0 + g]) : 0.0f;
  const float b_hi = (split == 0 && be && ok_hi) ? __bfloat162float(be[n0 + g + 8]) : 0.0f;
  for (int base = s0; base < s1; base += rows_pass) {
    if (base != s0)
      for (int i = 0; i < S - 1; ++i) issue(kb0 + i);
    // Stage this pass's rows: codes (zero rows past the segment or for padding) and scales.
    const int pieces = K / 16;
    for (int i = threadIdx.x; i < rows_pass * pieces; i += blockDim.x) {
      const int rl = i / pieces, p = i % pieces, r = base + rl;
      const int src = r < s1 ? (sg.x_rows ? sg.x_rows[r] : r) : -1;
      *reinterpret_cast<uint4*>(stage + size_t(rl) * x_stride + p * 16) =
          load16_act(x + size_t(src < 0 ? 0 : src) * K + p * 16, src >= 0);
    }
    for (int i = threadIdx.x; i < rows_pass * KB; i += blockDim.x) {
      const int rl = i / KB, kb = i % KB, r = base + rl;
      float v = 0.0f;
      if (r < s1) {
        if (!sg.x_rows) v = __ldcg(xs + sbase + size_t(kb) * sstride + (r - s0));
        else if (sg.x_rows[r] >= 0) v = __ldcg(xs + size_t(kb) * sstride + sg.x_rows[r]);
      }
      stage_s[rl * KB + kb] = v;
    }
    __syncthreads();
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = b_lo;  // the accumulators start from the bias (split 0's share)
      acc[t][2] = acc[t][3] = b_hi;
    }
    if (active)
      for (int kb = kb0; kb < kb1; ++kb) {
        issue(kb + S - 1);
        cp_async_wait<S - 1>();  // block kb has landed (its group is the oldest of the last S)
        const uint8_t* src = ring + ((kb - kb0) % S) * kRingStage;
        const uint4 lo0 = *reinterpret_cast<const uint4*>(src), hi0 = *reinterpret_cast<const uint4*>(src + 512);
        const uint4 lo1 = *reinterpret_cast<const uint4*>(src + 1024), hi1 = *reinterpret_cast<const uint4*>(src + 1536);
        const int k0 = kb * kB;
        const bool in0 = k0 + c * 16 < K, in1 = k0 + 64 + c * 16 < K;
        float part[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          // Rows past R (R < 8 only): zero operands, their sums not stored; a compile-time test
          // for R = 8 NT, so the full tile's loop is what it was.
          const bool staged = R == 8 * NT || t * 8 + g < R;
          const uint8_t* xr = stage + size_t(staged ? t * 8 + g : 0) * x_stride + k0 + c * 16;
          const uint4 b0 = in0 && staged ? *reinterpret_cast<const uint4*>(xr) : make_uint4(0, 0, 0, 0);
          const uint4 b1 = in1 && staged ? *reinterpret_cast<const uint4*>(xr + 64) : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int i = 0; i < 4; ++i) part[t][i] = 0.0f;
          mma_e4m3_16832(part[t], lo0.x, hi0.x, lo0.y, hi0.y, b0.x, b0.y);
          mma_e4m3_16832(part[t], lo0.z, hi0.z, lo0.w, hi0.w, b0.z, b0.w);
          mma_e4m3_16832(part[t], lo1.x, hi1.x, lo1.y, hi1.y, b1.x, b1.y);
          mma_e4m3_16832(part[t], lo1.z, hi1.z, lo1.w, hi1.w, b1.z, b1.w);
        }
        const float w_s = wse[kb];  // fold in the two scales of this 128-block
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int r0 = t * 8 + 2 * c;
          const float x0 = (R == 8 * NT || r0 < R) ? stage_s[r0 * KB + kb] : 0.0f;
          const float x1 = (R == 8 * NT || r0 + 1 < R) ? stage_s[(r0 + 1) * KB + kb] : 0.0f;
          acc[t][0] += part[t][0] * (w_s * x0);
          acc[t][1] += part[t][1] * (w_s * x1);
          acc[t][2] += part[t][2] * (w_s * x0);
          acc[t][3] += part[t][3] * (w_s * x1);
        }
      }
    auto store = [&](int t, int i, float v) {
      const int rl = t * 8 + 2 * c + (i & 1), r = base + rl, n = n0 + g + (i >= 2 ? 8 : 0);
      if ((R == 8 * NT || rl < R) && r < s1 && n < N) {
        float* out = y + size_t(r) * y_ld + n;
        *out = accumulate ? *out + v : v;
      }
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
      if (split == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float v = red[warp][t][i][lane];
            for (int w = 1; w < ks; ++w) v += red[warp + w][t][i][lane];
            store(t, i, v);
          }
      }
    }
    __syncthreads();  // the stage and red are reused by the next pass
  }
  cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

// The K-splits of a skinny GEMM of `segments` segments of N rows over K columns on `sms` SMs that
// each hold `per_sm` of its blocks at once: the fewest that give every SM a block (a block's warps
// keep 3-5 weight blocks of 2 KB each in flight), then more while every block is still resident
// at once (one wave), never more splits than 128-blocks.
inline int skinny_k_splits(int N, int K, int segments, int sms, int per_sm) {
  const int row_tiles = (N + 15) / 16, KB = (K + kB - 1) / kB;
  auto blocks = [&](int k) { return size_t(row_tiles * k + kSkinnyWarps - 1) / kSkinnyWarps * segments; };
  int ks = 1;
  while (ks < kSkinnyWarps && blocks(ks) < size_t(sms) && ks * 2 <= KB) ks *= 2;
  while (ks < kSkinnyWarps && ks * 2 <= KB && blocks(ks * 2) <= size_t(per_sm) * sms) ks *= 2;
  return ks;
}
// Blocks of the skinny grid for ks splits: x = 16-row tiles / (8 / ks).
inline int skinny_grid_x(int N, int ks) { return ((N + 15) / 16 + kSkinnyWarps / ks - 1) / (kSkinnyWarps / ks); }

}  // namespace osprey::cuda
