// Writes of K and V into the paged BF16 cache (attention.cuh): plain, or with the YaRN rotation
// of the fused QKV GEMM's output in the same kernel.
#include "kernels/cuda/rope_kv_body.cuh"
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
  launch_pdl("rope", kv_write_kernel, rows, 256, 0, s, L, k, v, slot, pos);
}

void qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                       const float* inv_freq, float concentration, int rows, int heads, float* q, cudaStream_t s,
                       bool decode_rows, const bf16* bias) {
  if (rows == 0) return;
  launch_pdl("rope", qkv_rope_to_cache_kernel, rows, 1024, 0, s, L, qkv, slot, pos, inv_freq, concentration, heads, q,
             decode_rows, bias);
}

}  // namespace osprey::cuda
