// FP8 kernels (fp8.cuh). The skinny GEMM puts 16 weight rows on the M side of an
// mma.m16n8k32 e4m3 and up to 8 activation rows (tokens) on the N side, so a decode step reads
// each weight byte once and the tensor cores do the arithmetic. Because a dot product may visit
// k in any order as long as both operands agree, each thread loads 16 contiguous bytes of its
// weight row and of its token row and feeds them to the mma's k slots in the same order:
// 16-byte coalesced loads, no shared memory, no shuffles.
#include <cfloat>
#include <cuda_fp8.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"

namespace osprey::cuda {

namespace {

constexpr int kB = 128;
void check_launch() { OSPREY_CUDA_CHECK(cudaGetLastError()); }
__host__ __device__ inline int round4(int n) { return (n + 3) / 4 * 4; }

__device__ inline uint8_t e4m3(float v) { return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)); }
__device__ inline float block_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }

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
    part[0] = block_scale(m);
    s[size_t(rb) * s_stride + cb] = part[0];
  }
  __syncthreads();
  const float sc = part[0];
  for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
    const int r = r0 + i / nc, c = c0 + i % nc;
    q[size_t(r) * cols + c] = e4m3(src(r, c) / sc);
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
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int KB = (K + kB - 1) / kB;
  if (warp >= rows * KB) return;
  const int r = warp / KB, kb = warp % KB;
  if (sg.seg && r >= sg.seg[sg.n]) return;
  const int src = in_rows ? in_rows[r] : r;
  float v[4];
  float amax = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = kb * kB + lane * 4 + i;
    v[i] = (c < K && src >= 0) ? x[size_t(src) * K + c] : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  const float sc = block_scale(warp_max(amax));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = kb * kB + lane * 4 + i;
    if (c < K) q[size_t(r) * K + c] = e4m3(v[i] / sc);
  }
  if (lane == 0) s[act_scale_index(sg, KB, r, kb)] = sc;
}

// RMSNorm of row blockIdx.x (the reduction of rmsnorm_to_f32, so the values are identical), then
// 1x128 quantization of the normalized row (dense scale layout, ld); optionally the fp32 row too.
__global__ void rmsnorm_quant_kernel(const float* x, const bf16* gain, int H, float eps, uint8_t* q, float* s, int ld,
                                     float* h_out) {
  extern __shared__ float row[];
  __shared__ float part[32];
  const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* xt = x + size_t(t) * H;
  float ss = 0;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xt[i] * xt[i];
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    const float v = warp_sum(threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f);
    if (threadIdx.x == 0) part[0] = v;
  }
  __syncthreads();
  const float r = rsqrtf(part[0] / H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = __bfloat162float(gain[i]) * (xt[i] * r);
    row[i] = v;
    if (h_out) h_out[size_t(t) * H + i] = v;
  }
  __syncthreads();
  const int KB = (H + kB - 1) / kB;
  for (int kb = warp; kb < KB; kb += blockDim.x >> 5) {
    float v[4], amax = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = kb * kB + lane * 4 + i;
      v[i] = c < H ? row[c] : 0.0f;
      amax = fmaxf(amax, fabsf(v[i]));
    }
    const float sc = block_scale(warp_max(amax));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = kb * kB + lane * 4 + i;
      if (c < H) q[size_t(t) * H + c] = e4m3(v[i] / sc);
    }
    if (lane == 0) s[size_t(kb) * ld + t] = sc;
  }
}

