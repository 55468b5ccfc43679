#include "kernels/cuda/gemm_fp8.cuh"

#include <cstdio>
#include <cublasLt.h>

namespace osprey::cuda {

#define OSPREY_LT_CHECK(expr) OSPREY_CUBLAS_STATUS_CHECK("cuBLASLt", expr)

namespace {
__global__ void bf16_to_f32_kernel(const bf16* src, float* dst, size_t n) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat162float(src[i]);
}
}  // namespace

struct BlockFp8Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool f32_out = true;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

BlockFp8Gemm::BlockFp8Gemm(cudaStream_t s) : stream_(s) {
  OSPREY_LT_CHECK(cublasLtCreate(reinterpret_cast<cublasLtHandle_t*>(&lt_)));
  OSPREY_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

BlockFp8Gemm::~BlockFp8Gemm() {
  for (auto& [k, p] : plans_) delete p;
  if (scratch_) cudaFree(scratch_);
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

BlockFp8Gemm::Plan* BlockFp8Gemm::plan(int M, int N, int K) {
  auto key = std::make_tuple(M, N, K);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  auto* lt = static_cast<cublasLtHandle_t>(lt_);
  for (bool f32_out : {true, false}) {
    auto* p = new Plan;
    p->f32_out = f32_out;
    OSPREY_LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
    // Column-major view: A = W stored K x N (op T), B = x stored K x M, D = y stored N x M.
    OSPREY_LT_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, K, N, K));
    OSPREY_LT_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, K, M, K));
    OSPREY_LT_CHECK(cublasLtMatrixLayoutCreate(&p->d, f32_out ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
    cublasLtMatmulPreference_t pref;
    OSPREY_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    OSPREY_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes_, sizeof(workspace_bytes_)));
    // The scale pointers must be set for the heuristic to see the scale modes' constraints.
    const void* dummy = workspace_;
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof(dummy)));
    OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof(dummy)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->d, p->d, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
      p->algo = res.algo;
      static bool logged = false;
      if (!logged) {
        std::fprintf(stderr, "cuBLASLt FP8 block-scaled GEMM: %s output\n", f32_out ? "fp32" : "bf16");
        logged = true;
      }
      plans_[key] = p;
      return p;
    }
    delete p;
  }
  plans_[key] = nullptr;
  return nullptr;
}

bool BlockFp8Gemm::available(int M, int N, int K) { return M >= 4 && M % 4 == 0 && plan(M, N, K) != nullptr; }

void BlockFp8Gemm::run(const uint8_t* W, const float* ws, const uint8_t* x, const float* xs, float* y, int M, int N,
                       int K) {
  if (M % 4 || M < 4) fail_plain("BlockFp8Gemm: M must be a positive multiple of 4 (got " + std::to_string(M) + ")");
  Plan* pp = plan(M, N, K);
  if (!pp)
    fail_plain("cuBLASLt has no FP8 block-scaled algorithm for M=" + std::to_string(M) + " N=" + std::to_string(N) +
               " K=" + std::to_string(K));
  Plan& p = *pp;
  OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws)));
  OSPREY_LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs)));
  const float alpha = 1.0f, beta = 0.0f;
  void* out = y;
  const size_t n = size_t(M) * N;
  if (!p.f32_out) {
    if (scratch_elems_ < n) {
      if (scratch_) cudaFree(scratch_);
      OSPREY_CUDA_CHECK(cudaMalloc(&scratch_, n * sizeof(bf16)));
      scratch_elems_ = n;
    }
    out = scratch_;
  }
  OSPREY_LT_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_), p.desc, &alpha, W, p.a, x, p.b, &beta, out, p.d,
                                 out, p.d, &p.algo, workspace_, workspace_bytes_, stream_));
  if (!p.f32_out) {
    bf16_to_f32_kernel<<<unsigned((n + 255) / 256), 256, 0, stream_>>>(scratch_, y, n);
    OSPREY_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace osprey::cuda
