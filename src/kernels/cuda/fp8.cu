// FP8 kernels (fp8.cuh). The skinny GEMM puts 16 weight rows on the M side of an
// mma.m16n8k32 e4m3 and up to 8 activation rows (tokens) on the N side, so a decode step reads
// each weight byte once and the tensor cores do the arithmetic. Because a dot product may visit
// k in any order as long as both operands agree, each thread loads 16 contiguous bytes of its
// weight row and of its token row and feeds them to the mma's k slots in the same order:
// 16-byte coalesced loads, no shared memory, no shuffles.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <cuda_fp8.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

namespace {

constexpr int kB = 128;
void check_launch() { OSPREY_CUDA_CHECK(cudaGetLastError()); }
__host__ __device__ inline int round4(int n) { return (n + 3) / 4 * 4; }


struct Bf16Source {
  const bf16* w;
  int cols;
  __device__ float operator()(int r, int c) const { return __bfloat162float(w[size_t(r) * cols + c]); }
};

__constant__ float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

struct Mxfp4Source {
  const uint8_t *blocks, *e8m0;
  int cols;
  __device__ float operator()(int r, int c) const {
    const uint8_t b = blocks[size_t(r) * (cols / 2) + c / 2];
    const float s = ldexpf(1.0f, int(e8m0[size_t(r) * (cols / 32) + c / 32]) - 127);
    return kE2M1[(c & 1) ? (b >> 4) : (b & 15)] * s;
  }
};

// One block per 128x128 tile: amax, scale, codes.
template <typename Src>
__global__ void quantize_block128_kernel(Src src, int rows, int cols, uint8_t* q, float* s, int s_stride) {
  const int cb = blockIdx.x, rb = blockIdx.y;
  const int r0 = rb * kB, c0 = cb * kB, nr = min(kB, rows - r0), nc = min(kB, cols - c0);
  float amax = 0;
  for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) amax = fmaxf(amax, fabsf(src(r0 + i / nc, c0 + i % nc)));
  __shared__ float part[32];
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) m = fmaxf(m, part[w]);
    part[0] = fp8_block_scale(m);
    s[size_t(rb) * s_stride + cb] = part[0];
  }
  __syncthreads();
  const float sc = part[0];
  for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
    const int r = r0 + i / nc, c = c0 + i % nc;
    q[size_t(r) * cols + c] = e4m3_code(src(r, c) / sc);
  }
}

// The segment e with seg[e] <= r < seg[e + 1].
__device__ inline int segment_of(const ActSegments& sg, int r) {
  int lo = 0, hi = sg.n;
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
__device__ inline size_t act_scale_index(const ActSegments& sg, int KB, int r, int kb) {
  if (!sg.seg) return size_t(kb) * sg.ld + r;
  const int lo = segment_of(sg, r);
  const int s0 = sg.seg[lo], len = sg.seg[lo + 1] - s0;
  return size_t(KB) * s0 + size_t(kb) * len + (r - s0);
}

// A warp per (row, 128-column block); each lane 4 columns.
__global__ void quantize_act_kernel(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s,
                                    ActSegments sg) {
  pdl_wait();
  pdl_launch_dependents();
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int KB = (K + kB - 1) / kB;
  if (warp >= rows * KB) return;
  const int r = warp / KB, kb = warp % KB;
  if (sg.seg && r >= sg.seg[sg.n]) return;
  const int src = in_rows ? in_rows[r] : r;
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = kb * kB + lane * 4 + i;
    v[i] = (c < K && src >= 0) ? x[size_t(src) * K + c] : 0.0f;
  }
  const float sc = warp_quantize_block128(v, kb * kB, K, q + size_t(r) * K);
  if (lane == 0) s[act_scale_index(sg, KB, r, kb)] = sc;
}

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

// Per-token row kernels: thread i of a block holds values i, i + THREADS, .. of a row in
// registers (rows of up to kRowMax values), so a row is read in one wave of loads and reduced once.
constexpr int kRowThreads = 1024, kRowMax = 4096, kRouteThreads = 256, kExpertsPerRouteBlock = kRouteThreads / 32;
constexpr int kMaxTopK = 8;  // experts per token the combine stages

