// Device helpers shared by the FP8 path's kernel files (quantize.cu, moe_route.cu, moe_combine.cu,
// gemm_fp8.cu) and the MXFP4 expert GEMMs: the activation segment layout's index arithmetic, the per-token row kernels' norm
// and quantization, the experts' SwiGLU of 4 columns a lane. Internal to kernels/cuda.
#pragma once
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"

namespace osprey::cuda {

constexpr int kB = 128;
inline void check_launch() { OSPREY_CUDA_CHECK(cudaGetLastError()); }
__host__ __device__ inline int round4(int n) { return (n + 3) / 4 * 4; }

// The row layout the skinny GEMM reads: the grouped GEMM's rows (Fp8ExpertRows: segments by
// expert, their scales by expert), or with seg null one dense matrix of `rows` rows whose scales
// are [KB][ld]. The row kernels (quantize, SwiGLU, gather) take only the scales' layout
// (ActScales); the index helpers below read the fields both have (seg, experts, ld).
struct ActSegments : Fp8ExpertRows {
  int ld = 0;
};

// The segment e with seg[e] <= r < seg[e + 1].
template <class Layout>
__device__ inline int segment_of(const Layout& sg, int r) {
  int lo = 0, hi = sg.experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (sg.seg[mid] <= r) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Lane's 4 values of 128-block kb of the clamped SwiGLU of one row t [2I] (gate, up interleaved;
// the first GEMM's output, read through L2: under PDL it was written by the kernel before), with
// the expert's bias b [2I] added first when given; 0 past I.
__device__ inline void swiglu_block4(const float* t, int kb, int I, float alpha, float limit, float (&v)[4],
                                     const bf16* b = nullptr) {
  const int lane = threadIdx.x & 31;
  const int c0 = kb * kB + lane * 4;
  if (I % 4 == 0 && (reinterpret_cast<uintptr_t>(t) & 15) == 0 && (reinterpret_cast<uintptr_t>(b) & 15) == 0) {
    // The lane's 4 (gate, up) pairs as two 16-byte loads (and its 8 bias values as one): the
    // same values and sums as below. Its columns all exist or none do.
    if (c0 >= I) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = 0.0f;
      return;
    }
    const float4 p0 = __ldcg(reinterpret_cast<const float4*>(t + 2 * c0));
    const float4 p1 = __ldcg(reinterpret_cast<const float4*>(t + 2 * c0) + 1);
    float gt[4] = {p0.x, p0.z, p1.x, p1.z}, up[4] = {p0.y, p0.w, p1.y, p1.w};
    if (b) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(b + 2 * c0));
      const __nv_bfloat162* bp = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) gt[i] += __low2float(bp[i]), up[i] += __high2float(bp[i]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = swiglu_clamped(gt[i], up[i], alpha, limit);
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = kb * kB + lane * 4 + i;
    v[i] = 0.0f;
    if (c < I) {
      float gt = __ldcg(t + 2 * c), up = __ldcg(t + 2 * c + 1);
      if (b) gt += __bfloat162float(b[2 * c]), up += __bfloat162float(b[2 * c + 1]);
      v[i] = swiglu_clamped(gt, up, alpha, limit);
    }
  }
}

// Scale offset of (row r, block kb) in a segment layout.
// (seg: row r lies in segment lo.)
template <class Layout>
__device__ inline size_t act_scale_index_in(const Layout& sg, int KB, int r, int kb, int lo) {
  const int s0 = sg.seg[lo], len = sg.seg[lo + 1] - s0;
  return size_t(KB) * s0 + size_t(kb) * len + (r - s0);
}
template <class Layout>
__device__ inline size_t act_scale_index(const Layout& sg, int KB, int r, int kb) {
  if (!sg.seg) return size_t(kb) * sg.ld + r;
  return act_scale_index_in(sg, KB, r, kb, segment_of(sg, r));
}

// Per-token row kernels: thread i of a block holds values i, i + THREADS, .. of a row in
// registers (rows of up to kRowMax values), so a row is read in one wave of loads and reduced once.
constexpr int kRowThreads = 1024, kRowMax = 4096, kRouteThreads = 256, kExpertsPerRouteBlock = kRouteThreads / 32;
constexpr int kMaxTopK = 8;  // experts per token the combine stages

