// Writes of K and V into the paged BF16, FP16 or FP8 cache (attention.cuh): plain, or with the YaRN rotation
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

// Rows that are not decode rows (prompt chunks, verify chunks; head_dim 64): kRopeTokens tokens a
// block, 8 threads a head (q, k or v) of each, a thread 4 pairs (i, i + 32) of its head read as two
// float4s. The rotation's factors come from a table the block computes once per token and pair
// (rope_factors: the bits the decode rope computes per value), all of a thread's loads are issued
// before any is used, and the cache rows are written 4 values at once (FP8: the row exponent over
// the head's 8 threads, as store_kv_row_warp finds it over a warp).
constexpr int kRopeTokens = 2, kRopeD = 64;
__global__ void __launch_bounds__(1024) qkv_rope_rows_kernel(KvLayerView L, const float* __restrict__ qkv,
                                                             const int32_t* slots, const int32_t* positions,
                                                             const float* inv_freq, float c, int heads, int T,
                                                             float* __restrict__ q, const bf16* __restrict__ bias) {
  constexpr int half = kRopeD / 2;
  __shared__ float2 fac[kRopeTokens][half];  // (c cos, c sin) of pair i of each token
  pdl_wait();
  pdl_launch_dependents();
  const int t0 = int(blockIdx.x) * kRopeTokens, nt = min(kRopeTokens, T - t0), kvh = L.kv_heads;
  const int width = (heads + 2 * kvh) * kRopeD;
  if (int(threadIdx.x) < nt * half) {
    const int tt = threadIdx.x / half, i = threadIdx.x % half;
    float cs, sn;
    rope_factors(positions[t0 + tt], inv_freq[i], c, cs, sn);
    fac[tt][i] = make_float2(cs, sn);
  }
  const int unit = threadIdx.x / 8, sub = threadIdx.x % 8, i0 = 4 * sub, col = unit * kRopeD + i0;
  float4 lo[kRopeTokens], hi[kRopeTokens];
#pragma unroll
  for (int tt = 0; tt < kRopeTokens; ++tt)
    if (tt < nt) {
      const float* src = qkv + size_t(t0 + tt) * width + col;
      lo[tt] = __ldcs(reinterpret_cast<const float4*>(src));
      hi[tt] = __ldcs(reinterpret_cast<const float4*>(src + half));
    }
  if (bias) {
    float b[8];
    const uint2 bl = *reinterpret_cast<const uint2*>(bias + col), bh = *reinterpret_cast<const uint2*>(bias + col + half);
    const uint32_t w[4] = {bl.x, bl.y, bh.x, bh.y};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(&w[u]);
      b[2 * u] = __low2float(p), b[2 * u + 1] = __high2float(p);
    }
#pragma unroll
    for (int tt = 0; tt < kRopeTokens; ++tt) {
      lo[tt].x += b[0], lo[tt].y += b[1], lo[tt].z += b[2], lo[tt].w += b[3];
      hi[tt].x += b[4], hi[tt].y += b[5], hi[tt].z += b[6], hi[tt].w += b[7];
    }
  }
  __syncthreads();
  const bool is_v = unit >= heads + kvh;
  const int h = unit - heads - (is_v ? kvh : 0);  // the KV head (k and v units)
#pragma unroll
  for (int tt = 0; tt < kRopeTokens; ++tt) {
    if (tt >= nt) break;
    const int t = t0 + tt;
    float x1[4] = {lo[tt].x, lo[tt].y, lo[tt].z, lo[tt].w}, x2[4] = {hi[tt].x, hi[tt].y, hi[tt].z, hi[tt].w};
    float o1[4], o2[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (is_v) {
        o1[u] = x1[u], o2[u] = x2[u];
      } else {
        const float2 f = fac[tt][i0 + u];
        rotate_by(x1[u], x2[u], f.x, f.y, o1[u], o2[u]);
      }
    }
    if (unit < heads) {
      float* qd = q + (size_t(t) * heads + unit) * kRopeD;
      *reinterpret_cast<float4*>(qd + i0) = make_float4(o1[0], o1[1], o1[2], o1[3]);
      *reinterpret_cast<float4*>(qd + i0 + half) = make_float4(o2[0], o2[1], o2[2], o2[3]);
      continue;
    }
    const size_t row = kv_row(L, slots[t], positions[t]), base = (row * kvh + h) * kRopeD;
    if (!L.fp8()) {
      uint16_t* dst = (is_v ? L.v : L.k) + base;
      *reinterpret_cast<uint2*>(dst + i0) = make_uint2(pack_kv16(o1[0], o1[1], L.f16), pack_kv16(o1[2], o1[3], L.f16));
      *reinterpret_cast<uint2*>(dst + i0 + half) =
          make_uint2(pack_kv16(o2[0], o2[1], L.f16), pack_kv16(o2[2], o2[3], L.f16));
      continue;
    }
    float amax = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) amax = fmaxf(amax, fmaxf(fabsf(o1[u]), fabsf(o2[u])));
#pragma unroll
    for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    const int e = kv_row_exponent(amax);
    const float inv = kv_pow2(-e);
    uint32_t c1 = 0, c2 = 0;
#pragma unroll
    for (int u = 0; u < 4; ++u)
      c1 |= uint32_t(e4m3_code(o1[u] * inv)) << (8 * u), c2 |= uint32_t(e4m3_code(o2[u] * inv)) << (8 * u);
    uint8_t* dst = (is_v ? L.v8 : L.k8) + base;
    *reinterpret_cast<uint32_t*>(dst + i0) = c1;
    *reinterpret_cast<uint32_t*>(dst + i0 + half) = c2;
    if (sub == 0) (is_v ? L.v_exp : L.k_exp)[kv_exp_index(row, h, kvh)] = int8_t(e);
  }
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
  // Every warp of the rows kernel takes 4 heads of one kind (q, k or v: the FP8 cache's exponent
  // is a shuffle over the warp's k or v lanes), so heads and KV heads come in fours.
  const int threads = (heads + 2 * L.kv_heads) * 8;
  if (!decode_rows && L.d == kRopeD && threads <= 1024 && heads % 4 == 0 && L.kv_heads % 4 == 0 &&
      ((reinterpret_cast<uintptr_t>(qkv) | reinterpret_cast<uintptr_t>(q)) % 16) == 0 &&
      reinterpret_cast<uintptr_t>(bias) % 8 == 0) {
    launch_pdl("rope", qkv_rope_rows_kernel, unsigned((rows + kRopeTokens - 1) / kRopeTokens), threads, 0, s, L, qkv,
               slot, pos, inv_freq, concentration, heads, rows, q, bias);
    return;
  }
  launch_pdl("rope", qkv_rope_to_cache_kernel, rows, 1024, 0, s, L, qkv, slot, pos, inv_freq, concentration, heads, q,
             decode_rows, bias);
}

}  // namespace osprey::cuda
