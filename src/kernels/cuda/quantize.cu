// Quantization kernels of the FP8 path (fp8.cuh): weights into 128x128 blocks at load (BF16 or
// MXFP4 sources, bit-identical to formats/fp8.h), activations into 1x128 blocks, and the RMSNorm
// fused with that quantization.
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
    part[0] = fp8_block_scale(m);
    s[size_t(rb) * s_stride + cb] = part[0];
  }
  __syncthreads();
  const float sc = part[0];
  for (int i = threadIdx.x; i < nr * nc; i += blockDim.x) {
    const int r = r0 + i / nc, c = c0 + i % nc;
    q[size_t(r) * cols + c] = e4m3_code(src(r, c) / sc);
  }
}

// A warp per (row, 128-column block); each lane 4 columns.
__global__ void quantize_act_kernel(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s,
                                    ActScales sg) {
  pdl_wait();
  pdl_launch_dependents();
  const int warp = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  const int KB = (K + kB - 1) / kB;
  if (warp >= rows * KB) return;
  const int r = warp / KB, kb = warp % KB;
  if (sg.seg && r >= sg.seg[sg.experts]) return;
  const int src = in_rows ? in_rows[r] : r;
  float v[4];
  const int c0 = kb * kB + lane * 4;
  if (K % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    // One 16-byte load a lane (its 4 columns all exist or none do).
    const float4 f = c0 < K && src >= 0 ? *reinterpret_cast<const float4*>(x + size_t(src) * K + c0)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = (c0 + i < K && src >= 0) ? x[size_t(src) * K + c0 + i] : 0.0f;
  }
  const float sc = warp_quantize_block128(v, kb * kB, K, q + size_t(r) * K);
  if (lane == 0) s[act_scale_index(sg, KB, r, kb)] = sc;
}

// A warp per row: its segment found once, the codes copied in 16-byte pieces (K % 16 == 0; else
// byte by byte), a scale per 128-column block.
__global__ void gather_act_kernel(const uint8_t* q_in, const float* s_in, int ld_in, const int32_t* in_rows, int rows,
                                  int K, uint8_t* q, float* s, ActScales sg) {
  pdl_wait();
  pdl_launch_dependents();
  const int r = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (r >= rows) return;
  if (sg.seg && r >= sg.seg[sg.experts]) return;
  const int KB = (K + kB - 1) / kB, src = in_rows[r];
  uint8_t* dst = q + size_t(r) * K;
  if (K % 16 == 0) {
    const uint4* from = reinterpret_cast<const uint4*>(q_in + size_t(src >= 0 ? src : 0) * K);
    for (int c = lane; c < K / 16; c += 32)
      reinterpret_cast<uint4*>(dst)[c] = src >= 0 ? from[c] : make_uint4(0u, 0u, 0u, 0u);
  } else {
    for (int c = lane; c < K; c += 32) dst[c] = src >= 0 ? q_in[size_t(src) * K + c] : uint8_t(0);
  }
  if (!sg.seg) {
    for (int kb = lane; kb < KB; kb += 32) s[size_t(kb) * sg.ld + r] = src >= 0 ? s_in[size_t(kb) * ld_in + src] : 1.0f;
    return;
  }
  const int e = segment_of(sg, r);
  for (int kb = lane; kb < KB; kb += 32)
    s[act_scale_index_in(sg, KB, r, kb, e)] = src >= 0 ? s_in[size_t(kb) * ld_in + src] : 1.0f;
}

__global__ void __launch_bounds__(kRowThreads) rmsnorm_quant_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                    uint8_t* q, float* s, int ld, float* h_out) {
  extern __shared__ float row[];
  pdl_wait();
  pdl_launch_dependents();
  const int t = blockIdx.x;
  float v[kRowMax / kRowThreads];
  load_row<kRowThreads>(x + size_t(t) * H, H, v);
  rmsnorm_quantize_row<kRowThreads>(v, gain, H, eps, row, q + size_t(t) * H, s, ld, t,
                                    h_out ? h_out + size_t(t) * H : nullptr);
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
  check_row(H, "rmsnorm_quantize");
  launch_pdl("norm", rmsnorm_quant_kernel, T, kRowThreads, H * sizeof(float), st, x, gain, H, eps, q, s, ld, h_out);
}

void gather_act_1x128(const uint8_t* q_in, const float* s_in, int ld_in, const int32_t* in_rows, int rows, int K,
                      uint8_t* q, float* s, ActScales scales, cudaStream_t st) {
  if (rows == 0) return;
  if (!in_rows) fail_plain("gather_act_1x128: the rows to gather are required");
  if (K % 16 == 0 && ((reinterpret_cast<uintptr_t>(q_in) | reinterpret_cast<uintptr_t>(q)) & 15))
    fail_plain("gather_act_1x128: codes must be 16-byte aligned");
  launch_pdl("gather", gather_act_kernel, unsigned((size_t(rows) * 32 + 255) / 256), 256, 0, st, q_in, s_in, ld_in,
             in_rows, rows, K, q, s, scales);
}

void quantize_act_1x128(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s, ActScales scales,
                        cudaStream_t st) {
  if (rows == 0) return;
  const size_t warps = size_t(rows) * ((K + kB - 1) / kB);
  launch_pdl("quant", quantize_act_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, st, x, in_rows, rows, K, q, s,
             scales);
}

}  // namespace osprey::cuda
