// MXFP4 weights as FP8 E4M3 on the device (formats/mxfp4.h mxfp4_to_fp8, bit for bit): a group's
// 32 E2M1 codes at scale distance d = Smax - S become E4M3 codes of E2M1 * 2^(6 - d), looked up
// four at a time from the packed words' bits in a table of the 8 magnitudes per distance. The
// conversion pass (moe_gemm_mxfp4.cu) and the grouped FP8 GEMM's mainloop (moe_gemm_fp8.cu)
// both convert through these.
#pragma once
#include <cstdint>

#include "formats/mxfp4.h"
#include "kernels/cuda/device_math.cuh"

namespace osprey::cuda {

// E2M1 magnitude m (0..7): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ inline float e2m1_magnitude(int m) {
  return m < 4 ? 0.5f * float(m) : float(1 << (m / 2 - 1)) * (1.0f + 0.5f * float(m % 2));
}

// The E4M3 codes of the 8 E2M1 magnitudes at scale distance d = 0 .. kMxfp4Fp8ZeroSpan, and one
// more entry of zeros for every larger d: bytes m of row d, PRMT's two source words. Every thread
// of the block takes its share.
constexpr int kFp8Distances = kMxfp4Fp8ZeroSpan + 2;
__device__ inline void fill_fp8_magnitudes(uint8_t (*mag)[8]) {
  for (int i = threadIdx.x; i < kFp8Distances * 8; i += blockDim.x) {
    const int d = i / 8, m = i % 8;
    mag[d][m] = d > kMxfp4Fp8ZeroSpan ? uint8_t(0) : e4m3_code(ldexpf(e2m1_magnitude(m), kMxfp4Fp8Shift - d));
  }
}

// The scale distance of a group whose E8M0 scale is s in a block whose largest is smax, as the
// magnitude table's row (clamped: d >= 0 by construction, the zero row past kMxfp4Fp8ZeroSpan).
__device__ inline int mxfp4_fp8_distance(int smax, int s) { return min(max(smax - s, 0), kMxfp4Fp8ZeroSpan + 1); }

// One group's 32 codes (16 bytes of a tile, the packed words) as E4M3 at the table's row m:
// columns 8w + 4h + q are byte q of codes[2w + h], so codes[0..7] are the group's columns in order.
__device__ inline void mxfp4_group_to_e4m3(uint4 raw, uint2 m, uint32_t (&codes)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    codes[2 * w] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<0>(words[w])) | mxfp4_packed_signs<0>(words[w]);
    codes[2 * w + 1] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<1>(words[w])) | mxfp4_packed_signs<1>(words[w]);
  }
}

}  // namespace osprey::cuda
