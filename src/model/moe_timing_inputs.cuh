// What the MoE kernel timings share (model/moe_timing.cu for `bench --moe-batches`, and
// bench/probes/mxfp4_decode_ring.cu): weights and activations filled at random on the device, a
// decode batch's random top-k routing sorted by expert, the weight copies that keep a timing out
// of L2, the model's rows-per-expert hint, and the mean time of one layer over those copies.
#pragma once
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "kernels/cuda/ops.cuh"
#include "model/moe_timing.h"

namespace osprey::moe_inputs {

namespace {  // the fill kernels: each translation unit that times has its own

__device__ inline uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z ^ (z >> 31));
}
// MXFP4 tiles (formats/mxfp4.h): random codes, scales kFillScaleMin .. + 7 (2^-9 .. 2^-2, no factor
// past 2^0; so no scale above kMxfp4OneMultiplyMaxScale: kFillScalesBig).
constexpr int kFillScaleMin = 118;
constexpr bool kFillScalesBig = kFillScaleMin + 7 > kMxfp4OneMultiplyMaxScale;
__global__ void fill_mxfp4_tiles(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = mix(i, seed);
    p[i] = i % kMxfp4TileBytes >= 1024 ? uint8_t(kFillScaleMin + (h & 7)) : uint8_t(h);
  }
}
// E4M3 codes without NaN.
__global__ void fill_fp8_codes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint8_t(mix(i, seed) & 0x77);
}
__global__ void fill_f32(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
__global__ void fill_bf16(cuda::bf16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(float(mix(i, seed) & 0xFFFF) / 65536.0f - 0.5f);
}

}  // namespace

constexpr unsigned kFillBlocks = 1024, kFillThreads = 256;

// A decode batch's routing: each token's top-k distinct experts at random, the (token, choice)
// rows sorted by expert; active: the experts with rows, then -1, min(experts, batch * top_k) of them.
struct Routing {
  std::vector<int32_t> seg, active, row_token;
  int touched = 0;
};
inline Routing route(const MoeGemmShape& a) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> by_expert(a.experts);
  std::vector<int> ids(a.experts);
  for (int t = 0; t < a.batch; ++t) {
    std::iota(ids.begin(), ids.end(), 0);
    for (int j = 0; j < a.top_k; ++j) {
      std::uniform_int_distribution<int> d(j, a.experts - 1);
      std::swap(ids[j], ids[d(rng)]);
      by_expert[ids[j]].push_back(t);
    }
  }
  Routing r;
  r.seg.push_back(0);
  for (int e = 0; e < a.experts; ++e) {
    for (int t : by_expert[e]) r.row_token.push_back(t);
    r.seg.push_back(int32_t(r.row_token.size()));
    if (!by_expert[e].empty()) r.active.push_back(e), ++r.touched;
  }
  r.active.resize(std::min(a.experts, a.batch * a.top_k), -1);
  return r;
}

// Weight copies so that one pass over them reads at least 256 MB (L2 holds 50).
inline int copies_for(double touched_bytes) { return std::clamp(int(256e6 / std::max(touched_bytes, 1.0)) + 1, 2, 8); }

// The mean seconds of layer(c) over reps passes of the copies c, after one warm-up pass.
template <class F>
double mean_seconds(int reps, int copies, F&& layer) {
  for (int c = 0; c < copies; ++c) layer(c);  // warm-up
  cudaEvent_t e0, e1;
  OSPREY_CUDA_CHECK(cudaEventCreate(&e0));
  OSPREY_CUDA_CHECK(cudaEventCreate(&e1));
  OSPREY_CUDA_CHECK(cudaEventRecord(e0));
  for (int r = 0; r < reps; ++r)
    for (int c = 0; c < copies; ++c) layer(c);
  OSPREY_CUDA_CHECK(cudaEventRecord(e1));
  OSPREY_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  OSPREY_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  OSPREY_CUDA_CHECK(cudaEventDestroy(e0));
  OSPREY_CUDA_CHECK(cudaEventDestroy(e1));
  return ms / 1e3 / (double(reps) * copies);
}

// As the model's hint: twice the mean rows an expert, at most every token.
inline int rows_per_expert(const MoeGemmShape& a) {
  return std::min(fp8::round4(a.batch), 2 * ((a.batch * a.top_k + a.experts - 1) / a.experts));
}

}  // namespace osprey::moe_inputs
