// The FP8 KV cache's format (--kv-cache-dtype fp8): each row of head_dim keys or values of one
// (position, KV head) is stored as E4M3 codes (formats/fp8.h: round to nearest even, saturating)
// times 2^e, with one int8 exponent e per row: the smallest e for which the row's largest magnitude
// is at most 448 * 2^e. A power of two, not amax / 448: a code times 2^e is exact in BF16 and in
// fp32, so a kernel may apply it to the code, to a score or to a softmax weight and get the same
// bits, and the CPU emulation (model/gpt_oss_forward.cpp) holds what every kernel reads. Relative
// precision is E4M3's (3 mantissa bits) for every value above 2^-6 of the row's scale.
//
// On the GPU the codes live where the BF16 cache keeps its values ([rows][kv_heads][d] bytes) and
// the exponents in [rows / kPage][kv_heads][kPage] (one page's exponents of a KV head contiguous:
// kv_exp_index). The CUDA writers and readers are kernels/cuda/rope_kv*.cu, attention_*.cu.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "formats/fp8.h"

namespace osprey::kv_fp8 {

// 2^e and 2^-e are normal floats, and a code times 2^e (E4M3's smallest is 2^-9) is exact in BF16
// and fp32, including BF16's subnormals: the row exponent is clamped to this range.
constexpr int kExpMin = -100, kExpMax = 100;

// The row exponent of a row whose largest magnitude is amax (>= 0): exact bit arithmetic, the same
// on the CPU and the GPU. amax = f 2^E with f in [1, 2): f <= 1.75 needs e = E - 8 (448 = 1.75 2^8),
// else E - 7. Zero or subnormal amax: kExpMin; infinite or NaN: kExpMax (their codes saturate).
inline int row_exponent(float amax) {
  uint32_t b;
  std::memcpy(&b, &amax, 4);
  b &= 0x7fffffffu;
  if ((b >> 23) == 0) return kExpMin;
  if (b >= 0x7f800000u) return kExpMax;
  const int e = int(b >> 23) - 127 - 8 + ((b & 0x7fffffu) > 0x600000u ? 1 : 0);
  return std::clamp(e, kExpMin, kExpMax);
}

// 2^e for e in [kExpMin, kExpMax], exactly.
inline float pow2(int e) {
  const uint32_t b = uint32_t(e + 127) << 23;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The exponent of a row of d values.
inline int row_exponent(const float* x, int d) {
  float amax = 0.0f;
  for (int i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
  return row_exponent(amax);
}

// One row of d values: codes[d] and its exponent.
inline int8_t quantize_row(const float* x, int d, uint8_t* codes) {
  const int e = row_exponent(x, d);
  const float inv = pow2(-e);
  for (int i = 0; i < d; ++i) codes[i] = fp8::from_f32(x[i] * inv);
  return int8_t(e);
}

inline float dequantize(uint8_t code, int e) { return fp8::to_f32(code) * pow2(e); }

// What the cache holds of a row: x rounded through its codes in place (the CPU emulation).
inline void round_row(float* x, int d) {
  const int e = row_exponent(x, d);
  const float inv = pow2(-e);
  for (int i = 0; i < d; ++i) x[i] = dequantize(fp8::from_f32(x[i] * inv), e);
}

}  // namespace osprey::kv_fp8
