// bfloat16 storage type: raw uint16 bits, converted to float for arithmetic.
#pragma once
#include <cstdint>
#include <cstring>

namespace osprey {

using bf16 = uint16_t;  // raw bits; never do arithmetic on it

inline float bf16_to_f32(bf16 b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16(u >> 16);
}

}  // namespace osprey
