// Warp-level tensor-core primitives (mma.sync, ldmatrix, sm_80+; e4m3 sm_89+) shared by the
// attention, the FP8 GEMM and the MXFP4 expert kernels. Fragment layouts are PTX's for m16n8k16:
// a thread (lane = 4g + c) holds A rows g and g + 8 at k columns 2c, 2c + 1 (+ 8) and B column g
// at k rows 2c, 2c + 1 (+ 8).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace osprey::cuda {

// d += a (16x16, row-major) . b (16x8, column-major), fp32 accumulators, the operands of 16-bit
// type T (one asm text, the type spliced in).
#define OSPREY_MMA_16816(T)                                                                        \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};\n"                                                                 \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                     \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
// BF16 operands.
__device__ inline void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  OSPREY_MMA_16816("bf16");
}
// FP16 operands.
__device__ inline void mma_f16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                     uint32_t b1) {
  OSPREY_MMA_16816("f16");
}
#undef OSPREY_MMA_16816
// Either, by the 16-bit type of the operands (kF16: FP16, else BF16): the attention kernels'
// products over a BF16 or an FP16 KV cache.
template <bool kF16>
__device__ inline void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                 uint32_t b1) {
  if constexpr (kF16) mma_f16_16816(d, a0, a1, a2, a3, b0, b1);
  else mma_bf16_16816(d, a0, a1, a2, a3, b0, b1);
}

// d += a (16x32, row-major, e4m3) . b (32x8, column-major, e4m3), fp32 accumulators: the same
// fragment layout with 4 codes per register.
__device__ inline void mma_e4m3_16832(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as a BF16 pair (lo in the low half), rounded to nearest.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two floats as an FP16 pair (lo in the low half), rounded to nearest (past +-65,504: infinity).
__device__ inline uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <bool kF16>
__device__ inline uint32_t pack_16(float lo, float hi) {
  if constexpr (kF16) return pack_f16(lo, hi);
  else return pack_bf16(lo, hi);
}

// Four 8x8 16-bit matrices from shared memory (lanes 8i..8i+7 give the 16-byte row addresses of
// matrix i): r[i] is this lane's pair of matrix i, row lane / 4, columns 2 (lane % 4) + {0, 1}.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}
// The same, transposed: r[i] holds rows 2 (lane % 4) + {0, 1} of matrix i at column lane / 4.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

}  // namespace osprey::cuda
