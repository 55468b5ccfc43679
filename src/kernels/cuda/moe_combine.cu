// The MoE's back end (fp8.cuh): the experts' clamped SwiGLU quantized for the FP8 second GEMM,
// and the combine of the weighted expert outputs into the residual stream fused with the next
// norm. (The MXFP4 experts' SwiGLU is moe_gemm_mxfp4.cu's.)
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>
#include <cuda_fp8.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/residual_rows.cuh"

namespace osprey::cuda {

namespace {

__global__ void __launch_bounds__(kRowThreads) moe_combine_norm_kernel(float* x, const float* y,
                                                                       const int32_t* pair_row, const float* w,
                                                                       const int32_t* idx, const bf16* b2, int k, int H,
                                                                       const bf16* gain, float eps, uint8_t* q,
                                                                       float* s, int ld, float* h_out) {
  moe_combine_norm_body<kRowThreads, kRowThreads>(x, y, pair_row, w, idx, b2, k, H, gain, eps, q, s, ld, h_out, VBlock::this_block(),
                                     PdlSync{});
}

// The same for prompt chunks: a block of kCombineThreads takes kCombineTile tokens, the block
// kernel's bits (moe_combine_norm_body<kRowThreads>):
// - the combine, a token at a time by the whole block: a thread loads its float4s of the residual
//   row and of every choice's row at once (one round trip a token), adds them as the block kernel
//   does (elementwise, the same expression) and writes x and the tile's row in shared memory;
// - the norms and quantization of the tile's rows with the 1,024-thread block norm's sums
//   (tile_rmsnorm_quantize: thread i sums for virtual threads i + 256 u).
// KT: the choices per token when fixed at compile time (4, gpt-oss), 0 for k from the argument.
constexpr int kCombineTile = 8, kCombineThreads = 256;
template <int KT>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_norm_rows_kernel(
    float* __restrict__ x, const float* __restrict__ y, const int32_t* pair_row, const float* w, const int32_t* idx,
    const bf16* b2, int T, int k_arg, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld, float* h_out) {
  constexpr int KM = KT > 0 ? KT : kMaxTopK, C4 = kRowMax / kCombineThreads / 4;
  const int k = KT > 0 ? KT : k_arg;
  extern __shared__ float sm[];  // [kCombineTile][Hp]
  __shared__ float part[kCombineTile][kRowThreads / 32];
  __shared__ int rows[kCombineTile][KM];
  __shared__ float wt[kCombineTile][KM];
  __shared__ int ex[kCombineTile][KM];
  const int t0 = blockIdx.x * kCombineTile;
  const int nt = min(kCombineTile, T - t0), Hp = (H + 3) & ~3;
  pdl_wait();
  pdl_launch_dependents();
  if (int(threadIdx.x) < nt * k) {
    const int tt = threadIdx.x / k, c = threadIdx.x % k, p = (t0 + tt) * k + c;
    rows[tt][c] = __ldcg(pair_row + p);
    wt[tt][c] = __ldcg(w + p);
    ex[tt][c] = __ldcg(idx + p);
  }
  __syncthreads();
  for (int tt = 0; tt < nt; ++tt) {
    float* xt = x + size_t(t0 + tt) * H;
    float* row = sm + size_t(tt) * Hp;
    if (H % 4 == 0) {
      const int n4 = H / 4;
      float4 xv[C4], yv[C4][KM];
#pragma unroll
      for (int u = 0; u < C4; ++u) {
        const int i4 = threadIdx.x + kCombineThreads * u;
        if (i4 >= n4) continue;
        xv[u] = __ldcg(reinterpret_cast<const float4*>(xt) + i4);
#pragma unroll
        for (int c = 0; c < KM; ++c)
          if (c < k) yv[u][c] = __ldcg(reinterpret_cast<const float4*>(y + size_t(rows[tt][c]) * H) + i4);
      }
#pragma unroll
      for (int u = 0; u < C4; ++u) {
        const int i4 = threadIdx.x + kCombineThreads * u;
        if (i4 >= n4) continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int c = 0; c < KM; ++c) {
          if (c >= k) break;
          float4 v = yv[u][c];
          if (b2) {
            const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(b2 + size_t(ex[tt][c]) * H + 4 * i4);
            const __nv_bfloat162 b01 = b[0], b23 = b[1];
            v.x += __low2float(b01), v.y += __high2float(b01), v.z += __low2float(b23), v.w += __high2float(b23);
          }
          const float wc = wt[tt][c];
          acc.x += wc * v.x, acc.y += wc * v.y, acc.z += wc * v.z, acc.w += wc * v.w;
        }
        float4 o = xv[u];
        o.x = o.x + acc.x, o.y = o.y + acc.y, o.z = o.z + acc.z, o.w = o.w + acc.w;
        reinterpret_cast<float4*>(xt)[i4] = o;
        reinterpret_cast<float4*>(row)[i4] = o;
      }
    } else {
      for (int i = threadIdx.x; i < H; i += kCombineThreads) {
        float acc = 0.0f;
        for (int c = 0; c < k; ++c) {
          float yv = __ldcg(y + size_t(rows[tt][c]) * H + i);
          if (b2) yv += __bfloat162float(b2[size_t(ex[tt][c]) * H + i]);
          acc += wt[tt][c] * yv;
        }
        const float v = __ldcg(xt + i) + acc;
        xt[i] = v;
        row[i] = v;
      }
    }
  }
  __syncthreads();
  tile_rmsnorm_quantize<kCombineThreads, kRowThreads, kCombineTile>(sm, Hp, nt, gain, H, eps, q, s, ld, t0, h_out, part);
}

// A warp per (row, 128-column block of I): clamped SwiGLU of the row's interleaved (gate, up)
// pairs (+ b1 of the row's expert when given) and the 1x128 quantization of the result.
__global__ void moe_swiglu_quant_kernel(const float* t, const bf16* b1, ActScales sg, int rows, int I, float alpha,
                                        float limit, uint8_t* q, float* s) {
  pdl_wait();
  pdl_launch_dependents();
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int KB = (I + kB - 1) / kB;
  if (warp >= rows * KB) return;
  const int r = warp / KB, kb = warp % KB;
  if (r >= sg.seg[sg.experts]) return;
  const int e = segment_of(sg, r);
  const bf16* b = b1 ? b1 + size_t(e) * 2 * I : nullptr;
  float v[4];
  swiglu_block4(t + size_t(r) * 2 * I, kb, I, alpha, limit, v, b);
  const float sc = warp_quantize_block128(v, kb * kB, I, q + size_t(r) * I);
  if (lane == 0) s[act_scale_index_in(sg, KB, r, kb, e)] = sc;
}

// The same for many rows (prompt chunks): a warp per row, its segment found once, and the row's
// 128-column blocks in groups of kSwigluGroup whose loads are all issued before any is used.
constexpr int kSwigluGroup = 4;
__global__ void moe_swiglu_quant_rows_kernel(const float* __restrict__ t, const bf16* __restrict__ b1, ActScales sg,
                                             int rows, int I, float alpha, float limit, uint8_t* __restrict__ q,
                                             float* __restrict__ s) {
  pdl_wait();
  pdl_launch_dependents();
  const int r = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (r >= rows || r >= sg.seg[sg.experts]) return;
  const int KB = (I + kB - 1) / kB, e = segment_of(sg, r);
  const bf16* b = b1 ? b1 + size_t(e) * 2 * I : nullptr;
  const float* tr = t + size_t(r) * 2 * I;
  for (int kb0 = 0; kb0 < KB; kb0 += kSwigluGroup) {
    float v[kSwigluGroup][4];
#pragma unroll
    for (int g = 0; g < kSwigluGroup; ++g)
      if (kb0 + g < KB) swiglu_block4(tr, kb0 + g, I, alpha, limit, v[g], b);
#pragma unroll
    for (int g = 0; g < kSwigluGroup; ++g) {
      if (kb0 + g >= KB) break;
      const float sc = warp_quantize_block128(v[g], (kb0 + g) * kB, I, q + size_t(r) * I);
      if (lane == 0) s[act_scale_index_in(sg, KB, r, kb0 + g, e)] = sc;
    }
  }
}

}  // namespace

