// FP8 block-scaled GEMM through cuBLASLt (Hopper: weights BLK128x128_32F or VEC128_32F,
// activations VEC128_32F), for GEMMs with many rows (prefill). The output is fp32 when cuBLASLt offers an
// algorithm for it, else BF16 converted to fp32 (which one is logged once). Plans are cached per shape.
#pragma once
#include <map>
#include <tuple>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// How the weights' fp32 scales cover them: one per 128x128 block (formats/fp8.h Matrix, the FP8
// checkpoint's), or one per 128 columns of a row, [ceil(K/128)][N] (MXFP4 experts converted for a
// prompt chunk: formats/mxfp4.h mxfp4_to_fp8).
enum class WeightScales { Block128x128, Row1x128 };

class BlockFp8Gemm {
 public:
  explicit BlockFp8Gemm(cudaStream_t s);
  ~BlockFp8Gemm();
  BlockFp8Gemm(const BlockFp8Gemm&) = delete;
  BlockFp8Gemm& operator=(const BlockFp8Gemm&) = delete;
  // y [M][N] fp32 = x [M][K] . W [N][K]^T with the scales of formats/fp8.h: W scales
  // [round4(N/128)][round4(K/128)] (Block128x128) or [ceil(K/128)][N] (Row1x128, N % 4 == 0),
  // x scales [K/128][M]. M % 4 == 0 (callers pad), M >= 4.
  void run(const uint8_t* W, const float* ws, const uint8_t* x, const float* xs, float* y, int M, int N, int K,
           WeightScales wmode = WeightScales::Block128x128);
  // Whether cuBLASLt has an algorithm for this shape (M % 4 == 0); cached.
  bool available(int M, int N, int K, WeightScales wmode = WeightScales::Block128x128);

 private:
  struct Plan;
  Plan* plan(int M, int N, int K, WeightScales wmode);  // null: no algorithm
  cudaStream_t stream_;
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  bf16* scratch_ = nullptr;  // BF16 output when fp32 has no algorithm
  size_t scratch_elems_ = 0;
  std::map<std::tuple<int, int, int, WeightScales>, Plan*> plans_;  // null entries: shapes without an algorithm
};

}  // namespace osprey::cuda