// One warp's 1x128 quantization of block kb of row t (normalized, in shared memory, H floats):
// codes into q [H], the scale into s[kb * ld + t].
__device__ inline void quantize_row_block(const float* row, int kb, int H, uint8_t* q, float* s, int ld, int t) {
  const int lane = threadIdx.x & 31;
  float w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = kb * kB + lane * 4 + i;
    w[i] = c < H ? row[c] : 0.0f;
  }
  const float sc = warp_quantize_block128(w, kb * kB, H, q);
  if (lane == 0) s[size_t(kb) * ld + t] = sc;
}

// quantize_row_block for N blocks at once (j < n of them: block kb[j] of row row[j], codes into
// q[j] [H], scales s[kb[j] * ld + t[j]]), their loads, reductions and stores interleaved so that N
// latency chains are in flight; the same operations on each block, bit for bit.
template <int N>
__device__ inline void quantize_row_blocks(const float* const (&row)[N], const int (&kb)[N], int n, int H,
                                           uint8_t* const (&q)[N], float* s, int ld, const int (&t)[N]) {
  const int lane = threadIdx.x & 31;
  float w[N][4], amax[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    amax[j] = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = kb[j] * kB + lane * 4 + i;
      w[j][i] = j < n && c < H ? row[j][c] : 0.0f;
      amax[j] = fmaxf(amax[j], fabsf(w[j][i]));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int j = 0; j < N; ++j) amax[j] = fmaxf(amax[j], __shfl_xor_sync(0xffffffffu, amax[j], o));
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j >= n) break;  // uniform
    const float sc = fp8_block_scale(amax[j]);
    store_block128_codes(w[j], sc, kb[j] * kB, H, q[j]);
    if (lane == 0) s[size_t(kb[j]) * ld + t[j]] = sc;
  }
}

// The norm's gains of this thread's columns threadIdx.x + j THREADS (0 past H), all loads in flight
// before any store (between stores the compiler must assume the stores may alias them: one round
// trip per value, 16 a row in a 256-thread block).
template <int THREADS, int PER>
__device__ inline void load_gains(const bf16* gain, int H, float (&gv)[PER]) {
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS;
    gv[j] = i < H ? __bfloat162float(gain[i]) : 0.0f;
  }
}

// RMSNorm of the row whose values this thread holds (v[j] = value threadIdx.x + j * THREADS, 0
// past H) into row[] (shared, H floats), then the 1x128 quantization of the normalized row t:
// codes q [H] and scales s[kb * ld + t] (q == null: not wanted); h_out (optional) receives the
// fp32 normalized row. Ends synchronized, row[] readable by the whole block.
// VTHREADS (a multiple of THREADS, at most 1,024): the sum of squares in the order of a block of
// VTHREADS threads, so that the persistent decode kernel's 256-thread blocks give the bits of the
// per-op kernels' 1,024: thread i sums virtual threads i + THREADS u (its values j = u + (VTHREADS /
// THREADS) m, in m's order), each virtual warp's sum through the same butterfly, then the
// VTHREADS / 32 sums through the last one.
template <int THREADS, int VTHREADS = THREADS>
__device__ inline void rmsnorm_quantize_row(const float (&v)[kRowMax / THREADS], const bf16* gain, int H, float eps,
                                     float* row, uint8_t* q, float* s, int ld, int t, float* h_out) {
  static_assert(VTHREADS % THREADS == 0 && VTHREADS <= 1024, "virtual threads: a multiple of the block, at most 1024");
  constexpr int PER = kRowMax / THREADS, VT = VTHREADS / THREADS, NW = THREADS / 32;
  __shared__ float part[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < VT; ++u) {
    float ss = 0;
#pragma unroll
    for (int j = u; j < PER; j += VT) ss += v[j] * v[j];
    ss = warp_sum(ss);
    if (lane == 0) part[warp + NW * u] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    const float p = warp_sum(lane < VTHREADS / 32 ? part[lane] : 0.0f);
    if (lane == 0) part[0] = p;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / H + eps);
  float gv[PER];
  load_gains<THREADS>(gain, H, gv);
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < H) {
      const float n = gv[j] * (v[j] * r);
      row[i] = n;
      if (h_out) h_out[i] = n;
    }
  }
  __syncthreads();
  const int KB = (H + kB - 1) / kB;
  for (int kb = warp; q && kb < KB; kb += THREADS / 32) quantize_row_block(row, kb, H, q, s, ld, t);
  __syncthreads();
}

