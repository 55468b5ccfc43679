// Matrix-vector kernels for decode steps (one token). CPU twins: cpu::f32_bf16w_matmul and
// cpu::f32_mxfp4w_matmul with T = 1.
#pragma once
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// y[n] (+)= W[n,:] . x + bias[n]         W bf16 [N][K], x fp32 [K], bias bf16 [N] or null
void gemv_bf16(const bf16* W, const float* x, const bf16* bias, float* y, int N, int K, bool accumulate, cudaStream_t s);
// y[n] = W[n,:] . x + bias[n]            W fp32 [N][K]
void gemv_f32(const float* W, const float* x, const bf16* bias, float* y, int N, int K, cudaStream_t s);
// For j < k: e = idx[j] (device), y[j] = W_e . x[j * x_stride ..] + bias_e; MXFP4 weights as
// stored: blocks [E][N][K/32][16], scales [E][N][K/32], bias [E][N] bf16; y [k][N].
void gemv_mxfp4_experts(const uint8_t* blocks, const uint8_t* scales, const bf16* bias, const int32_t* idx, int k,
                        const float* x, size_t x_stride, float* y, int N, int K, cudaStream_t s);
// x[i] += sum_j w[j] * y[j][i]            y [k][H], w [k] (device)
void moe_combine(float* x, const float* y, const float* w, int k, int H, cudaStream_t s);

}  // namespace osprey::cuda
