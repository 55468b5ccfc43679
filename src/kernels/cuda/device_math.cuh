// Device-side math shared by several kernels (included by .cu files only).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

namespace osprey::cuda {

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Warp-wide (value, index) maximum; ties go to the lower index.
__device__ inline void warp_argmax(float& best, int& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
  }
}

// gpt-oss clamped SwiGLU of one (gate, up) pair: min(g, limit) * sigmoid(alpha g) * (clamp(u) + 1).
__device__ inline float swiglu_clamped(float g, float u, float alpha, float limit) {
  g = fminf(g, limit);
  u = fminf(fmaxf(u, -limit), limit);
  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

// One float4 step of every fp32 router product on the GPU: four fused multiply-adds into acc (x,
// y, z, w), spelled out so that the kernels that sum router rows in different shapes get the same
// bits whatever the compiler would contract.
__device__ inline float dot4_step(float acc, const float4& a, const float4& b) {
  acc = __fmaf_rn(a.x, b.x, acc);
  acc = __fmaf_rn(a.y, b.y, acc);
  acc = __fmaf_rn(a.z, b.z, acc);
  return __fmaf_rn(a.w, b.w, acc);
}

// Four consecutive weights of a row as an fp32 float4: a row of floats as it is, a row of BF16
// (the router as the checkpoint ships it) widened exactly, from half the bytes. Raw is what one
// load brings (loads can be issued ahead of their use), f32 its values.
template <class W>
struct Weights4;
template <>
struct Weights4<float> {
  using Raw = float4;
  __device__ static Raw load(const float* row, int step) { return __ldg(reinterpret_cast<const float4*>(row) + step); }
  __device__ static Raw zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
  __device__ static float4 f32(const Raw& r) { return r; }
  __device__ static float at(const float* row, int k) { return row[k]; }
};
template <>
struct Weights4<__nv_bfloat16> {
  using Raw = uint2;  // four BF16, the first in the low half of x
  __device__ static Raw load(const __nv_bfloat16* row, int step) { return __ldg(reinterpret_cast<const uint2*>(row) + step); }
  __device__ static Raw zero() { return make_uint2(0u, 0u); }
  __device__ static float4 f32(const Raw& r) {
    return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xFFFF0000u), __uint_as_float(r.y << 16),
                       __uint_as_float(r.y & 0xFFFF0000u));
  }
  __device__ static float at(const __nv_bfloat16* row, int k) { return __bfloat162float(row[k]); }
};

// Warp-wide dot product of rows w (fp32, or BF16 taken exactly to fp32) and x (fp32) of length K
// (float4 steps by lane when K % 4 == 0; the order every fp32 router product on the GPU uses, so
// results agree bit for bit: lane l sums the steps l, l + 32, .. in order with dot4_step, then
// warp_sum).
template <class W>
__device__ inline float warp_dot_f32(const W* w, const float* x, int K) {
  const int lane = threadIdx.x & 31;
  float acc = 0;
  if (K % 4 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 8
    for (int k = lane; k < K / 4; k += 32)  // unrolled: 8 steps' loads in flight
      acc = dot4_step(acc, Weights4<W>::f32(Weights4<W>::load(w, k)), x4[k]);
  } else {
    for (int k = lane; k < K; k += 32) acc += Weights4<W>::at(w, k) * x[k];
  }
  return warp_sum(acc);
}

