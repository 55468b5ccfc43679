// MXFP4 (OCP MX): groups of 32 E2M1 values along the input dimension sharing one E8M0 scale.
// Byte b of a group holds columns 2b (low nibble) and 2b+1 (high nibble).
#pragma once
#include <cmath>
#include <cstdint>

namespace osprey {

constexpr int kMxfp4Group = 32;       // values per scale
constexpr int kMxfp4GroupBytes = 16;  // packed bytes per group

inline constexpr float kE2M1Values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s - 127), as the reference's ldexp computes it (no NaN special case for 255).
inline float e8m0_to_f32(uint8_t s) { return std::ldexp(1.0f, int(s) - 127); }

// Decode one row of `cols` values: blocks [cols/32][16], scales [cols/32].
inline void mxfp4_decode_row(const uint8_t* blocks, const uint8_t* scales, int cols, float* out) {
  for (int g = 0; g < cols / kMxfp4Group; ++g) {
    float s = e8m0_to_f32(scales[g]);
    for (int b = 0; b < kMxfp4GroupBytes; ++b) {
      uint8_t byte = blocks[g * kMxfp4GroupBytes + b];
      out[g * 32 + 2 * b] = kE2M1Values[byte & 0xF] * s;
      out[g * 32 + 2 * b + 1] = kE2M1Values[byte >> 4] * s;
    }
  }
}

}  // namespace osprey