// RMSNorm of the row whose values this thread holds (v[j] = value threadIdx.x + j * THREADS, 0
// past H) into row[] (shared, H floats), then the 1x128 quantization of the normalized row t:
// codes q [H] and scales s[kb * ld + t] (q == null: not wanted); h_out (optional) receives the
// fp32 normalized row. Ends synchronized, row[] readable by the whole block.
template <int THREADS>
__device__ void rmsnorm_quantize_row(const float (&v)[kRowMax / THREADS], const bf16* gain, int H, float eps,
                                     float* row, uint8_t* q, float* s, int ld, int t, float* h_out) {
  constexpr int PER = kRowMax / THREADS;
  __shared__ float part[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float ss = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) ss += v[j] * v[j];
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    const float p = warp_sum(lane < THREADS / 32 ? part[lane] : 0.0f);
    if (lane == 0) part[0] = p;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / H + eps);
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < H) {
      const float n = __bfloat162float(gain[i]) * (v[j] * r);
      row[i] = n;
      if (h_out) h_out[i] = n;
    }
  }
  __syncthreads();
  const int KB = (H + kB - 1) / kB;
  for (int kb = warp; q && kb < KB; kb += THREADS / 32) {
    float w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = kb * kB + lane * 4 + i;
      w[i] = c < H ? row[c] : 0.0f;
    }
    const float sc = warp_quantize_block128(w, kb * kB, H, q);
    if (lane == 0) s[size_t(kb) * ld + t] = sc;
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

