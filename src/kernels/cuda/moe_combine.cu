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

namespace osprey::cuda {

namespace {

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
  const bf16* b = b1 ? b1 + size_t(segment_of(sg, r)) * 2 * I : nullptr;
  float v[4];
  swiglu_block4(t + size_t(r) * 2 * I, kb, I, alpha, limit, v, b);
  const float sc = warp_quantize_block128(v, kb * kB, I, q + size_t(r) * I);
  if (lane == 0) s[act_scale_index(sg, KB, r, kb)] = sc;
}

}  // namespace

void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st) {
  if (T == 0) return;
  check_row(H, "moe_combine_norm");
  if (k > kMaxTopK) fail_plain("moe_combine_norm: at most " + std::to_string(kMaxTopK) + " experts per token");
  launch_pdl("norm", moe_combine_norm_kernel, T, kRowThreads, H * sizeof(float), st, x, y, pair_row, w, idx, b2, k, H, gain,
             eps, q, s, ld);
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
