// The two stages of the greedy token selection over rows of logits (kernels.cu launches them as
// kernels without PDL; the persistent decode kernel runs them as its last phases): internal to
// kernels/cuda.
#pragma once
#include <cfloat>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

constexpr int kArgmaxChunks = 64;  // slices of a row, one block each

// Block (r, ch): the (value, lowest index) maximum of slice ch of row r of logits [rows][V] into
// val/idx [rows][kArgmaxChunks].
template <class Sync>
__device__ inline void argmax_partial_body(const float* logits, int V, float* val, int* idx, VBlock blk,
                                           const Sync& sync) {
  sync.wait();
  sync.release();
  const int r = blk.x, ch = blk.y;
  const int per = (V + kArgmaxChunks - 1) / kArgmaxChunks, b = ch * per, e = min(V, b + per);
  const float* l = logits + size_t(r) * V;
  float best = -FLT_MAX;
  int bi = INT32_MAX;
  for (int i = b + threadIdx.x; i < e; i += blockDim.x) {
    const float li = __ldcg(l + i);
    if (li > best || (li == best && i < bi)) best = li, bi = i;
  }
  warp_argmax(best, bi);
  __shared__ float sv[32];
  __shared__ int si[32];
  if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = best, si[threadIdx.x >> 5] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (sv[w] > best || (sv[w] == best && si[w] < bi)) best = sv[w], bi = si[w];
    val[r * kArgmaxChunks + ch] = best;
    idx[r * kArgmaxChunks + ch] = bi;
  }
  __syncthreads();  // sv and si are reused by the block's next slice
}

// A warp per row (rows of block blk.x, blockDim / 32 of them): the slices' maximum into out[r].
template <class Sync>
__device__ inline void argmax_final_body(const float* val, const int* idx, int32_t* out, int rows, VBlock blk,
                                         const Sync& sync) {
  sync.wait();
  sync.release();
  const int r = int((size_t(blk.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (r >= rows) return;
  float best = -FLT_MAX;
  int bi = INT32_MAX;
  for (int c = lane; c < kArgmaxChunks; c += 32) {
    const float v = __ldcg(val + r * kArgmaxChunks + c);
    const int i = __ldcg(idx + r * kArgmaxChunks + c);
    if (v > best || (v == best && i < bi)) best = v, bi = i;
  }
  warp_argmax(best, bi);
  if (lane == 0) out[r] = bi;
}

}  // namespace osprey::cuda
