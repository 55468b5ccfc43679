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

void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st, float* h_out) {
  if (T == 0) return;
  check_row(H, "moe_combine_norm");
  if (k > kMaxTopK) fail_plain("moe_combine_norm: at most " + std::to_string(kMaxTopK) + " experts per token");
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
