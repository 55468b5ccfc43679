// Device helpers shared by the attention kernels (attention_decode.cu, attention_prefill.cu): KV
// rows of the paged cache and the rings, BF16 splitting, and the online softmax with the sink.
//
// Every softmax state here is in base 2: scores are logits times log2(e) (the kernels fold it
// into the 1/sqrt(d) scale), a state is (m, l, acc) with running max m, sum l = sum 2^(s - m) and
// acc = sum 2^(s - m) v, and states of key ranges merge as sum 2^(m_i - M) (l_i, acc_i).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cfloat>

#include "formats/kv_fp8.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/mma.cuh"

namespace osprey::cuda {

constexpr float kLog2e = 1.4426950408889634f;

// The cache's format as the kernels' template parameter (KvLayerView: f16, fp8()). The tensor
// cores take BF16 operands with the BF16 and FP8 caches (E4M3 codes times 2^e are BF16 values;
// FP16 could not hold 2^e's range) and FP16 operands with the FP16 cache.
enum class KvFormat { Bf16, F16, Fp8 };

__device__ inline float exp2_approx(float x) {  // 2^x, x = -inf gives 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Row of key position j of `slot` in L's K and V arrays: its page's row for full layers, its
// place in the slot's ring for sliding ones.
__device__ inline size_t kv_row(const KvLayerView& L, int slot, int j) {
  if (L.page_table) {
    const int page = L.page_table[size_t(slot) * L.max_pages + j / kPage];
    return size_t(page) * kPage + (j % kPage);
  }
  return size_t(slot) * L.ring + (j % L.ring);
}

// The FP8 cache (formats/kv_fp8.h): where row `row`'s exponent of KV head h lives (a page's
// exponents of one head contiguous, so a 64-key tile's are 64 consecutive bytes).
__device__ inline size_t kv_exp_index(size_t row, int h, int kv_heads) {
  return (row / kPage * kv_heads + h) * kPage + row % kPage;
}
// 2^e, exactly (|e| <= kv_fp8::kExpMax).
__device__ inline float kv_pow2(int e) { return __uint_as_float(uint32_t(e + 127) << 23); }
// kv_fp8::row_exponent on the device: the same bit arithmetic.
__device__ inline int kv_row_exponent(float amax) {
  const uint32_t b = __float_as_uint(amax) & 0x7fffffffu;
  constexpr int lo = kv_fp8::kExpMin, hi = kv_fp8::kExpMax;
  if ((b >> 23) == 0) return lo;
  if (b >= 0x7f800000u) return hi;
  const int e = int(b >> 23) - 135 + ((b & 0x7fffffu) > 0x600000u ? 1 : 0);
  return min(max(e, lo), hi);
}
// Two E4M3 codes (low byte first) as an FP16 pair, exactly (every E4M3 value is an FP16 value):
// one conversion instruction.
__device__ inline uint32_t e4m3x2_to_f16x2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(codes & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
// The same as floats.
__device__ inline float2 e4m3x2_to_float2(uint32_t codes) {
  const uint32_t h = e4m3x2_to_f16x2(codes);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}
// Two E4M3 codes as a BF16 pair, exactly.
__device__ inline uint32_t e4m3x2_to_bf16x2(uint32_t codes) {
  const float2 f = e4m3x2_to_float2(codes);
  return pack_bf16(f.x, f.y);
}
// Eight E4M3 codes as eight BF16 values (same order).
__device__ inline uint4 e4m3x8_to_bf16x8(uint2 w) {
  return make_uint4(e4m3x2_to_bf16x2(w.x), e4m3x2_to_bf16x2(w.x >> 16), e4m3x2_to_bf16x2(w.y),
                    e4m3x2_to_bf16x2(w.y >> 16));
}
// Eight E4M3 codes as eight FP16 values (same order), exactly.
__device__ inline uint4 e4m3x8_to_f16x8(uint2 w) {
  return make_uint4(e4m3x2_to_f16x2(w.x), e4m3x2_to_f16x2(w.x >> 16), e4m3x2_to_f16x2(w.y), e4m3x2_to_f16x2(w.y >> 16));
}
// Eight E4M3 codes times 2^e as eight BF16 values, exactly.
__device__ inline uint4 e4m3x8_to_bf16x8_scaled(uint2 w, float pow2e) {
  const uint32_t c[4] = {w.x, w.x >> 16, w.y, w.y >> 16};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = e4m3x2_to_float2(c[i]);
    o[i] = pack_bf16(f.x * pow2e, f.y * pow2e);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// x clipped to FP16's finite range, +-65,504 (NaN stays NaN): what the FP16 cache and the FP16
// tensor-core operands take instead of rounding to infinity.
__device__ inline float f16_clip(float x) { return fabsf(x) > 65504.0f ? copysignf(65504.0f, x) : x; }
// x as the FP16 cache stores it: round to nearest, clipped (core/fp16.h's f32_to_f16_satfinite:
// the same bits, NaN aside), as raw bits.
__device__ inline uint16_t f16_satfinite_bits(float x) { return __half_as_ushort(__float2half_rn(f16_clip(x))); }
// x as the 16-bit cache stores it (FP16 clipped, or BF16), as raw bits.
__device__ inline uint16_t kv16_bits(float x, bool f16) {
  return f16 ? f16_satfinite_bits(x) : __bfloat16_as_ushort(__float2bfloat16(x));
}
// Two values as the 16-bit cache stores them, packed (lo first).
__device__ inline uint32_t pack_kv16(float lo, float hi, bool f16) {
  return f16 ? uint32_t(f16_satfinite_bits(lo)) | (uint32_t(f16_satfinite_bits(hi)) << 16) : pack_bf16(lo, hi);
}

// Two query values as the tensor cores' 16-bit A operand: FP16 clipped as the cache's values are
// (kF16), or BF16.
template <bool kF16>
__device__ inline uint32_t pack_q16(float lo, float hi) {
  if constexpr (kF16) return pack_kv16(lo, hi, true);
  else return pack_bf16(lo, hi);
}

// A warp writes one cache row (K or V of KV head h at cache row `row`): lane holds the values of
// dims idx[i] (idx[i] < 0: none), N per lane, d in all. BF16, FP16 (L.f16), or E4M3 codes and the row's exponent.
template <int N>
__device__ inline void store_kv_row_warp(const KvLayerView& L, bool is_v, size_t row, int h, const float (&val)[N],
                                         const int (&idx)[N]) {
  const size_t base = (row * L.kv_heads + h) * size_t(L.d);
  if (!L.fp8()) {
    uint16_t* dst = (is_v ? L.v : L.k) + base;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (idx[i] >= 0) dst[idx[i]] = kv16_bits(val[i], L.f16);
    return;
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (idx[i] >= 0) amax = fmaxf(amax, fabsf(val[i]));
  const int e = kv_row_exponent(warp_max(amax));
  const float inv = kv_pow2(-e);
  uint8_t* dst = (is_v ? L.v8 : L.k8) + base;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (idx[i] >= 0) dst[idx[i]] = e4m3_code(val[i] * inv);
  if ((threadIdx.x & 31) == 0) (is_v ? L.v_exp : L.k_exp)[kv_exp_index(row, h, L.kv_heads)] = int8_t(e);
}

// (a, b) as two bf16 pairs whose sum carries ~16 significant bits of each value.
__device__ inline void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 f = __bfloat1622float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_bf16(a - f.x, b - f.y);
}

// The same in FP16 (kF16) or BF16, by the cache's 16-bit type. FP16 pairs carry 11 bits each, ~22
// together, down to magnitudes near 2^-2 where lo turns subnormal (absolute error at most 2^-25
// below that); values past +-65,504 are clipped first, as the cache's and pack_q16's are (an
// infinite hi would make lo -inf and the score NaN). kClip false: the caller's values are known
// to be within [-1, 1] (softmax weights), and the clip is left out.
template <bool kF16, bool kClip = true>
__device__ inline void split_16(float a, float b, uint32_t& hi, uint32_t& lo) {
  if constexpr (kF16) {
    if constexpr (kClip) a = f16_clip(a), b = f16_clip(b);
    const __half2 h = __floats2half2_rn(a, b);
    const float2 f = __half22float2(h);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = pack_f16(a - f.x, b - f.y);
  } else {
    split_bf16(a, b, hi, lo);
  }
}

// The attention sink, written once for every kernel: a head's learned logit joins each row's
// softmax denominator exactly once and its numerator never. A state seeds from it: the state that
// owns the sink (the first key range's; of the threads that share a row's sum, the one that is
// sum_owner) starts at m = sink (base 2) and l = 2^(sink - m) = 1, every other state starts empty
// (m below every score, l = 0), and the merges of states then count it once.
__device__ inline void seed_softmax_with_sink(float& m, float& l, const bf16* sinks, int head, bool owns_sink,
                                              bool sum_owner = true) {
  m = owns_sink ? __bfloat162float(sinks[head]) * kLog2e : -FLT_MAX;
  l = owns_sink && sum_owner ? 1.0f : 0.0f;
}

// One tile of 8 NT keys of the FlashAttention-2 online softmax, for a thread's two rows of a
// 16-row MMA tile (row g: s[.][0..1], row g + 8: s[.][2..3]; the layout of mma.sync's m16n8 and of
// wgmma's accumulators alike). s holds raw scores (masked ones -inf) that `scale` takes to base-2
// logits: the quad's row maximum updates the running max m, this thread's share of the sum l is
// rescaled, s becomes the tile's weights 2^(s scale - m) (added to l), and corr the factor by
// which the accumulators must be rescaled (acc *= corr, applied by the caller once they are free).
template <int NT>
__device__ inline void online_softmax_weights(float (&s)[NT][4], float (&m)[2], float (&l)[2], float scale,
                                              float (&corr)[2]) {
  float tmax[2] = {-FLT_MAX, -FLT_MAX};
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) tmax[e >> 1] = fmaxf(tmax[e >> 1], s[n][e]);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
    tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
    const float m_new = fmaxf(m[i], tmax[i] * scale);
    corr[i] = exp2_approx(m[i] - m_new);
    m[i] = m_new;
    l[i] *= corr[i];
  }
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2_approx(fmaf(s[n][e], scale, -m[e >> 1]));  // masked: 2^-inf = 0
      l[e >> 1] += s[n][e];
    }
}
// The accumulators of d = 64 (acc [8][4], rows as s's) times the rows' factors.
__device__ inline void rescale_rows(float (&acc)[8][4], const float (&corr)[2]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] *= corr[e >> 1];
}
// Both at once, for a kernel whose accumulators are not in flight.
template <int NT>
__device__ inline void online_softmax_tile(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&acc)[8][4],
                                           float scale) {
  float corr[2];
  online_softmax_weights(s, m, l, scale, corr);
  rescale_rows(acc, corr);
}

// The weight of a partial state (max m_i, sum l_i) in a merge whose largest max is M; an empty
// state (l_i = 0) weighs nothing.
__device__ inline float merge_weight(float m_i, float l_i, float M) { return l_i > 0.0f ? exp2_approx(m_i - M) : 0.0f; }

}  // namespace osprey::cuda
