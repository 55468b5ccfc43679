// Writes of K and V into the paged BF16 cache (attention.cuh): plain, or with the YaRN rotation
// of the fused QKV GEMM's output in the same kernel.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

namespace {

__global__ void kv_write_kernel(KvLayerView L, const float* k, const float* v, const int32_t* slot, const int32_t* pos) {
  pdl_wait();
  pdl_launch_dependents();
  const int r = blockIdx.x, n = L.kv_heads * L.d;
  const size_t row = kv_row(L, slot[r], pos[r]);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    L.k[row * n + i] = __float2bfloat16(k[size_t(r) * n + i]);
    L.v[row * n + i] = __float2bfloat16(v[size_t(r) * n + i]);
  }
}

// Token blockIdx.x of a fused QKV output [T][(heads + 2 kv_heads) d]: q heads rotated into q,
// k heads rotated and v copied into the cache as BF16 (the arithmetic of rope and kv_write).
__global__ void qkv_rope_to_cache_kernel(KvLayerView L, const float* qkv, const int32_t* slots,
                                         const int32_t* positions, const float* inv_freq, float c, int heads,
                                         float* q, bool release_early) {
  // release_early (decode): the attention after this kernel reads nothing of the kernels before
  // it until its own wait, which covers this kernel and so them; so it may start at once.
  if (release_early) pdl_launch_dependents();
  pdl_wait();
  if (!release_early) pdl_launch_dependents();
  const int t = blockIdx.x, d = L.d, half = d / 2, kvh = L.kv_heads, width = (heads + 2 * kvh) * d;
  const float* src = qkv + size_t(t) * width;
  const int pos = positions[t];
  const size_t row = kv_row(L, slots[t], pos) * size_t(kvh) * d;
  for (int j = threadIdx.x; j < (heads + kvh) * half; j += blockDim.x) {
    const int hh = j / half, i = j % half;
    if (hh < heads) {
      rotate_pair(src + size_t(hh) * d, q + (size_t(t) * heads + hh) * d, i, half, pos, inv_freq, c);
    } else {
      const float* in = src + size_t(hh) * d;
      float o1, o2;
      rotate_values(in[i], in[i + half], pos, inv_freq[i], c, o1, o2);
      bf16* kd = L.k + row + size_t(hh - heads) * d;
      kd[i] = __float2bfloat16(o1);
      kd[i + half] = __float2bfloat16(o2);
    }
  }
  for (int j = threadIdx.x; j < kvh * d; j += blockDim.x) L.v[row + j] = __float2bfloat16(src[(heads + kvh) * d + j]);
}

}  // namespace

void kv_write(const KvLayerView& L, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int rows,
              cudaStream_t s) {
  if (rows == 0) return;
  launch_pdl("rope", kv_write_kernel, rows, 256, 0, s, L, k, v, slot, pos);
}

void qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                       const float* inv_freq, float concentration, int rows, int heads, float* q, cudaStream_t s,
                       bool decode_rows) {
  if (rows == 0) return;
  launch_pdl("rope", qkv_rope_to_cache_kernel, rows, 1024, 0, s, L, qkv, slot, pos, inv_freq, concentration, heads, q,
             decode_rows);
}

}  // namespace osprey::cuda
