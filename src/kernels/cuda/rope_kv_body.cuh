// The decode rope's body (rope_kv.cu launches it as its own kernel; the persistent decode kernel
// runs it as a phase): internal to kernels/cuda.
#pragma once
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// Token blk.x of a fused QKV output [T][(heads + 2 kv_heads) d]: q heads rotated into q,
// k heads rotated and v copied into the cache as BF16 (the arithmetic of rope and kv_write). The
// blk.ny blocks of a token share its pairs and values (blk.y-th slices of blockDim each). bias
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
  const size_t row = kv_row(L, slots[t], pos) * size_t(kvh) * d;
  const int j0 = blk.y * int(blockDim.x) + int(threadIdx.x), step = int(blockDim.x) * blk.ny;
  auto value = [&](int col) { return bias ? src[col] + __bfloat162float(bias[col]) : src[col]; };
  for (int j = j0; j < (heads + kvh) * half; j += step) {
    const int hh = j / half, i = j % half, col = hh * d + i;
    float o1, o2;
    rotate_values(value(col), value(col + half), pos, inv_freq[i], c, o1, o2);
    if (hh < heads) {
      float* qd = q + (size_t(t) * heads + hh) * d;
      qd[i] = o1;
      qd[i + half] = o2;
    } else {
      bf16* kd = L.k + row + size_t(hh - heads) * d;
      kd[i] = __float2bfloat16(o1);
      kd[i + half] = __float2bfloat16(o2);
    }
  }
  for (int j = j0; j < kvh * d; j += step) L.v[row + j] = __float2bfloat16(value((heads + kvh) * d + j));
}

}  // namespace osprey::cuda
