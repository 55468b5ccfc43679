// Decode-step matrix-vector kernels (one token): a warp per output row, 16-byte weight loads,
// fp32 activations and accumulation. The MXFP4 variant reads expert weights as stored (4.25 bits
// a weight) and picks its experts from the router's device-side top-k, so a decode step never
// waits on the host.
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/gemv.cuh"

namespace osprey::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__device__ inline float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// y[n] (+)= W[n,:] . x + bias[n]
__global__ void gemv_bf16_kernel(const bf16* __restrict__ W, const float* __restrict__ x, const bf16* __restrict__ bias,
                                 float* __restrict__ y, int N, int K, bool accumulate) {
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const bf16* w = W + size_t(row) * K;
  float acc = 0;
  int k = lane * 8;
  if ((K & 7) == 0) {
    for (; k < K; k += 256) {
      const uint4 p = *reinterpret_cast<const uint4*>(w + k);
      const float4 x0 = *reinterpret_cast<const float4*>(x + k), x1 = *reinterpret_cast<const float4*>(x + k + 4);
      acc += bf16_bits_to_float(p.x & 0xFFFF) * x0.x + bf16_bits_to_float(p.x >> 16) * x0.y;
      acc += bf16_bits_to_float(p.y & 0xFFFF) * x0.z + bf16_bits_to_float(p.y >> 16) * x0.w;
      acc += bf16_bits_to_float(p.z & 0xFFFF) * x1.x + bf16_bits_to_float(p.z >> 16) * x1.y;
      acc += bf16_bits_to_float(p.w & 0xFFFF) * x1.z + bf16_bits_to_float(p.w >> 16) * x1.w;
    }
  } else {
    for (k = lane; k < K; k += 32) acc += __bfloat162float(w[k]) * x[k];
  }
  acc = warp_sum(acc);
  if (lane == 0) {
    const float b = bias ? __bfloat162float(bias[row]) : 0.0f;
    y[row] = (accumulate ? y[row] : 0.0f) + acc + b;
  }
}

__global__ void gemv_f32_kernel(const float* __restrict__ W, const float* __restrict__ x, const bf16* __restrict__ bias,
                                float* __restrict__ y, int N, int K) {
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* w = W + size_t(row) * K;
  float acc = 0;
  for (int k = lane; k < K; k += 32) acc += w[k] * x[k];
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc + (bias ? __bfloat162float(bias[row]) : 0.0f);
}

// E2M1 code -> fp32 by bit assembly (a table in constant memory would serialize the warp):
// magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
__device__ inline float e2m1(uint32_t c) {
  const uint32_t m = c & 7;
  const uint32_t bits = m >= 2 ? ((((m >> 1) + 126u) << 23) | ((m & 1u) << 22)) : (m ? 0x3F000000u : 0u);
  return __uint_as_float(bits | ((c & 8u) << 28));
}

// y[j][n] = W_e[n,:] . x_j + b_e[n] for the j-th selected expert e = idx[j] (blockIdx.y = j).
// Coalesced: lane l takes 4 packed bytes (8 columns) at a time, so a warp reads 128 contiguous
// bytes of the row and 256 contiguous floats of x per step; the 4 bytes share one scale.
__global__ void gemv_mxfp4_experts_kernel(const uint8_t* __restrict__ blocks, const uint8_t* __restrict__ scales,
                                          const bf16* __restrict__ bias, const int32_t* __restrict__ idx,
                                          const float* __restrict__ x, size_t x_stride, float* __restrict__ y, int N,
                                          int K) {
  const int j = blockIdx.y;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const int e = idx[j];
  const int row_bytes = K / 2, G = K / 32;
  const uint8_t* b = blocks + (size_t(e) * N + row) * size_t(row_bytes);
  const uint8_t* s = scales + (size_t(e) * N + row) * size_t(G);
  const float* xj = x + j * x_stride;
  float acc = 0;
  for (int o = lane * 4; o < row_bytes; o += 128) {
    const uint32_t word = *reinterpret_cast<const uint32_t*>(b + o);
    const float4 x0 = *reinterpret_cast<const float4*>(xj + 2 * o), x1 = *reinterpret_cast<const float4*>(xj + 2 * o + 4);
    float part = e2m1(word & 15) * x0.x + e2m1((word >> 4) & 15) * x0.y;
    part += e2m1((word >> 8) & 15) * x0.z + e2m1((word >> 12) & 15) * x0.w;
    part += e2m1((word >> 16) & 15) * x1.x + e2m1((word >> 20) & 15) * x1.y;
    part += e2m1((word >> 24) & 15) * x1.z + e2m1(word >> 28) * x1.w;
    acc += part * __uint_as_float(uint32_t(s[o >> 4]) << 23);  // 2^(s-127); s = 0 (2^-127, unused by real checkpoints) flushes to 0
  }
  acc = warp_sum(acc);
  if (lane == 0) y[size_t(j) * N + row] = acc + __bfloat162float(bias[size_t(e) * N + row]);
}

// x[i] += sum_j w[j] * y[j][i]
__global__ void moe_combine_kernel(float* x, const float* y, const float* w, int k, int H) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= H) return;
  float s = 0;
  for (int j = 0; j < k; ++j) s += w[j] * y[size_t(j) * H + i];
  x[i] += s;
}

unsigned rows_grid(int N) { return unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void gemv_bf16(const bf16* W, const float* x, const bf16* bias, float* y, int N, int K, bool accumulate, cudaStream_t s) {
  gemv_bf16_kernel<<<rows_grid(N), kWarpsPerBlock * 32, 0, s>>>(W, x, bias, y, N, K, accumulate);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

void gemv_f32(const float* W, const float* x, const bf16* bias, float* y, int N, int K, cudaStream_t s) {
  gemv_f32_kernel<<<rows_grid(N), kWarpsPerBlock * 32, 0, s>>>(W, x, bias, y, N, K);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

void gemv_mxfp4_experts(const uint8_t* blocks, const uint8_t* scales, const bf16* bias, const int32_t* idx, int k,
                        const float* x, size_t x_stride, float* y, int N, int K, cudaStream_t s) {
  dim3 grid(rows_grid(N), unsigned(k));
  gemv_mxfp4_experts_kernel<<<grid, kWarpsPerBlock * 32, 0, s>>>(blocks, scales, bias, idx, x, x_stride, y, N, K);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(float* x, const float* y, const float* w, int k, int H, cudaStream_t s) {
  moe_combine_kernel<<<unsigned((H + 255) / 256), 256, 0, s>>>(x, y, w, k, H);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
