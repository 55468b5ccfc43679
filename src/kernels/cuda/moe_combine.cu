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
// warp_rmsnorm_quantize_row<kRowThreads> gives the block kernel's norm sums, bit for bit.
constexpr int kCombineRowWarps = 8;
__global__ void __launch_bounds__(32 * kCombineRowWarps) moe_combine_norm_rows_kernel(
    float* __restrict__ x, const float* __restrict__ y, const int32_t* pair_row, const float* w, const int32_t* idx,
    const bf16* b2, int T, int k,
    int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld, float* h_out) {
  extern __shared__ float sm[];  // [kCombineRowWarps][Hp]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.x * kCombineRowWarps + warp;
  const int Hp = (H + 3) & ~3;
  float* row = sm + size_t(warp) * Hp;
  pdl_wait();
  pdl_launch_dependents();
  if (t >= T) return;
  int rows[kMaxTopK];
  float wt[kMaxTopK];
  const bf16* br[kMaxTopK];
#pragma unroll
  for (int c = 0; c < kMaxTopK; ++c) {
    rows[c] = c < k ? __ldcg(pair_row + t * k + c) : 0;
    wt[c] = c < k ? __ldcg(w + t * k + c) : 0.0f;
    br[c] = c < k && b2 ? b2 + size_t(__ldcg(idx + t * k + c)) * H : nullptr;
  }
  float* xt = x + size_t(t) * H;
  auto combine = [&](int i) {  // moe_combine_norm_body's value at column i
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxTopK; ++c) {
      if (c >= k) break;
      float yv = __ldcg(y + size_t(rows[c]) * H + i);
      if (br[c]) yv += __bfloat162float(br[c][i]);
      acc += wt[c] * yv;
    }
    return acc;
  };
  if (H % 4 == 0) {
    for (int i4 = lane; i4 < H / 4; i4 += 32) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int c = 0; c < kMaxTopK; ++c) {
        if (c >= k) break;
        float4 yv = __ldcg(reinterpret_cast<const float4*>(y + size_t(rows[c]) * H) + i4);
        if (br[c]) {
          const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(br[c] + 4 * i4);
          const __nv_bfloat162 b01 = b[0], b23 = b[1];
          yv.x += __low2float(b01), yv.y += __high2float(b01), yv.z += __low2float(b23), yv.w += __high2float(b23);
        }
        acc.x += wt[c] * yv.x, acc.y += wt[c] * yv.y, acc.z += wt[c] * yv.z, acc.w += wt[c] * yv.w;
      }
      float4 v = __ldcg(reinterpret_cast<const float4*>(xt) + i4);
      v.x = v.x + acc.x, v.y = v.y + acc.y, v.z = v.z + acc.z, v.w = v.w + acc.w;
      reinterpret_cast<float4*>(xt)[i4] = v;
      reinterpret_cast<float4*>(row)[i4] = v;
    }
  } else {
    for (int i = lane; i < H; i += 32) {
      const float v = __ldcg(xt + i) + combine(i);
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
__global__ void moe_swiglu_quant_kernel(const float* t, const bf16* b1, ActSegments sg, int rows, int I, float alpha,
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

}  // namespace

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
    static const bool attr = [] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_combine_norm_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kCombineRowWarps * kRowMax * sizeof(float))));
      return true;
    }();
    (void)attr;
    launch_pdl("norm", moe_combine_norm_rows_kernel, unsigned((T + kCombineRowWarps - 1) / kCombineRowWarps),
               32 * kCombineRowWarps, smem, st, x, y, pair_row, w, idx, b2, T, k, H, gain, eps, q, s, ld, h_out);
    return;
  }
  launch_pdl("norm", moe_combine_norm_kernel, T, kRowThreads, H * sizeof(float), st, x, y, pair_row, w, idx, b2, k, H, gain,
             eps, q, s, ld, h_out);
}

void moe_swiglu_quantize(const float* t, const bf16* b1, ActScales by_expert, int rows, int I, float alpha, float limit,
                         uint8_t* q, float* s, cudaStream_t st) {
  if (rows == 0) return;
  if (!by_expert.seg) fail_plain("moe_swiglu_quantize: the scales are laid out by expert");
  const ActSegments sg = act_segments(by_expert, rows);
  const size_t warps = size_t(rows) * ((I + kB - 1) / kB);
  launch_pdl("swiglu", moe_swiglu_quant_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, st, t, b1, sg, rows, I, alpha, limit,
             q, s);
}

}  // namespace osprey::cuda
