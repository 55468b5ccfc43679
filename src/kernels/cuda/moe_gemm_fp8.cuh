// The grouped FP8 GEMM of a prompt chunk's experts on Hopper's warpgroup tensor cores: every
// expert of a layer in one launch, the experts' rows found on the device (no host round trip).
// FP8 experts as loaded and MXFP4 experts converted for the chunk (W4A8) both run it; decode
// steps, with few rows an expert, take the skinny kernels of fp8.cuh instead.
#pragma once
#include "kernels/cuda/gemm_fp8.cuh"
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// y[r][n] = sum_b ws_e(n, b) * xs(r, b) * sum_{k in block b} W_e[n][k] x[r][k] for every row r of
// expert e (K blocks b of 128; a last block of K % 128 columns reads zeros past K). No bias: the
// SwiGLU and the combine add the experts' biases, as for cuBLASLt.
struct GroupedFp8Gemm {
  // Rows sorted by expert (MoeSorted): expert e owns rows [seg[e], seg[e + 1]) of x, every
  // seg[e] a multiple of 4 (moe_route pads each run). Device [experts + 1].
  const int32_t* seg = nullptr;
  int experts = 0;
  const uint8_t* x = nullptr;  // codes [rows][K]
  const float* xs = nullptr;   // scales by expert (ActScales::by_expert: expert e's [ceil(K/128)][len_e] at ceil(K/128) * seg[e])
  int rows = 0;                // the rows x holds (moe_rows_max)
  const uint8_t* w = nullptr;  // codes [experts][N][K]
  const float* ws = nullptr;   // expert e's scales at ws + e * ws_per:
  size_t ws_per = 0;           //   Block128x128 [round4(ceil(N/128))][round4(ceil(K/128))], Row1x128 [ceil(K/128)][N]
  WeightScales wmode = WeightScales::Block128x128;
  float* y = nullptr;  // [rows][N]; rows past seg[experts] are not written
  int N = 0, K = 0;
};
void m_grouped_fp8_gemm_nt_contiguous(const GroupedFp8Gemm& g, cudaStream_t st);

// The experts' first GEMM with the SwiGLU in its epilogue: g's N = 2 I columns are (gate, up)
// pairs, t[r][2i], t[r][2i + 1]; writes what moe_swiglu_quantize makes of t and b1, bit for bit:
// codes q [rows][I] and scales by expert (ActScales::by_expert), for the rows of every segment;
// g.y is not used.
struct GroupedFp8Swiglu {
  const bf16* b1 = nullptr;  // [experts][2 I] or null
  float alpha = 0, limit = 0;
  uint8_t* q = nullptr;
  float* s = nullptr;
  int I = 0;
};
void m_grouped_fp8_gemm_nt_contiguous_swiglu(const GroupedFp8Gemm& g, const GroupedFp8Swiglu& sw, cudaStream_t st);

// Whether the shapes fit it: K % 16 == 0 (rows of whole 16-byte units), N % 4 == 0, at most 256
// experts.
bool m_grouped_fp8_gemm_nt_supported(int N, int K, int experts);

}  // namespace osprey::cuda
