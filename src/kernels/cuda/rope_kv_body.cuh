// The decode rope's body (rope_kv.cu launches it as its own kernel; the persistent decode kernel
// runs it as a phase): internal to kernels/cuda.
#pragma once
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// Token blk.x of a fused QKV output [T][(heads + 2 kv_heads) d]: q heads rotated into q,
// k heads rotated and v copied into the cache as BF16 or FP8 (the arithmetic of rope and
// kv_write). The blk.ny blocks of a token share its pairs and rows (blk.y-th slices of blockDim
// each, a multiple of 32; head_dim at most 128). bias
// (optional, BF16 per column): added to each value as it is read, as add_bias would have.
template <class Sync>
__device__ inline void qkv_rope_to_cache_body(const KvLayerView& L, const float* qkv, const int32_t* slots,
                                              const int32_t* positions, const float* inv_freq, float c, int heads,
                                              float* q, bool release_early, VBlock blk, const Sync& sync,
                                              const bf16* bias = nullptr) {
  // release_early (decode): the attention after this kernel reads nothing of the kernels before
  // it until its own wait, which covers this kernel and so them; so it may start at once.
  if (release_early) sync.release();
  sync.wait();
  if (!release_early) sync.release();
  const int t = blk.x, d = L.d, half = d / 2, kvh = L.kv_heads, width = (heads + 2 * kvh) * d;
  const float* src = qkv + size_t(t) * width;
  const int pos = positions[t];
  const int j0 = blk.y * int(blockDim.x) + int(threadIdx.x), step = int(blockDim.x) * blk.ny;
  auto value = [&](int col) { return bias ? src[col] + __bfloat162float(bias[col]) : src[col]; };
  for (int j = j0; j < heads * half; j += step) {
    const int hh = j / half, i = j % half, col = hh * d + i;
    float* qd = q + (size_t(t) * heads + hh) * d;
    rotate_values(value(col), value(col + half), pos, inv_freq[i], c, qd[i], qd[i + half]);
  }
  // K and V: a warp per (KV head, K or V) row (the FP8 cache's row exponent is the row's amax);
  // d <= 128: lane takes pairs i = lane + 32 u (K) or values lane + 32 u (V).
  const size_t row = kv_row(L, slots[t], pos);
  const int lane = j0 & 31;
  for (int w = j0 >> 5; w < 2 * kvh; w += step >> 5) {
    const bool is_v = w >= kvh;
    const int h = is_v ? w - kvh : w;
    float val[4];
    int idx[4];
    if (!is_v) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int i = lane + 32 * u, col = (heads + h) * d + i;
        idx[2 * u] = i < half ? i : -1, idx[2 * u + 1] = i < half ? i + half : -1;
        val[2 * u] = val[2 * u + 1] = 0.0f;
        if (i < half) rotate_values(value(col), value(col + half), pos, inv_freq[i], c, val[2 * u], val[2 * u + 1]);
      }
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = lane + 32 * u;
        idx[u] = i < d ? i : -1;
        val[u] = i < d ? value((heads + kvh + h) * d + i) : 0.0f;
      }
    }
    store_kv_row_warp(L, is_v, row, h, val, idx);
  }
}

}  // namespace osprey::cuda
