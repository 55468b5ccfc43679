// cuBLAS handle bound to a stream, and the BF16 GEMM the BF16 path uses.
#pragma once
#include <cstddef>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

class Blas {
 public:
  explicit Blas(cudaStream_t s);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // y [T][N] fp32 = x [T][K] bf16 . W [N][K]^T bf16
  void gemm_bf16(const bf16* W, const bf16* x, float* y, int T, int N, int K);
  // y [T][N] = x [T][K] . W [N][K]^T, all fp32 (no TF32)
  void gemm_f32(const float* W, const float* x, float* y, int T, int N, int K);

 private:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace osprey::cuda
