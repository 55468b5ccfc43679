// CUDA kernels of the gpt-oss forward (BF16 weights, fp32 activations between ops, BF16 GEMM
// inputs). Each has a CPU twin in kernels/cpu/ops.h that tests/cuda compares it against.
// All launchers are asynchronous on the given stream and check the launch.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error_plain.h"

namespace osprey::cuda {

#define OSPREY_CUDA_CHECK(expr)                                                                \
  do {                                                                                         \
    cudaError_t e_ = (expr);                                                                   \
    if (e_ != cudaSuccess)                                                                     \
      ::osprey::fail_plain(std::string("CUDA error at ") + __FILE__ + ":" + std::to_string(__LINE__) + ": " + \
                           cudaGetErrorString(e_));                                            \
  } while (0)

// A cuBLAS or cuBLASLt call (both return cublasStatus_t, success 0); `lib` names it in the error.
#define OSPREY_CUBLAS_STATUS_CHECK(lib, expr)                                                   \
  do {                                                                                         \
    const auto st_ = (expr);                                                                   \
    if (int(st_) != 0)                                                                         \
      ::osprey::fail_plain(std::string(lib) + " error " + std::to_string(int(st_)) + " at " + __FILE__ + ":" + \
                           std::to_string(__LINE__));                                          \
  } while (0)

using bf16 = __nv_bfloat16;

// out[t] = table[tokens[t]]            table [vocab][H] bf16, out [T][H] fp32
void embedding(const bf16* table, const int32_t* tokens, float* out, int T, int H, cudaStream_t s);
// y[t] = bf16(x[t] * rsqrt(mean(x^2) + eps) * gain)      x [T][H] fp32, y [T][H] bf16
void rmsnorm_to_bf16(const float* x, const bf16* gain, bf16* y, int T, int H, float eps, cudaStream_t s);
// The same with an fp32 result (the router's input, kept in fp32 so routing matches the CPU engine).
void rmsnorm_to_f32(const float* x, const bf16* gain, float* y, int T, int H, float eps, cudaStream_t s);
// y[t][n] += bias[n]                   (bias bf16, may be null: no-op)
void add_bias(float* y, const bf16* bias, int T, int N, cudaStream_t s);
// x += y (n elements)
void add_inplace(float* x, const float* y, size_t n, cudaStream_t s);
// x [T][N] += y + bias (y [T][N]; bias [N] BF16 or null): the sums add_bias(y) then add_inplace(x, y)
// make, in one pass, y left as it was.
void add_bias_accumulate(float* x, const float* y, const bf16* bias, int T, int N, cudaStream_t s);
// dst = bf16(src)
void to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t s);
// Half-split YaRN rotation in place: x [T][heads][d]; inv_freq [d/2]; positions [T].
void rope(float* x, const int32_t* positions, const float* inv_freq, float concentration, int T, int heads, int d,
          cudaStream_t s);
// Sink attention over a contiguous per-layer cache k, v [capacity][kv_heads][d] (fp32, positions
// 0.. in order; a sliding window reads only its keys). Queries q [T][heads][d] at positions
// first_pos..first_pos+T-1 whose keys are already in the cache; out [T][heads][d].
void sink_attention(const float* q, const float* k, const float* v, const bf16* sinks, float* out, int T, int first_pos,
                    int heads, int kv_heads, int d, int window, float scale, cudaStream_t s);
// Router: top-k of logits [T][E] (ties: lower index), softmax over the k: idx, w [T][k].
void topk_softmax(const float* logits, int32_t* idx, float* w, int T, int E, int k, cudaStream_t s);
// Clamped SwiGLU on interleaved gate/up t [n][2I] -> a [n][I] (the next GEMM's input type).
void swiglu_to_bf16(const float* t, bf16* a, int n, int I, float alpha, float limit, cudaStream_t s);
void swiglu_to_f32(const float* t, float* a, int n, int I, float alpha, float limit, cudaStream_t s);
// dst[i] = src[rows[i]] for rows of width H (bf16 or fp32).
void gather_rows(const bf16* src, const int32_t* rows, bf16* dst, int n, int H, cudaStream_t s);
void gather_rows(const float* src, const int32_t* rows, float* dst, int n, int H, cudaStream_t s);
// bf16 -> fp32
void to_f32(const bf16* src, float* dst, size_t n, cudaStream_t s);
// x[rows[i]] += w[i] * y[i]            (rows distinct within one call)
void scatter_add_weighted(float* x, const float* y, const int32_t* rows, const float* w, int n, int H, cudaStream_t s);
// MXFP4 [rows][cols/32][16] + E8M0 scales [rows][cols/32] -> bf16 [rows][cols] (exact).
void mxfp4_to_bf16(const uint8_t* blocks, const uint8_t* scales, bf16* out, int rows, int cols, cudaStream_t s);
// y[t][n] = W[n,:] . x[t] + bias[n], all fp32 weights (the router: small N), a warp per output.
void linear_f32_small(const float* W, const float* x, const bf16* bias, float* y, int T, int N, int K, cudaStream_t s);
// n bf16 values, uniform in [-amp, amp], from a counter-based hash of (seed, index).
void fill_random_bf16(bf16* dst, size_t n, uint64_t seed, float amp, cudaStream_t s);
// n E4M3 codes, uniform over the finite ones, from the same hash.
void fill_random_e4m3(uint8_t* dst, size_t n, uint64_t seed, cudaStream_t s);
// out[r] = argmax of logits[r] (lowest index on ties).
void argmax_rows(const float* logits, int32_t* out, int rows, int V, cudaStream_t s);

}  // namespace osprey::cuda
