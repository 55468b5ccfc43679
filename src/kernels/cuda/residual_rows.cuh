// Row bodies of the residual stream (moe_combine.cu launches the combine as its own kernel; the
// persistent decode kernel runs these as phases): internal to kernels/cuda.
#pragma once
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// Token blk.x: x[t] += sum_j w[t][j] * (y[pair_row[t][j]] + b2[idx[t][j]]) (the MoE combine),
// then the RMSNorm of the new x[t] with `gain` (the next layer's attention norm or the final
// norm), quantized for the next GEMM (and in fp32 into h_out when given). VTHREADS: the norm's
// sums in the order of a block of that many threads (rmsnorm_quantize_row).
template <int THREADS, int VTHREADS, class Sync>
__device__ inline void moe_combine_norm_body(float* x, const float* y, const int32_t* pair_row, const float* w,
                                             const int32_t* idx, const bf16* b2, int k, int H, const bf16* gain,
                                             float eps, uint8_t* q, float* s, int ld, float* h_out, VBlock blk,
                                             const Sync& sync) {
  extern __shared__ float row[];
  const int t = blk.x;
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
  float v[kRowMax / THREADS];
#pragma unroll
  for (int j = 0; j < kRowMax / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    v[j] = i < H ? __ldcg(x + size_t(t) * H + i) : 0.0f;
  }
  __syncthreads();
  sync.wait();
  sync.release();
  // acc = sum over the choices c, in order, of w_c (y_c + b2_c): each choice's values are loaded
  // together before any store (stores to x could alias them), then x is written once.
  constexpr int PER = kRowMax / THREADS;
  float acc[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) acc[j] = 0.0f;
  for (int c = 0; c < k; ++c) {
    const float* yr = y + size_t(rows[c]) * H;
    const bf16* br = b2 ? b2 + size_t(idx[t * k + c]) * H : nullptr;
    float yv[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int i = threadIdx.x + j * THREADS;
      yv[j] = i < H ? __ldcg(yr + i) : 0.0f;
      if (br && i < H) yv[j] += __bfloat162float(br[i]);
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) acc[j] += wt[c] * yv[j];
  }
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i >= H) continue;
    v[j] = v[j] + acc[j];
    x[size_t(t) * H + i] = v[j];
  }
  rmsnorm_quantize_row<THREADS, VTHREADS>(v, gain, H, eps, row, q + size_t(t) * H, s, ld, t,
                                          h_out ? h_out + size_t(t) * H : nullptr);
}

// Token blk.x: x[t] = the embedding of tokens[t] (BF16 table [vocab][H]), then the RMSNorm of it
// with `gain` quantized for the first GEMM (embedding + rmsnorm_quantize in one body); VTHREADS as
// in moe_combine_norm_body.
template <int THREADS, int VTHREADS, class Sync>
__device__ inline void embed_norm_body(const bf16* table, const int32_t* tokens, float* x, int H, const bf16* gain,
                                       float eps, uint8_t* q, float* s, int ld, VBlock blk, const Sync& sync) {
  extern __shared__ float row[];
  const int t = blk.x;
  sync.wait();
  sync.release();
  const bf16* e = table + size_t(tokens[t]) * H;
  float v[kRowMax / THREADS];
#pragma unroll
  for (int j = 0; j < kRowMax / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    v[j] = i < H ? __bfloat162float(e[i]) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kRowMax / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < H) x[size_t(t) * H + i] = v[j];
  }
  rmsnorm_quantize_row<THREADS, VTHREADS>(v, gain, H, eps, row, q + size_t(t) * H, s, ld, t, nullptr);
}

}  // namespace osprey::cuda