__device__ inline void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ inline uint4 load16(const uint8_t* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

constexpr int kSkinnyWarps = 8;

// Block: 16 weight rows, its 8 warps splitting K by 128-blocks (summed in a fixed order through
// shared memory, so results do not depend on timing); blockIdx.y = segment. Each pass covers NT
// tiles of 8 rows. Per 128-block a thread has 4 weight loads and 2 per tile in flight.
template <int NT>
__global__ void __launch_bounds__(kSkinnyWarps * 32) fp8_skinny_kernel(const uint8_t* __restrict__ W, const float* __restrict__ ws,
                                                         int ws_stride, const bf16* __restrict__ bias,
                                                         const uint8_t* __restrict__ x, const float* __restrict__ xs,
                                                         ActSegments sg, float* __restrict__ y, int y_ld,
                                                         bool accumulate, int N, int K) {
  __shared__ float red[kSkinnyWarps][NT][4][32];
  const int e = sg.active ? sg.active[blockIdx.y] : blockIdx.y;
  if (e < 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int s0 = sg.seg ? sg.seg[e] : 0, s1 = sg.seg ? sg.seg[e + 1] : sg.rows;
  const int n0 = blockIdx.x * 16;
  if (s1 <= s0 || n0 >= N) return;  // uniform over the block
  const int KB = (K + kB - 1) / kB, per_warp = (KB + kSkinnyWarps - 1) / kSkinnyWarps;
  const int kb0 = min(KB, warp * per_warp), kb1 = min(KB, kb0 + per_warp);
  const int sld = sg.seg ? s1 - s0 : sg.ld;  // scales of this segment: [KB][sld] at sbase
  const size_t sbase = sg.seg ? size_t(KB) * s0 : 0;
  const int ws_rows = round4((N + kB - 1) / kB);
  const uint8_t* We = W + size_t(e) * N * K;
  const float* wse = ws + size_t(e) * ws_rows * ws_stride + size_t(n0 / kB) * ws_stride;
  const bf16* be = bias ? bias + size_t(e) * N : nullptr;
  const bool ok_lo = n0 + g < N, ok_hi = n0 + g + 8 < N;
  const uint8_t* wlo = We + size_t(ok_lo ? n0 + g : 0) * K + c * 16;
  const uint8_t* whi = We + size_t(ok_hi ? n0 + g + 8 : 0) * K + c * 16;
  const float b_lo = (warp == 0 && be && ok_lo) ? __bfloat162float(be[n0 + g]) : 0.0f;
  const float b_hi = (warp == 0 && be && ok_hi) ? __bfloat162float(be[n0 + g + 8]) : 0.0f;
  for (int base = s0; base < s1; base += 8 * NT) {
    float acc[NT][4];
    const uint8_t* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = b_lo;  // the accumulators start from the bias (warp 0's share)
      acc[t][2] = acc[t][3] = b_hi;
      const int r = base + t * 8 + g;
      xok[t] = r < s1;
      xrow[t] = x + size_t(xok[t] ? r : s0) * K + c * 16;
    }
#pragma unroll 2
    for (int kb = kb0; kb < kb1; ++kb) {
      const int k0 = kb * kB;
      const bool in0 = k0 + c * 16 < K, in1 = k0 + 64 + c * 16 < K;  // K % 16 == 0: a 16-byte piece is in or out
      const uint4 alo0 = load16(wlo + k0, ok_lo && in0), ahi0 = load16(whi + k0, ok_hi && in0);
      const uint4 alo1 = load16(wlo + k0 + 64, ok_lo && in1), ahi1 = load16(whi + k0 + 64, ok_hi && in1);
      float part[NT][4];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint4 b0 = load16(xrow[t] + k0, xok[t] && in0), b1 = load16(xrow[t] + k0 + 64, xok[t] && in1);
#pragma unroll
        for (int i = 0; i < 4; ++i) part[t][i] = 0.0f;
        mma_e4m3(part[t], alo0.x, ahi0.x, alo0.y, ahi0.y, b0.x, b0.y);
        mma_e4m3(part[t], alo0.z, ahi0.z, alo0.w, ahi0.w, b0.z, b0.w);
        mma_e4m3(part[t], alo1.x, ahi1.x, alo1.y, ahi1.y, b1.x, b1.y);
        mma_e4m3(part[t], alo1.z, ahi1.z, alo1.w, ahi1.w, b1.z, b1.w);
      }
      const float w_s = wse[kb];  // fold in the two scales of this 128-block
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int r0 = base + t * 8 + 2 * c;
        const float x0 = r0 < s1 ? xs[sbase + size_t(kb) * sld + (r0 - s0)] : 0.0f;
        const float x1 = r0 + 1 < s1 ? xs[sbase + size_t(kb) * sld + (r0 + 1 - s0)] : 0.0f;
        acc[t][0] += part[t][0] * (w_s * x0);
        acc[t][1] += part[t][1] * (w_s * x1);
        acc[t][2] += part[t][2] * (w_s * x0);
        acc[t][3] += part[t][3] * (w_s * x1);
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][t][i][lane] = acc[t][i];
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int r0 = base + t * 8 + 2 * c;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float v = red[0][t][i][lane];
#pragma unroll
          for (int w = 1; w < kSkinnyWarps; ++w) v += red[w][t][i][lane];
          const int r = r0 + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
          if (r < s1 && n < N) {
            float* out = y + size_t(r) * y_ld + n;
            *out = accumulate ? *out + v : v;
          }
        }
      }
    }
    __syncthreads();
  }
}

