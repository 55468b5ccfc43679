// BF16 GEMMs through cuBLAS: y [T][N] (fp32) = x [T][K] (bf16) . W [N][K]^T (bf16), fp32 accumulate.
#include <cublas_v2.h>

#include "kernels/cuda/gemm.cuh"

namespace osprey::cuda {

#define OSPREY_CUBLAS_CHECK(expr) OSPREY_CUBLAS_STATUS_CHECK("cuBLAS", expr)

Blas::Blas(cudaStream_t s) {
  OSPREY_CUBLAS_CHECK(cublasCreate(reinterpret_cast<cublasHandle_t*>(&handle_)));
  OSPREY_CUBLAS_CHECK(cublasSetStream(static_cast<cublasHandle_t>(handle_), s));
  OSPREY_CUBLAS_CHECK(cublasSetMathMode(static_cast<cublasHandle_t>(handle_), CUBLAS_DEFAULT_MATH));
  // A workspace of its own, so that GEMMs captured into a CUDA graph allocate nothing.
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess ||
      cublasSetWorkspace(static_cast<cublasHandle_t>(handle_), workspace_, kWorkspaceBytes) != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(static_cast<cublasHandle_t>(handle_));
    if (workspace_) cudaFree(workspace_);
    fail_plain("cuBLAS: no GPU memory for its 32 MiB workspace");
  }
}

Blas::~Blas() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
  if (workspace_) cudaFree(workspace_);
}

void Blas::gemm_bf16(const bf16* W, const bf16* x, float* y, int T, int N, int K) {
  if (T == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: W is K x N (lda K), x is K x T (ldb K), y is N x T (ldc N); y = W^T x.
  OSPREY_CUBLAS_CHECK(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W,
                                   CUDA_R_16BF, K, x, CUDA_R_16BF, K, &beta, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

void Blas::gemm_f32(const float* W, const float* x, float* y, int T, int N, int K) {
  if (T == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  OSPREY_CUBLAS_CHECK(cublasSgemm(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, K,
                                  x, K, &beta, y, N));
}

}  // namespace osprey::cuda
