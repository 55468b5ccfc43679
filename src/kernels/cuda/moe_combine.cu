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
  moe_combine_norm_body<kRowThreads>(x, y, pair_row, w, idx, b2, k, H, gain, eps, q, s, ld, h_out, VBlock::this_block(),
                                     PdlSync{});
}

// The same for prompt chunks: a warp per token (8 a block), no block barriers. The combine's
// values are computed as the block kernel computes them (elementwise, the same expression), then
// warp_rmsnorm_quantize_row<kRowThreads> gives the block kernel's norm sums, bit for bit. KT: the
// choices per token when fixed at compile time (4, gpt-oss), 0 for k from the argument; a lane
// loads kChunks 16-byte pieces of every choice's row before it sums any (memory-level
// parallelism: the loop's stores would otherwise hold the next loads back).
constexpr int kCombineRowWarps = 8, kChunks = 2;
template <int KT>
__global__ void __launch_bounds__(32 * kCombineRowWarps) moe_combine_norm_rows_kernel(
    float* __restrict__ x, const float* __restrict__ y, const int32_t* pair_row, const float* w, const int32_t* idx,
    const bf16* b2, int T, int k_arg, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld, float* h_out) {
  constexpr int KM = KT > 0 ? KT : kMaxTopK;
  const int k = KT > 0 ? KT : k_arg;
  extern __shared__ float sm[];  // [kCombineRowWarps][Hp]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.x * kCombineRowWarps + warp;
  const int Hp = (H + 3) & ~3;
  float* row = sm + size_t(warp) * Hp;
  pdl_wait();
  pdl_launch_dependents();
  if (t >= T) return;
  int rows[KM];
  float wt[KM];
  const bf16* br[KM];
#pragma unroll
  for (int c = 0; c < KM; ++c) {
    rows[c] = c < k ? __ldcg(pair_row + t * k + c) : 0;
    wt[c] = c < k ? __ldcg(w + t * k + c) : 0.0f;
    br[c] = c < k && b2 ? b2 + size_t(__ldcg(idx + t * k + c)) * H : nullptr;
  }
  float* xt = x + size_t(t) * H;
  if (H % 4 == 0) {
    const int n4 = H / 4;
    for (int base = lane; base < n4; base += 32 * kChunks) {
      float4 yv[kChunks][KM], xv[kChunks];
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int i4 = base + 32 * u;
        if (i4 >= n4) continue;
        xv[u] = __ldcg(reinterpret_cast<const float4*>(xt) + i4);
#pragma unroll
        for (int c = 0; c < KM; ++c)
          if (c < k) yv[u][c] = __ldcg(reinterpret_cast<const float4*>(y + size_t(rows[c]) * H) + i4);
      }
#pragma unroll
      for (int u = 0; u < kChunks; ++u) {
        const int i4 = base + 32 * u;
        if (i4 >= n4) continue;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int c = 0; c < KM; ++c) {
          if (c >= k) break;
          float4 v = yv[u][c];
          if (br[c]) {
            const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(br[c] + 4 * i4);
            const __nv_bfloat162 b01 = b[0], b23 = b[1];
            v.x += __low2float(b01), v.y += __high2float(b01), v.z += __low2float(b23), v.w += __high2float(b23);
          }
          acc.x += wt[c] * v.x, acc.y += wt[c] * v.y, acc.z += wt[c] * v.z, acc.w += wt[c] * v.w;
        }
        float4 o = xv[u];
        o.x = o.x + acc.x, o.y = o.y + acc.y, o.z = o.z + acc.z, o.w = o.w + acc.w;
        reinterpret_cast<float4*>(xt)[i4] = o;
        reinterpret_cast<float4*>(row)[i4] = o;
      }
    }
  } else {
    for (int i = lane; i < H; i += 32) {
      float acc = 0.0f;
#pragma unroll
      for (int c = 0; c < KM; ++c) {
        if (c >= k) break;
        float yv = __ldcg(y + size_t(rows[c]) * H + i);
        if (br[c]) yv += __bfloat162float(br[c][i]);
        acc += wt[c] * yv;
      }
      const float v = __ldcg(xt + i) + acc;
      xt[i] = v;
      row[i] = v;
    }
  }
  __syncwarp();
  warp_rmsnorm_quantize_row<kRowThreads>(row, gain, H, eps, q + size_t(t) * H, s, ld, t,
                                         h_out ? h_out + size_t(t) * H : nullptr);
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
// its PDL wait; above, prompt chunks take the warp-per-token kernel (the same bits).
constexpr int kCombineRowsAbove = 256;

void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st, float* h_out) {
  if (T == 0) return;
  check_row(H, "moe_combine_norm");
  if (k > kMaxTopK) fail_plain("moe_combine_norm: at most " + std::to_string(kMaxTopK) + " experts per token");
  if (T > kCombineRowsAbove) {
    const size_t smem = size_t(kCombineRowWarps) * ((H + 3) & ~3) * sizeof(float);
    auto* kernel = k == 4 ? moe_combine_norm_rows_kernel<4> : moe_combine_norm_rows_kernel<0>;
    static const bool attr = [] {
      for (auto* f : {moe_combine_norm_rows_kernel<4>, moe_combine_norm_rows_kernel<0>})
        OSPREY_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kCombineRowWarps * kRowMax * sizeof(float))));
      return true;
    }();
    (void)attr;
    launch_pdl("norm", kernel, unsigned((T + kCombineRowWarps - 1) / kCombineRowWarps), 32 * kCombineRowWarps, smem, st,
               x, y, pair_row, w, idx, b2, T, k, H, gain, eps, q, s, ld, h_out);
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