// Counting sort of (token, choice) pairs by expert; each expert's run padded to a multiple of 4.
__global__ void moe_sort_kernel(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                                int32_t* pair_row, int32_t* active) {
  extern __shared__ int sh[];
  int *cnt = sh, *base = sh + E, *cursor = sh + 2 * E + 1;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0, cursor[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) atomicAdd(&cnt[idx[p]], 1);
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
    const int e = idx[p], r = base[e] + atomicAdd(&cursor[e], 1);
    row_token[r] = p / k;
    pair_row[p] = r;
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int r = base[e] + cnt[e]; r < base[e + 1]; ++r) row_token[r] = -1;
}

__global__ void moe_bias_swiglu_kernel(const float* t, const bf16* b1, ActSegments sg, float* a, int rows, int I,
                                       float alpha, float limit) {
  const int r = blockIdx.x;
  if (r >= sg.seg[sg.n]) return;
  const bf16* b = b1 ? b1 + size_t(segment_of(sg, r)) * 2 * I : nullptr;
  for (int i = threadIdx.x; i < I; i += blockDim.x) {
    float gt = t[size_t(r) * 2 * I + 2 * i], up = t[size_t(r) * 2 * I + 2 * i + 1];
    if (b) gt += __bfloat162float(b[2 * i]), up += __bfloat162float(b[2 * i + 1]);
    a[size_t(r) * I + i] = swiglu_clamped(gt, up, alpha, limit);
  }
}

__global__ void moe_combine_sorted_kernel(float* x, const float* y, const int32_t* pair_row, const float* w,
                                          const int32_t* idx, const bf16* b2, int k, int H) {
  const int t = blockIdx.x;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < H; i += gridDim.y * blockDim.x) {
    float s = 0;
    for (int j = 0; j < k; ++j) {
      float v = y[size_t(pair_row[t * k + j]) * H + i];
      if (b2) v += __bfloat162float(b2[size_t(idx[t * k + j]) * H + i]);
      s += w[t * k + j] * v;
    }
    x[size_t(t) * H + i] += s;
  }
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

void rmsnorm_quantize(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                      float* h_out, cudaStream_t st) {
  if (T == 0) return;
  rmsnorm_quant_kernel<<<T, 256, H * sizeof(float), st>>>(x, gain, H, eps, q, s, ld, h_out);
  check_launch();
}

void quantize_act_1x128(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s, ActSegments sg,
                        cudaStream_t st) {
  if (rows == 0) return;
  const size_t warps = size_t(rows) * ((K + kB - 1) / kB);
  quantize_act_kernel<<<unsigned((warps * 32 + 255) / 256), 256, 0, st>>>(x, in_rows, rows, K, q, s, sg);
  check_launch();
}

void fp8_gemm_skinny(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                     const float* xs, ActSegments sg, float* y, int y_ld, bool accumulate, int N, int K,
                     int rows_per_seg_max, cudaStream_t st) {
  if (K % 16) fail_plain("fp8_gemm_skinny: K must be a multiple of 16 (got " + std::to_string(K) + ")");
  if (!sg.seg && sg.rows == 0) return;
  dim3 grid(unsigned((N + 15) / 16), unsigned(!sg.seg ? 1 : sg.active ? sg.active_max : sg.n));
  if (rows_per_seg_max <= 8)
    fp8_skinny_kernel<1><<<grid, kSkinnyWarps * 32, 0, st>>>(W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K);
  else if (rows_per_seg_max <= 16)
    fp8_skinny_kernel<2><<<grid, kSkinnyWarps * 32, 0, st>>>(W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K);
  else
    fp8_skinny_kernel<4><<<grid, kSkinnyWarps * 32, 0, st>>>(W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K);
  check_launch();
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  moe_sort_kernel<<<1, 1024, (3 * E + 1) * sizeof(int), st>>>(idx, T * k, k, E, seg, row_token, pair_row, active);
  check_launch();
}

void moe_bias_swiglu(const float* t, const bf16* b1, ActSegments sg, float* a, int rows, int I, float alpha,
                     float limit, cudaStream_t st) {
  if (rows == 0) return;
  moe_bias_swiglu_kernel<<<rows, 256, 0, st>>>(t, b1, sg, a, rows, I, alpha, limit);
  check_launch();
}

void moe_combine_sorted(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                        const bf16* b2, int T, int k, int H, cudaStream_t st) {
  if (T == 0) return;
  moe_combine_sorted_kernel<<<dim3(unsigned(T), unsigned((H + 255) / 256)), 256, 0, st>>>(x, y, pair_row, w, idx, b2, k, H);
  check_launch();
}

}  // namespace osprey::cuda