// Up to this many rows (decode steps), a warp per (row, block); above, a warp per row.
constexpr int kSwigluRowsAbove = 2048;

// Up to this many tokens (decode buckets), the block kernel, which reads the residual rows before
// its PDL wait; above, prompt chunks take the tiled kernel (the same bits).
constexpr int kCombineRowsAbove = 256;

void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st, float* h_out) {
  if (T == 0) return;
  check_row(H, "moe_combine_norm");
  if (k > kMaxTopK) fail_plain("moe_combine_norm: at most " + std::to_string(kMaxTopK) + " experts per token");
  if (T > kCombineRowsAbove) {
    const size_t smem = size_t(kCombineTile) * ((H + 3) & ~3) * sizeof(float);
    auto* kernel = k == 4 ? moe_combine_norm_rows_kernel<4> : moe_combine_norm_rows_kernel<0>;
    static const bool attr = [] {
      for (auto* f : {moe_combine_norm_rows_kernel<4>, moe_combine_norm_rows_kernel<0>})
        OSPREY_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kCombineTile * kRowMax * sizeof(float))));
      return true;
    }();
    (void)attr;
    launch_pdl("norm", kernel, unsigned((T + kCombineTile - 1) / kCombineTile), kCombineThreads, smem, st, x, y,
               pair_row, w, idx, b2, T, k, H, gain, eps, q, s, ld, h_out);
    return;
  }
  launch_pdl("norm", moe_combine_norm_kernel, T, kRowThreads, H * sizeof(float), st, x, y, pair_row, w, idx, b2, k, H, gain,
             eps, q, s, ld, h_out);
}

void moe_swiglu_quantize(const float* t, const bf16* b1, ActScales by_expert, int rows, int I, float alpha, float limit,
                         uint8_t* q, float* s, cudaStream_t st) {
  if (rows == 0) return;
  if (!by_expert.seg) fail_plain("moe_swiglu_quantize: the scales are laid out by expert");
  if (rows > kSwigluRowsAbove) {
    launch_pdl("swiglu", moe_swiglu_quant_rows_kernel, unsigned((size_t(rows) * 32 + 255) / 256), 256, 0, st, t, b1,
               by_expert, rows, I, alpha, limit, q, s);
    return;
  }
  const size_t warps = size_t(rows) * ((I + kB - 1) / kB);
  launch_pdl("swiglu", moe_swiglu_quant_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, st, t, b1, by_expert, rows, I,
             alpha, limit, q, s);
}

}  // namespace osprey::cuda