// Router selection by one warp: the top k (<= 16) of logits l[E] (ties: lower index) and the
// softmax over the k selected; lane 0 writes idx[k] and w[k].
__device__ inline void warp_topk_softmax(const float* l, int E, int k, int32_t* idx, float* w) {
  const int lane = threadIdx.x & 31;
  int32_t chosen[16];
  float vals[16];
  for (int j = 0; j < k; ++j) {
    float best = -FLT_MAX;
    int bi = INT32_MAX;
    for (int e = lane; e < E; e += 32) {
      bool taken = false;
      for (int p = 0; p < j; ++p) taken |= chosen[p] == e;
      if (!taken && (l[e] > best || (l[e] == best && e < bi))) best = l[e], bi = e;
    }
    warp_argmax(best, bi);
    // No choice above -FLT_MAX left (NaN or -inf logits, a broken model): the lowest expert not
    // taken, so that the choice is an expert (the sort and the GEMMs index by it) with the weight
    // of a -FLT_MAX logit, instead of INT32_MAX and writes out of bounds.
    if (bi == INT32_MAX)
      for (int e = 0; e < E && bi == INT32_MAX; ++e) {
        bool taken = false;
        for (int p = 0; p < j; ++p) taken |= chosen[p] == e;
        if (!taken) bi = e;
      }
    chosen[j] = bi;
    vals[j] = best;
  }
  if (lane != 0) return;
  float sum = 0;
  for (int j = 0; j < k; ++j) sum += __expf(vals[j] - vals[0]);
  for (int j = 0; j < k; ++j) {
    idx[j] = chosen[j];
    w[j] = __expf(vals[j] - vals[0]) / sum;
  }
}

// The e4m3 code of v (round to nearest even, saturating at 448) and the scale of a block whose
// largest magnitude is amax (formats/fp8.h: amax / 448, 1 for an all-zero block).
__device__ inline uint8_t e4m3_code(float v) { return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)); }
__device__ inline float fp8_block_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }

// The E4M3 codes of one warp's 128-column block at scale sc: lane holds v[i] = column c0 + 4 lane
// + i of a row of K columns; writes the codes of the columns that exist into q_row.
__device__ inline void store_block128_codes(const float (&v)[4], float sc, int c0, int K, uint8_t* q_row) {
  const int c = c0 + (threadIdx.x & 31) * 4;
  if (K % 4 == 0 && (reinterpret_cast<uintptr_t>(q_row) & 3) == 0) {
    // The lane's 4 codes in one 32-bit store (its columns all exist or none do).
    if (c < K) {
      uint32_t packed = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) packed |= uint32_t(e4m3_code(v[i] / sc)) << (8 * i);
      *reinterpret_cast<uint32_t*>(q_row + c) = packed;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (c + i < K) q_row[c + i] = e4m3_code(v[i] / sc);
}

// One warp's block of a 1x128 activation quantization: lane holds v[i] = column c0 + 4 lane + i
// of a row of K columns (0 past K); writes the codes of the columns that exist into q_row and
// returns the block's scale.
__device__ inline float warp_quantize_block128(const float (&v)[4], int c0, int K, uint8_t* q_row) {
  float amax = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float sc = fp8_block_scale(warp_max(amax));
  store_block128_codes(v, sc, c0, K, q_row);
  return sc;
}

// YaRN rotation of one (x1, x2) = (x[i], x[i + d/2]) pair at position pos; inv_freq_i = inv_freq[i].
// The YaRN rotation's factors of pair i at position pos: c cos(pos inv_freq_i), c sin(...).
__device__ inline void rope_factors(int pos, float inv_freq_i, float c, float& cs, float& sn) {
  const float theta = __fmul_rn(float(pos), inv_freq_i);
  sincosf(theta, &sn, &cs);
  cs = __fmul_rn(cs, c);
  sn = __fmul_rn(sn, c);
}
// (x1, x2) rotated by the factors; the roundings spelled out, so that every kernel that rotates
// (the decode rope, the prompt chunks' rope with its table of factors) gives the same bits.
__device__ inline void rotate_by(float x1, float x2, float cs, float sn, float& o1, float& o2) {
  o1 = __fmaf_rn(x1, cs, -__fmul_rn(x2, sn));
  o2 = __fmaf_rn(x2, cs, __fmul_rn(x1, sn));
}
__device__ inline void rotate_values(float x1, float x2, int pos, float inv_freq_i, float c, float& o1, float& o2) {
  float cs, sn;
  rope_factors(pos, inv_freq_i, c, cs, sn);
  rotate_by(x1, x2, cs, sn, o1, o2);
}

// Half-split YaRN rotation of pair i of one head (in may equal out).
__device__ inline void rotate_pair(const float* in, float* out, int i, int half, int pos, const float* inv_freq,
                                   float c) {
  float o1, o2;
  rotate_values(in[i], in[i + half], pos, inv_freq[i], c, o1, o2);
  out[i] = o1;
  out[i + half] = o2;
}

}  // namespace osprey::cuda
