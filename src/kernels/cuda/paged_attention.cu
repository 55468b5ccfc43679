// Paged attention with sinks. A block per (KV head, row, split); its warps are the query heads of
// that KV head (GQA: they share every K/V row through L1). Within a warp, each lane scores its own
// key of a group of 32 (a full 64-dim dot product, no shuffles), the group's max and sum update
// the running softmax once, and then the lanes, each owning d/32 output dimensions, accumulate
// the 32 value rows with the probabilities broadcast by shuffle.
#include <cfloat>

#include "kernels/cuda/paged_attention.cuh"

namespace osprey::cuda {

namespace {

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline size_t kv_row(const KvLayerView& L, int slot, int j) {
  if (L.page_table) {
    const int page = L.page_table[size_t(slot) * L.max_pages + j / kPage];
    return size_t(page) * kPage + (j % kPage);
  }
  return size_t(slot) * L.ring + (j % L.ring);
}

__global__ void kv_write_kernel(KvLayerView L, const float* k, const float* v, const int32_t* slot, const int32_t* pos) {
  const int r = blockIdx.x, n = L.kv_heads * L.d;
  const size_t row = kv_row(L, slot[r], pos[r]);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    L.k[row * n + i] = __float2bfloat16(k[size_t(r) * n + i]);
    L.v[row * n + i] = __float2bfloat16(v[size_t(r) * n + i]);
  }
}

template <int D>
__global__ void paged_attention_kernel(KvLayerView L, const float* q, const bf16* sinks, const int32_t* slots,
                                       const int32_t* positions, float* out, int heads, int window, float scale,
                                       int splits, float* scratch) {
  constexpr int PER = (D + 31) / 32;  // output dims per lane (lane + 32 i < D)
  const int g = blockIdx.x, r = blockIdx.y, sp = blockIdx.z;
  const int group = heads / L.kv_heads, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = slots[r], pos = positions[r];
  const int first = window > 0 ? max(0, pos - window + 1) : 0, n = pos + 1 - first;
  const int chunk = (n + splits - 1) / splits;
  const int k0 = first + sp * chunk, k1 = min(pos + 1, k0 + chunk);
  const int kvn = L.kv_heads * D;
  for (int h = g * group + warp; h < (g + 1) * group; h += blockDim.x >> 5) {
    float qv[D];
    const float* qp = q + (size_t(r) * heads + h) * D;
#pragma unroll
    for (int i = 0; i < D; i += 4) {
      const float4 t = *reinterpret_cast<const float4*>(qp + i);
      qv[i] = t.x * scale, qv[i + 1] = t.y * scale, qv[i + 2] = t.z * scale, qv[i + 3] = t.w * scale;
    }
    float m = sp == 0 ? __bfloat162float(sinks[h]) : -FLT_MAX, l = sp == 0 ? 1.0f : 0.0f;
    float acc[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] = 0.0f;
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int j = j0 + lane;
      float s = -FLT_MAX;
      if (j < k1) {
        const bf16* kp = L.k + kv_row(L, slot, j) * kvn + size_t(g) * D;
        float dot = 0;
#pragma unroll
        for (int i = 0; i < D; i += 8) {
          const uint4 w = *reinterpret_cast<const uint4*>(kp + i);
          const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float2 f = __bfloat1622float2(p2[u]);
            dot += qv[i + 2 * u] * f.x + qv[i + 2 * u + 1] * f.y;
          }
        }
        s = dot;
      }
      const float m_new = fmaxf(m, warp_max(s));
      const float p = j < k1 ? __expf(s - m_new) : 0.0f;
      const float corr = __expf(m - m_new);
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < PER; ++i) acc[i] *= corr;
      const int cnt = min(32, k1 - j0);
      for (int u = 0; u < cnt; ++u) {
        const float pu = __shfl_sync(0xffffffffu, p, u);
        const bf16* vp = L.v + kv_row(L, slot, j0 + u) * kvn + size_t(g) * D;
#pragma unroll
        for (int i = 0; i < PER; ++i)
          if (lane + 32 * i < D) acc[i] += pu * __bfloat162float(vp[lane + 32 * i]);
      }
      m = m_new;
    }
    if (splits == 1) {
      float* op = out + (size_t(r) * heads + h) * D;
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (lane + 32 * i < D) op[lane + 32 * i] = acc[i] / l;
    } else {
      float* sc = scratch + ((size_t(r) * heads + h) * splits + sp) * (D + 2);
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (lane + 32 * i < D) sc[lane + 32 * i] = acc[i];
      if (lane == 0) sc[D] = m, sc[D + 1] = l;
    }
  }
}

// Merges the splits of one (row, head): a warp.
template <int D>
__global__ void merge_splits_kernel(const float* scratch, float* out, int rows_heads, int splits) {
  const int w = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (w >= rows_heads) return;
  const float* sc = scratch + size_t(w) * splits * (D + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, sc[s * (D + 2) + D]);
  constexpr int PER = (D + 31) / 32;
  float den = 0, o[PER] = {};
  for (int s = 0; s < splits; ++s) {
    const float* p = sc + s * (D + 2);
    const float f = p[D + 1] > 0.0f ? __expf(p[D] - M) : 0.0f;
    den += p[D + 1] * f;
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (lane + 32 * i < D) o[i] += p[lane + 32 * i] * f;
  }
#pragma unroll
  for (int i = 0; i < PER; ++i)
    if (lane + 32 * i < D) out[size_t(w) * D + lane + 32 * i] = o[i] / den;
}

}  // namespace

void kv_write(const KvLayerView& L, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int rows,
              cudaStream_t s) {
  if (rows == 0) return;
  kv_write_kernel<<<rows, 256, 0, s>>>(L, k, v, slot, pos);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

void paged_attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot, const int32_t* pos,
                     float* out, int rows, int heads, int window, float scale, int splits, float* scratch,
                     cudaStream_t s) {
  if (rows == 0) return;
  if (heads % L.kv_heads) fail_plain("paged_attention: heads must be a multiple of kv_heads");
  const int group = heads / L.kv_heads, warps = group < 8 ? group : 8;
  dim3 grid(unsigned(L.kv_heads), unsigned(rows), unsigned(splits));
  switch (L.d) {
#define OSPREY_PAGED_CASE(D)                                                                                     \
  case D:                                                                                                        \
    paged_attention_kernel<D><<<grid, warps * 32, 0, s>>>(L, q, sinks, slot, pos, out, heads, window, scale, splits, \
                                                          scratch);                                              \
    if (splits > 1)                                                                                              \
      merge_splits_kernel<D><<<unsigned((size_t(rows) * heads * 32 + 255) / 256), 256, 0, s>>>(scratch, out,     \
                                                                                              rows * heads, splits); \
    break;
    OSPREY_PAGED_CASE(16)
    OSPREY_PAGED_CASE(32)
    OSPREY_PAGED_CASE(64)
    OSPREY_PAGED_CASE(128)
#undef OSPREY_PAGED_CASE
    default: fail_plain("paged_attention: head_dim " + std::to_string(L.d) + " is not compiled (16, 32, 64, 128)");
  }
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