__global__ void __launch_bounds__(kRowThreads) rmsnorm_quant_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                    uint8_t* q, float* s, int ld, float* h_out) {
  extern __shared__ float row[];
  pdl_wait();
  pdl_launch_dependents();
  const int t = blockIdx.x;
  float v[kRowMax / kRowThreads];
  load_row<kRowThreads>(x + size_t(t) * H, H, v);
  rmsnorm_quantize_row<kRowThreads>(v, gain, H, eps, row, q + size_t(t) * H, s, ld, t,
                                    h_out ? h_out + size_t(t) * H : nullptr);
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
  __shared__ bool last;
  const int t = blockIdx.x, rb = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int e = rb * kExpertsPerRouteBlock + warp;
  // The warp's router row is a weight: into registers before pdl_wait, while the kernel before
  // this one (the o-projection) is still finishing.
  constexpr int kW4 = kRowMax / 4 / 32;
  float4 wr[kW4];
  const bool regs = H % 4 == 0 && e < E;
  const float4* w4 = reinterpret_cast<const float4*>(router + size_t(regs ? e : 0) * H);
#pragma unroll
  for (int j = 0; j < kW4; ++j) {
    const int i = lane + 32 * j;
    wr[j] = regs && i < H / 4 ? __ldg(w4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  pdl_wait();
  pdl_launch_dependents();
  float v[kRowMax / kRouteThreads];
  load_row<kRouteThreads>(x + size_t(t) * H, H, v);
  const bool first = rb == 0;
  rmsnorm_quantize_row<kRouteThreads>(v, gain, H, eps, row, first ? q + size_t(t) * H : nullptr, s, ld, t,
                                      first && h_out ? h_out + size_t(t) * H : nullptr);
  if (e < E) {
    float l;
    if (regs) {  // warp_dot_f32's order of sums, from the registers
      const float4* x4 = reinterpret_cast<const float4*>(row);
      float acc = 0;
#pragma unroll
      for (int j = 0; j < kW4; ++j) {
        const int i = lane + 32 * j;
        if (i < H / 4) {
          const float4 a = wr[j], b = x4[i];
          acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
      }
      l = warp_sum(acc);
    } else {
      l = warp_dot_f32(router + size_t(e) * H, row, H);
    }
    if (lane == 0) logits[size_t(t) * E + e] = l + __bfloat162float(router_bias[e]);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counter[t], 1) == int(gridDim.y) - 1;
    if (last) counter[t] = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  float* lg = row + ((H + 3) & ~3);
  for (int i = threadIdx.x; i < E; i += blockDim.x) lg[i] = __ldcg(logits + size_t(t) * E + i);
  __syncthreads();
  if (warp == 0) warp_topk_softmax(lg, E, k, idx + size_t(t) * k, w + size_t(t) * k);
  // The last token to finish sorts every token's choices by expert (counter[T], reset likewise);
  // with one token (a batch-1 step) that is this block, without a second round trip.
  if (gridDim.x > 1) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      last = atomicAdd(&counter[gridDim.x], 1) == int(gridDim.x) - 1;
      if (last) counter[gridDim.x] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
  } else {
    __syncthreads();  // warp 0's idx and w, visible to the block
  }
  moe_sort_block(idx, int(gridDim.x) * k, k, E, sorted.seg, sorted.row_token, sorted.pair_row, sorted.active,
                 reinterpret_cast<int*>(row));
}

// Token blockIdx.x: x[t] += sum_j w[t][j] * (y[pair_row[t][j]] + b2[idx[t][j]]) (the MoE combine),
// then the RMSNorm of the new x[t] with `gain` (the next layer's attention norm or the final
// norm), quantized for the next GEMM.
__global__ void __launch_bounds__(kRowThreads) moe_combine_norm_kernel(float* x, const float* y,
                                                                       const int32_t* pair_row, const float* w,
                                                                       const int32_t* idx, const bf16* b2, int k, int H,
                                                                       const bf16* gain, float eps, uint8_t* q,
                                                                       float* s, int ld) {
  extern __shared__ float row[];
  const int t = blockIdx.x;
  // The token's choices and weights (the route kernel's) and its residual row (the o-projection's)
  // were written at least three kernels back, and every kernel between waits before it releases
  // its dependents: read before the wait, through L2. Only y comes from the kernel before.
  // (In shared memory, not registers: a 1024-thread block at 64 registers a thread would need a
  // whole SM to itself and could not start beside the GEMM before it.)
  __shared__ int rows[kMaxTopK];
  __shared__ float wt[kMaxTopK];
  if (int(threadIdx.x) < k) {
    rows[threadIdx.x] = __ldcg(pair_row + t * k + threadIdx.x);
    wt[threadIdx.x] = __ldcg(w + t * k + threadIdx.x);
  }
  float v[kRowMax / kRowThreads];
#pragma unroll
  for (int j = 0; j < kRowMax / kRowThreads; ++j) {
    const int i = threadIdx.x + j * kRowThreads;
    v[j] = i < H ? __ldcg(x + size_t(t) * H + i) : 0.0f;
  }
  __syncthreads();
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int j = 0; j < kRowMax / kRowThreads; ++j) {
    const int i = threadIdx.x + j * kRowThreads;
    if (i >= H) continue;
    float acc = 0;
    for (int c = 0; c < k; ++c) {
      float yv = y[size_t(rows[c]) * H + i];
      if (b2) yv += __bfloat162float(b2[size_t(idx[t * k + c]) * H + i]);
      acc += wt[c] * yv;
    }
    v[j] = v[j] + acc;
    x[size_t(t) * H + i] = v[j];
  }
  rmsnorm_quantize_row<kRowThreads>(v, gain, H, eps, row, q + size_t(t) * H, s, ld, t, nullptr);
}

__device__ inline void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

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
__host__ __device__ inline size_t skinny_smem_bytes(int NT, int R, int K) {
  return skinny_stage_bytes(R, K) + size_t(kSkinnyWarps) * skinny_stages(NT) * kRingStage;
}

// Rows r in [s0, s1) with row_live[r] >= 0 (block-wide, uniform).
__device__ inline int live_rows(const int32_t* row_live, int s0, int s1) {
  int live = 0;
  for (int r0 = s0; r0 < s1; r0 += blockDim.x) {
    const int r = r0 + int(threadIdx.x);
    live += __syncthreads_count(r < s1 && row_live[r] >= 0);
  }
  return live;
}

// Block: 8 warps = (8 / ks) tiles of 16 weight rows x ks K-splits (a tile's ks partial sums are
// added in a fixed order through shared memory, so results do not depend on timing; ks = 1: each
// warp owns a tile over the whole K and writes it directly). blockIdx.y = segment. Each pass
// covers 8 * NT activation rows, staged with their scales in shared memory by the whole block
// (one round trip). Each warp streams its weights through a ring of S stages with cp.async
// (S - 1 blocks of 2 KB in flight per warp, no registers held); every thread copies and later
// reads back only its own 64 bytes of a stage, so the ring needs no synchronization beyond
// cp.async.wait_group. A dense GEMM fills its ring before pdl_wait, i.e. while the kernel before
// it is still finishing.
// R: activation rows staged per pass (compile time: 8 NT, or 1 for a batch-1 step, which leaves
// shared memory and, with MINB = 3, registers for a third block per SM).
template <int NT, int R, int MINB>
__global__ void __launch_bounds__(kSkinnyWarps * 32, MINB) fp8_skinny_kernel(const uint8_t* __restrict__ W, const float* __restrict__ ws,
                                                         int ws_stride, const bf16* __restrict__ bias,
                                                         const uint8_t* x, const float* xs,
                                                         ActSegments sg, float* y, int y_ld,
                                                         bool accumulate, int N, int K, int ks) {
  constexpr int S = skinny_stages(NT);
  __shared__ float red[kSkinnyWarps][NT][4][32];
  extern __shared__ __align__(16) uint8_t stage[];  // [8 NT][x_stride] codes, [8 NT][KB] scales, then the rings
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int tile = warp / ks, split = warp % ks, tiles_per_block = kSkinnyWarps / ks;
  const bool grouped = sg.seg != nullptr;
  int e = 0;
  if (grouped) {  // the expert comes from the routing kernels
    if (!sg.routed_early) pdl_wait();
    e = sg.active ? __ldcg(sg.active + blockIdx.y) : blockIdx.y;
  }
  const int n0 = (blockIdx.x * tiles_per_block + tile) * 16;
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
  if (!grouped || sg.routed_early) pdl_wait();
  pdl_launch_dependents();
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
          mma_e4m3(part[t], lo0.x, hi0.x, lo0.y, hi0.y, b0.x, b0.y);
          mma_e4m3(part[t], lo0.z, hi0.z, lo0.w, hi0.w, b0.z, b0.w);
          mma_e4m3(part[t], lo1.x, hi1.x, lo1.y, hi1.y, b1.x, b1.y);
          mma_e4m3(part[t], lo1.z, hi1.z, lo1.w, hi1.w, b1.z, b1.w);
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

// Counting sort of (token, choice) pairs by expert; each expert's run padded to a multiple of 4.
__global__ void moe_sort_kernel(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                                int32_t* pair_row, int32_t* active) {
  extern __shared__ int sh[];
  pdl_wait();
  pdl_launch_dependents();
  moe_sort_block(idx, P, k, E, seg, row_token, pair_row, active, sh);
}

// A warp per (row, 128-column block of I): clamped SwiGLU of the row's interleaved (gate, up)
// pairs (+ b1 of the row's expert when given) and the 1x128 quantization of the result.
__global__ void moe_swiglu_quant_kernel(const float* t, const bf16* b1, ActSegments sg, int rows, int I, float alpha,
                                        float limit, uint8_t* q, float* s) {
  pdl_wait();
  pdl_launch_dependents();
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int KB = (I + kB - 1) / kB;
  if (warp >= rows * KB) return;
  const int r = warp / KB, kb = warp % KB;
  if (r >= sg.seg[sg.n]) return;
  const bf16* b = b1 ? b1 + size_t(segment_of(sg, r)) * 2 * I : nullptr;
  float v[4];
  swiglu_block4(t + size_t(r) * 2 * I, kb, I, alpha, limit, v, b);
  const float sc = warp_quantize_block128(v, kb * kB, I, q + size_t(r) * I);
  if (lane == 0) s[act_scale_index(sg, KB, r, kb)] = sc;
}

}  // namespace

void quantize_bf16_block128(const bf16* w, int rows, int cols, uint8_t* q, float* s, int s_stride, cudaStream_t st) {
  dim3 grid((cols + kB - 1) / kB, (rows + kB - 1) / kB);
  quantize_block128_kernel<<<grid, 256, 0, st>>>(Bf16Source{w, cols}, rows, cols, q, s, s_stride);
  check_launch();
}

void quantize_mxfp4_block128(const uint8_t* blocks, const uint8_t* e8m0, int rows, int cols, uint8_t* q, float* s,
                             int s_stride, cudaStream_t st) {
  if (cols % 32) fail_plain("quantize_mxfp4_block128: columns must be a multiple of 32");
  dim3 grid((cols + kB - 1) / kB, (rows + kB - 1) / kB);
  quantize_block128_kernel<<<grid, 256, 0, st>>>(Mxfp4Source{blocks, e8m0, cols}, rows, cols, q, s, s_stride);
  check_launch();
}

void check_row(int H, const char* what) {
  if (H > kRowMax)
    fail_plain(std::string(what) + ": rows of more than " + std::to_string(kRowMax) +
               " values are not supported (got " + std::to_string(H) + ")");
}

void rmsnorm_quantize(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                      float* h_out, cudaStream_t st) {
  if (T == 0) return;
  check_row(H, "rmsnorm_quantize");
  launch_pdl("norm", rmsnorm_quant_kernel, T, kRowThreads, H * sizeof(float), st, x, gain, H, eps, q, s, ld, h_out);
}

void moe_route(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld, float* h_out,
               const float* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st) {
  if (T == 0) return;
  if (k > 16 || k > E) fail_plain("moe_route: at most 16 experts per token, and no more than there are");
  check_row(H, "moe_route");
  const size_t smem = std::max(size_t((H + 3) & ~3) + E, size_t(3 * E + 1)) * sizeof(float);
  const dim3 grid(unsigned(T), unsigned((E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock));
  launch_pdl("route", moe_route_kernel, grid, kRouteThreads, smem, st, x, gain, H, eps, q, s, ld, h_out, router,
             router_bias, E, k, logits, counters, idx, w, sorted);
}

void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st) {
  if (T == 0) return;
  check_row(H, "moe_combine_norm");
  if (k > kMaxTopK) fail_plain("moe_combine_norm: at most " + std::to_string(kMaxTopK) + " experts per token");
  launch_pdl("norm", moe_combine_norm_kernel, T, kRowThreads, H * sizeof(float), st, x, y, pair_row, w, idx, b2, k, H, gain,
             eps, q, s, ld);
}

void quantize_act_1x128(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s, ActSegments sg,
                        cudaStream_t st) {
  if (rows == 0) return;
  const size_t warps = size_t(rows) * ((K + kB - 1) / kB);
  launch_pdl("quant", quantize_act_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, st, x, in_rows, rows, K, q, s, sg);
}

void fp8_gemm_skinny(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                     const float* xs, ActSegments sg, float* y, int y_ld, bool accumulate, int N, int K,
                     int rows_hint, cudaStream_t st) {
  if (K % 16) fail_plain("fp8_gemm_skinny: K must be a multiple of 16 (got " + std::to_string(K) + ")");
  if (!sg.seg && sg.rows == 0) return;
  // K-splits per 16-row tile: the fewest that give every SM a block (a block's warps keep 3-5
  // weight blocks of 2 KB each in flight, enough to stream at full rate; more splits only add
  // waves and reductions), never more splits than 128-blocks.
  const int segments = !sg.seg ? 1 : sg.active ? sg.active_max : sg.n, row_tiles = (N + 15) / 16;
  const int KB = (K + kB - 1) / kB;
  const int sms = sm_count();
  auto blocks = [&](int k) { return size_t(row_tiles * k + kSkinnyWarps - 1) / kSkinnyWarps * segments; };
  constexpr int kMaxStage = 200 * 1024;
  static std::once_flag once;  // set outside any graph capture's dependence on it: once, for the largest stage
  std::call_once(once, [] {
    for (auto k : {fp8_skinny_kernel<1, 1, 3>, fp8_skinny_kernel<1, 8, 2>, fp8_skinny_kernel<2, 16, 1>,
                   fp8_skinny_kernel<4, 32, 1>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStage));
  });
  static const bool fewest = [] {  // OSPREY_SKINNY_SPLITS=fewest: the previous split rule (measuring)
    const char* v = std::getenv("OSPREY_SKINNY_SPLITS");
    return v && std::string(v) == "fewest";
  }();
  // OSPREY_SKINNY_ONE_ROW (measuring): 0 never runs the one-row tile, "all" runs it for every
  // one-row GEMM; by default only for those whose grid is one wave of it (the long unembedding
  // keeps the 8-row tile at 2 blocks/SM: under ncu 170 us with it, 188 us with the one-row tile).
  static const int one_row = [] {
    const char* v = std::getenv("OSPREY_SKINNY_ONE_ROW");
    return !v ? 1 : std::string(v) == "0" ? 0 : std::string(v) == "all" ? 2 : 1;
  }();
  // K-splits per 16-row tile: the fewest that give every SM a block; then more while every block
  // is still resident at once (one wave): the bytes in flight, i.e. the warps streaming at once,
  // set a decode GEMM's speed.
  auto run = [&](auto kernel, int NT, int R) {
    const size_t smem = skinny_smem_bytes(NT, R, K);
    if (smem > kMaxStage) fail_plain("fp8_gemm_skinny: K = " + std::to_string(K) + " is too long to stage");
    int ks = 1;
    while (ks < kSkinnyWarps && blocks(ks) < size_t(sms) && ks * 2 <= KB) ks *= 2;
    if (!fewest) {
      const int per_sm = resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), kSkinnyWarps * 32, smem);
      while (ks < kSkinnyWarps && ks * 2 <= KB && blocks(ks * 2) <= size_t(per_sm) * sms) ks *= 2;
    }
    const int tiles_per_block = kSkinnyWarps / ks;
    const dim3 grid(unsigned((row_tiles + tiles_per_block - 1) / tiles_per_block), unsigned(segments));
    launch_pdl("gemm", kernel, grid, kSkinnyWarps * 32, smem, st, W, ws, ws_stride, bias, x, xs, sg, y, y_ld,
               accumulate, N, K, ks);
  };
  // Rows a launch can have per pass: a dense matrix's rows; a segment's bound when known.
  const int rows_max = !sg.seg ? sg.rows : sg.seg_rows_max > 0 ? sg.seg_rows_max : 32;
  const bool one_wave = blocks(1) <= size_t(3) * sms;  // the one-row tile runs 3 blocks per SM
  if (rows_hint <= 8 && rows_max == 1 && (one_row == 2 || (one_row == 1 && one_wave)))
    run(fp8_skinny_kernel<1, 1, 3>, 1, 1);
  else if (rows_hint <= 8) run(fp8_skinny_kernel<1, 8, 2>, 1, 8);
  else if (rows_hint <= 16) run(fp8_skinny_kernel<2, 16, 1>, 2, 16);
  else run(fp8_skinny_kernel<4, 32, 1>, 4, 32);
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  launch_pdl("sort", moe_sort_kernel, 1, 1024, (3 * E + 1) * sizeof(int), st, idx, T * k, k, E, seg, row_token, pair_row,
             active);
}

void moe_swiglu_quantize(const float* t, const bf16* b1, ActSegments sg, int rows, int I, float alpha, float limit,
                         uint8_t* q, float* s, cudaStream_t st) {
  if (rows == 0) return;
  const size_t warps = size_t(rows) * ((I + kB - 1) / kB);
  launch_pdl("swiglu", moe_swiglu_quant_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, st, t, b1, sg, rows, I, alpha, limit,
             q, s);
}

}  // namespace osprey::cuda
