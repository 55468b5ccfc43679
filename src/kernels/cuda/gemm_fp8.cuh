// FP8 block-scaled GEMM through cuBLASLt (Hopper: weights BLK128x128_32F, activations
// VEC128_32F), for GEMMs with many rows (prefill). The output is fp32 when cuBLASLt offers an
// algorithm for it, else BF16 converted to fp32 (which one is logged once). Plans are cached per shape.
#pragma once
#include <map>
#include <tuple>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

class BlockFp8Gemm {
 public:
  explicit BlockFp8Gemm(cudaStream_t s);
  ~BlockFp8Gemm();
  BlockFp8Gemm(const BlockFp8Gemm&) = delete;
  BlockFp8Gemm& operator=(const BlockFp8Gemm&) = delete;
  // y [M][N] fp32 = x [M][K] . W [N][K]^T with the scales of formats/fp8.h: W scales
  // [round4(N/128)][round4(K/128)], x scales [K/128][M]. M % 4 == 0 (callers pad), M >= 4.
  void run(const uint8_t* W, const float* ws, const uint8_t* x, const float* xs, float* y, int M, int N, int K);
  // Whether cuBLASLt has an algorithm for this shape (M % 4 == 0); cached.
  bool available(int M, int N, int K);

 private:
  struct Plan;
  Plan* plan(int M, int N, int K);  // null: no algorithm
  cudaStream_t stream_;
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 32u << 20;
  bf16* scratch_ = nullptr;  // BF16 output when fp32 has no algorithm
  size_t scratch_elems_ = 0;
  std::map<std::tuple<int, int, int>, Plan*> plans_;  // null entries: shapes without an algorithm
};

}  // namespace osprey::cuda
