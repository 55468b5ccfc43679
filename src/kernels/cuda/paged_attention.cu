// Paged attention with sinks. A block per (KV head, row, split); its warps are the query heads of
// that KV head (GQA: they share every K/V row through L1). Within a warp, each lane scores its own
// key of a group of 32 (a full 64-dim dot product, no shuffles), the group's max and sum update
// the running softmax once, and then the lanes, each owning d/32 output dimensions, accumulate
// the 32 value rows with the probabilities broadcast by shuffle.
#include <cfloat>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace osprey::cuda {

namespace {

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

// ---- Tensor-core prefill (flash_prefill) ----

namespace osprey::cuda {

namespace {

constexpr int kFaRows = 64, kFaKeys = 64, kFaD = 64, kFaPad = 72;  // smem rows padded: conflict-free fragments

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ inline void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Block: 4 warps x 16 rows; row r -> token t0 + r / group, head g * group + r % group.
__global__ void __launch_bounds__(128) flash_prefill_kernel(KvLayerView L, const float* __restrict__ q,
                                                            const bf16* __restrict__ sinks, int slot, int p0,
                                                            float* __restrict__ out, int T, int heads, int window,
                                                            float scale) {
  __shared__ __align__(16) bf16 Ks[kFaKeys][kFaPad];
  __shared__ __align__(16) bf16 Vt[kFaD][kFaPad];
  const int g_kv = blockIdx.x, group = heads / L.kv_heads, tokens_per_block = kFaRows / group;
  const int t0 = blockIdx.y * tokens_per_block;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int kvn = L.kv_heads * kFaD;
  // This thread's two rows.
  int pos_r[2], head_r[2], tok_r[2];
  bool valid_r[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + g + 8 * i;
    tok_r[i] = t0 + r / group;
    head_r[i] = g_kv * group + r % group;
    valid_r[i] = r < tokens_per_block * group && tok_r[i] < T;
    pos_r[i] = p0 + (valid_r[i] ? tok_r[i] : 0);
  }
  // Q fragments (A operand, 16 rows x 64 dims = 4 k-steps), bf16.
  uint32_t qa[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {  // dims ks*16 + 2c (+8)
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // rows g, g+8
        float2 v = make_float2(0.f, 0.f);
        if (valid_r[i]) v = *reinterpret_cast<const float2*>(q + (size_t(tok_r[i]) * heads + head_r[i]) * kFaD + ks * 16 + 2 * c + 8 * hi);
        qa[ks][hi * 2 + i] = pack_bf16(v.x, v.y);
      }
    }
  float m[2], l[2], acc[8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    m[i] = __bfloat162float(sinks[head_r[i]]);  // the sink: exp(sink - m) = 1 with m = sink
    l[i] = 0.0f;                                // this thread's share; the quad's shares add up, + 1 for the sink
  }
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[n][j] = 0.0f;
  const int last_tok = min(T, t0 + tokens_per_block) - 1;
  const int key_end = p0 + last_tok;  // inclusive
  const int key_begin = window > 0 ? max(0, p0 + t0 - window + 1) : 0;
  for (int j0 = (key_begin / kFaKeys) * kFaKeys; j0 <= key_end; j0 += kFaKeys) {
    // Load the K tile and the transposed V tile (zeros outside [key_begin, key_end]).
    for (int p = threadIdx.x; p < kFaKeys * kFaD / 8; p += blockDim.x) {
      const int key = p / (kFaD / 8), d0 = (p % (kFaD / 8)) * 8, j = j0 + key;
      uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
      if (j >= key_begin && j <= key_end) {
        const size_t row = kv_row(L, slot, j) * kvn + size_t(g_kv) * kFaD + d0;
        kv4 = *reinterpret_cast<const uint4*>(L.k + row);
        vv4 = *reinterpret_cast<const uint4*>(L.v + row);
      }
      *reinterpret_cast<uint4*>(&Ks[key][d0]) = kv4;
      const bf16* vb = reinterpret_cast<const bf16*>(&vv4);
#pragma unroll
      for (int i = 0; i < 8; ++i) Vt[d0 + i][key] = vb[i];
    }
    __syncthreads();
    // S = Q K^T (16 rows x 64 keys per warp).
    float sc[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) sc[n][j] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&Ks[n * 8 + g][ks * 16 + 2 * c]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&Ks[n * 8 + g][ks * 16 + 2 * c + 8]);
        mma_bf16(sc[n], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
      }
    }
    // Mask, scale, online softmax (rows g: sc[.][0..1], g+8: sc[.][2..3]).
    float tmax[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = j >> 1, key = j0 + n * 8 + 2 * c + (j & 1);
        const bool ok = valid_r[i] && key <= pos_r[i] && key >= key_begin && (window == 0 || pos_r[i] - key < window);
        sc[n][j] = ok ? sc[n][j] * scale : -INFINITY;
        tmax[i] = fmaxf(tmax[i], sc[n][j]);
      }
    float corr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
      const float m_new = fmaxf(m[i], tmax[i]);
      corr[i] = __expf(m[i] - m_new);
      m[i] = m_new;
      l[i] *= corr[i];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = j >> 1;
        sc[n][j] = __expf(sc[n][j] - m[i]);  // masked: exp(-inf) = 0
        l[i] += sc[n][j];
        acc[n][j] *= corr[i];
      }
    // O += P V (P as the A operand straight from the S fragments).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t a0 = pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), a1 = pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
      const uint32_t a2 = pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), a3 = pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&Vt[n * 8 + g][kk * 16 + 2 * c]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&Vt[n * 8 + g][kk * 16 + 2 * c + 8]);
        mma_bf16(acc[n], a0, a1, a2, a3, b0, b1);
      }
    }
    __syncthreads();
  }
  // Finish: the quad's shares of l, + the sink's exp(sink - m).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    l[i] += __expf(__bfloat162float(sinks[head_r[i]]) - m[i]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!valid_r[i]) continue;
    float* op = out + (size_t(tok_r[i]) * heads + head_r[i]) * kFaD;
#pragma unroll
    for (int n = 0; n < 8; ++n)
      *reinterpret_cast<float2*>(op + n * 8 + 2 * c) = make_float2(acc[n][2 * i] / l[i], acc[n][2 * i + 1] / l[i]);
  }
}

}  // namespace

void flash_prefill(const KvLayerView& L, const float* q, const bf16* sinks, int slot, int p0, float* out, int T,
                   int heads, int window, float scale, cudaStream_t s) {
  if (T == 0) return;
  if (L.d != kFaD) fail_plain("flash_prefill: head_dim must be 64");
  const int group = heads / L.kv_heads;
  if (heads % L.kv_heads || group > kFaRows) fail_plain("flash_prefill: unsupported head grouping");
  const int per_block = kFaRows / group;
  dim3 grid(unsigned(L.kv_heads), unsigned((T + per_block - 1) / per_block));
  flash_prefill_kernel<<<grid, 128, 0, s>>>(L, q, sinks, slot, p0, out, T, heads, window, scale);
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace osprey::cuda
