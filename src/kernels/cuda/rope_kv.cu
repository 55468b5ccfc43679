// Writes of K and V into the paged BF16 or FP8 cache (attention.cuh): plain, or with the YaRN rotation
// of the fused QKV GEMM's output in the same kernel.
#include <string>

#include "kernels/cuda/rope_kv_body.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

namespace {

// A block per row r, a warp per (KV head, K or V) cache row (d <= 128).
__global__ void kv_write_kernel(KvLayerView L, const float* k, const float* v, const int32_t* slot, const int32_t* pos) {
  pdl_wait();
  pdl_launch_dependents();
  const int r = blockIdx.x, n = L.kv_heads * L.d, lane = threadIdx.x & 31;
  const size_t row = kv_row(L, slot[r], pos[r]);
  for (int w = threadIdx.x >> 5; w < 2 * L.kv_heads; w += blockDim.x >> 5) {
    const bool is_v = w >= L.kv_heads;
    const int h = is_v ? w - L.kv_heads : w;
    const float* src = (is_v ? v : k) + size_t(r) * n + size_t(h) * L.d;
    float val[4];
    int idx[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = lane + 32 * u;
      idx[u] = i < L.d ? i : -1;
      val[u] = i < L.d ? src[i] : 0.0f;
    }
    store_kv_row_warp(L, is_v, row, h, val, idx);
  }
}

__global__ void qkv_rope_to_cache_kernel(KvLayerView L, const float* qkv, const int32_t* slots,
                                         const int32_t* positions, const float* inv_freq, float c, int heads,
                                         float* q, bool release_early, const bf16* bias) {
  qkv_rope_to_cache_body(L, qkv, slots, positions, inv_freq, c, heads, q, release_early, VBlock::this_block(),
                         PdlSync{}, bias);
}

}  // namespace

void kv_write(const KvLayerView& L, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int rows,
              cudaStream_t s) {
  if (rows == 0) return;
  if (L.d > 128) fail_plain("kv_write: head_dim " + std::to_string(L.d) + " exceeds 128");
  launch_pdl("rope", kv_write_kernel, rows, 256, 0, s, L, k, v, slot, pos);
}

void qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                       const float* inv_freq, float concentration, int rows, int heads, float* q, cudaStream_t s,
                       bool decode_rows, const bf16* bias) {
  if (rows == 0) return;
  if (L.d > 128) fail_plain("qkv_rope_to_cache: head_dim " + std::to_string(L.d) + " exceeds 128");
  launch_pdl("rope", qkv_rope_to_cache_kernel, rows, 1024, 0, s, L, qkv, slot, pos, inv_freq, concentration, heads, q,
             decode_rows, bias);
}

}  // namespace osprey::cuda