// The norms of a tile of nt rows in shared memory (row i at rows + i * Hp, H values), by a block
// of THREADS threads, with the bits of rmsnorm_quantize_row<VTHREADS> (VTHREADS a multiple of
// THREADS, at most 1,024): thread i sums the squares of virtual threads i + THREADS u in their
// order, each virtual warp's sum goes through the same butterfly and the VTHREADS / 32 sums
// through the last one; each thread loads its gains once for the tile. The rows are normalized in
// place (and into h_out rows t0 + i when given), then quantized in 1x128 blocks (codes q rows
// t0 + i, scales s[kb * ld + t0 + i]; q null: not wanted), four (row, block) pairs a warp at once.
// part: shared [kMaxRows][VTHREADS / 32]. Begins and ends with the block synchronized.
template <int THREADS, int VTHREADS, int kMaxRows>
__device__ inline void tile_rmsnorm_quantize(float* rows, int Hp, int nt, const bf16* gain, int H, float eps,
                                             uint8_t* q, float* s, int ld, int t0, float* h_out,
                                             float (*part)[VTHREADS / 32]) {
  static_assert(VTHREADS % THREADS == 0 && VTHREADS <= 1024, "virtual threads: a multiple of the block, at most 1024");
  constexpr int NW = THREADS / 32, NVW = VTHREADS / 32, VT = VTHREADS / THREADS;
  constexpr int VPER = kRowMax / VTHREADS, PER = kRowMax / THREADS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = 0; i < nt; ++i) {
    const float* row = rows + size_t(i) * Hp;
#pragma unroll
    for (int u = 0; u < VT; ++u) {
      float ss = 0;
#pragma unroll
      for (int j = 0; j < VPER; ++j) {
        const int c = threadIdx.x + THREADS * u + j * VTHREADS;
        const float v = c < H ? row[c] : 0.0f;
        ss += v * v;
      }
      ss = warp_sum(ss);
      if (lane == 0) part[i][warp + NW * u] = ss;
    }
  }
  __syncthreads();
  for (int i = warp; i < nt; i += NW) {
    const float p = warp_sum(lane < NVW ? part[i][lane] : 0.0f);
    if (lane == 0) part[i][0] = p;
  }
  __syncthreads();
  float gv[PER];
  load_gains<THREADS>(gain, H, gv);
  for (int i = 0; i < nt; ++i) {
    const float r = rsqrtf(part[i][0] / H + eps);
    float* row = rows + size_t(i) * Hp;
#pragma unroll
    for (int m = 0; m < PER; ++m) {
      const int c = threadIdx.x + m * THREADS;
      if (c < H) {
        const float n = gv[m] * (row[c] * r);
        row[c] = n;
        if (h_out) h_out[size_t(t0 + i) * H + c] = n;
      }
    }
  }
  __syncthreads();
  const int KB = (H + kB - 1) / kB;
  constexpr int QB = 4;
  for (int j0 = warp * QB; q && j0 < nt * KB; j0 += NW * QB) {
    const float* rp[QB];
    int kbs[QB], ts[QB];
    uint8_t* qp[QB];
#pragma unroll
    for (int u = 0; u < QB; ++u) {
      const int j = min(j0 + u, nt * KB - 1), i = j / KB;
      rp[u] = rows + size_t(i) * Hp, kbs[u] = j % KB, ts[u] = t0 + i, qp[u] = q + size_t(t0 + i) * H;
    }
    quantize_row_blocks<QB>(rp, kbs, min(QB, nt * KB - j0), H, qp, s, ld, ts);
  }
  __syncthreads();
}

template <int THREADS>
__device__ inline void load_row(const float* xt, int H, float (&v)[kRowMax / THREADS]) {
#pragma unroll
  for (int j = 0; j < kRowMax / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    v[j] = i < H ? xt[i] : 0.0f;
  }
}

// Rows r in [s0, s1) with row_live[r] >= 0 (block-wide, uniform; padding rows are a suffix of
// each expert's run, so these are the first ones).
__device__ inline int live_rows(const int32_t* row_live, int s0, int s1) {
  int live = 0;
  for (int r0 = s0; r0 < s1; r0 += blockDim.x) {
    const int r = r0 + int(threadIdx.x);
    live += __syncthreads_count(r < s1 && __ldcg(row_live + r) >= 0);
  }
  return live;
}

// Rows of up to kRowMax values only (the row kernels hold a row in registers).
inline void check_row(int H, const char* what) {
  if (H > kRowMax)
    fail_plain(std::string(what) + ": rows of more than " + std::to_string(kRowMax) +
               " values are not supported (got " + std::to_string(H) + ")");
}

}  // namespace osprey::cuda
