// IEEE binary16 (FP16) storage: raw uint16 bits, converted to float for arithmetic, as bf16.h.
// The FP16 KV cache (--kv-cache-dtype fp16) stores through f32_to_f16_satfinite, on the CPU
// emulation and on the GPU (kernels/cuda/attention_common.cuh) alike.
#pragma once
#include <cstdint>
#include <cstring>

namespace osprey {

using f16 = uint16_t;  // raw bits; never do arithmetic on it

constexpr float kF16Max = 65504.0f;  // the largest finite FP16 value

inline float f16_to_f32(f16 h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // infinity, NaN (payload kept)
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: man * 2^-24, exact in fp32
      float f = float(man) * 0x1p-24f;
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even (subnormals included); NaN stays NaN (quiet); infinities and magnitudes that
// would round past 65,504 become +-65,504 (the largest finite value), not infinity: a cache value
// out of FP16's range is clipped instead of turning every score it meets into NaN.
inline f16 f32_to_f16_satfinite(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7bffu);  // >= 65520 (rounds past 65504), infinity
  const int e = int(a >> 23) - 127;
  if (e >= -14) {  // normal: keep 10 mantissa bits, round to nearest even on the 13 dropped
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return uint16_t(sign | (((r >> 23) - 112) << 10 | ((r >> 13) & 0x3ffu)));  // a carry into the exponent is right
  }
  if (e < -25) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal: the value in units of 2^-24, rounded to nearest even.
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // 24-bit significand, value m 2^(e - 23)
  const int shift = -e - 1;                          // m 2^(e-23) / 2^-24 = m >> (-e - 1)
  const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  const uint32_t rounded = q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
  return uint16_t(sign | rounded);  // 0x400 (the smallest normal) when it rounds up to it
}

}  // namespace osprey
