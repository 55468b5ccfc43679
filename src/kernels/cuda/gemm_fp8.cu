#include "kernels/cuda/gemm_fp8.cuh"

#include <cstdio>
#include <cstdlib>
#include <cublasLt.h>
#include <mutex>
#include <string>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/gemm_fp8_skinny.cuh"

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

BlockFp8Gemm::Plan* BlockFp8Gemm::plan(int M, int N, int K, WeightScales wmode) {
  auto key = std::make_tuple(M, N, K, wmode);
  if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  auto* lt = static_cast<cublasLtHandle_t>(lt_);
  for (bool f32_out : {true, false}) {
    auto* p = new Plan;
    p->f32_out = f32_out;
    OSPREY_LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t a_mode = wmode == WeightScales::Row1x128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                           : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
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

bool BlockFp8Gemm::available(int M, int N, int K, WeightScales wmode) {
  return M >= 4 && M % 4 == 0 && (wmode == WeightScales::Block128x128 || N % 4 == 0) && plan(M, N, K, wmode) != nullptr;
}

void BlockFp8Gemm::run(const uint8_t* W, const float* ws, const uint8_t* x, const float* xs, float* y, int M, int N,
                       int K, WeightScales wmode) {
  if (M % 4 || M < 4) fail_plain("BlockFp8Gemm: M must be a positive multiple of 4 (got " + std::to_string(M) + ")");
  if (wmode == WeightScales::Row1x128 && N % 4)
    fail_plain("BlockFp8Gemm: 1x128 weight scales need N % 4 == 0 (got " + std::to_string(N) + ")");
  Plan* pp = plan(M, N, K, wmode);
  if (!pp)
    fail_plain("cuBLASLt has no FP8 block-scaled algorithm for M=" + std::to_string(M) + " N=" + std::to_string(N) +
               " K=" + std::to_string(K) + (wmode == WeightScales::Row1x128 ? " with 1x128 weight scales" : ""));
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


namespace {

template <int NT, int R, int MINB>
__global__ void __launch_bounds__(kSkinnyWarps * 32, MINB) fp8_skinny_kernel(Fp8SkinnyArgs args) {
  fp8_skinny_body<NT, R>(args, VBlock::this_block(), PdlSync{});
}

using SkinnyKernel = void (*)(Fp8SkinnyArgs);

// What fp8_gemm_skinny launches for a shape: the tile's kernel (NT, R, blocks an SM), its stage
// and its K-splits. The persistent decode kernel plans its dense GEMMs with the same splits
// (fp8_dense_k_splits), so its sums are this path's.
struct SkinnyPlan {
  SkinnyKernel kernel;
  int ks;
  size_t smem;
};
void check_skinny_k(int K) {
  if (K % 16) fail_plain("fp8 GEMM: K must be a multiple of 16 (got " + std::to_string(K) + ")");
}
constexpr int kMaxStage = 200 * 1024;

SkinnyPlan skinny_plan(int N, int K, int segments, int rows_max, int rows_hint) {
  static std::once_flag once;  // set outside any graph capture's dependence on it: once, for the largest stage
  std::call_once(once, [] {
    for (auto k : {fp8_skinny_kernel<1, 1, 3>, fp8_skinny_kernel<1, 8, 2>, fp8_skinny_kernel<2, 16, 1>,
                   fp8_skinny_kernel<4, 32, 1>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStage));
  });
  const int row_tiles = (N + 15) / 16, sms = sm_count();
  auto blocks = [&](int k) { return size_t(row_tiles * k + kSkinnyWarps - 1) / kSkinnyWarps * segments; };
  // The bytes in flight, i.e. the warps streaming at once, set a decode GEMM's speed
  // (skinny_k_splits).
  auto plan = [&](SkinnyKernel kernel, int NT, int R) {
    const size_t smem = skinny_smem_bytes(NT, R, K);
    if (smem > kMaxStage) fail_plain("fp8 GEMM: K = " + std::to_string(K) + " is too long to stage");
    const int per_sm = resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), kSkinnyWarps * 32, smem);
    return SkinnyPlan{kernel, skinny_k_splits(N, K, segments, sms, per_sm), smem};
  };
  // The one-row tile (3 blocks per SM) only where its grid is one wave: the long unembedding keeps
  // the 8-row tile at 2 blocks per SM (under ncu 170 us with it, 188 us with the one-row tile).
  const bool one_wave = blocks(1) <= size_t(3) * sms;
  if (rows_hint <= 8 && rows_max == 1 && one_wave) return plan(fp8_skinny_kernel<1, 1, 3>, 1, 1);
  if (rows_hint <= 8) return plan(fp8_skinny_kernel<1, 8, 2>, 1, 8);
  if (rows_hint <= 16) return plan(fp8_skinny_kernel<2, 16, 1>, 2, 16);
  return plan(fp8_skinny_kernel<4, 32, 1>, 4, 32);
}

// The launcher behind fp8_gemm_dense and m_grouped_fp8_gemm_contiguous.
void fp8_gemm_skinny(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                     const float* xs, ActSegments sg, float* y, int y_ld, bool accumulate, int N, int K,
                     int rows_hint, cudaStream_t st) {
  check_skinny_k(K);
  if (!sg.seg && sg.rows == 0) return;
  const int segments = !sg.seg ? 1 : sg.active ? sg.active_max : sg.experts;
  // Rows a launch can have per pass: a dense matrix's rows; a segment's bound when known.
  const int rows_max = !sg.seg ? sg.rows : sg.rows_max > 0 ? sg.rows_max : 32;
  const SkinnyPlan p = skinny_plan(N, K, segments, rows_max, rows_hint);
  const dim3 grid(unsigned(skinny_grid_x(N, p.ks)), unsigned(segments));
  launch_pdl("gemm", p.kernel, grid, kSkinnyWarps * 32, p.smem, st,
             Fp8SkinnyArgs{W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K, p.ks});
}

}  // namespace

void fp8_gemm_dense(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                    const float* xs, int x_ld, float* y, int y_ld, bool accumulate, int N, int K, int T, int rows_hint,
                    cudaStream_t st) {
  if (x_ld < T) fail_plain("fp8_gemm_dense: the scales' stride is below the row count");
  ActSegments sg;
  sg.rows = T, sg.ld = x_ld;
  fp8_gemm_skinny(W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K, rows_hint, st);
}

int fp8_dense_k_splits(int N, int K, int T) {
  check_skinny_k(K);
  return skinny_plan(N, K, 1, T, T).ks;
}

void m_grouped_fp8_gemm_contiguous(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias,
                                   const uint8_t* x, const float* xs, const Fp8ExpertRows& rows, float* y, int N, int K,
                                   int rows_hint, cudaStream_t st) {
  if (!rows.seg || rows.experts < 1) fail_plain("m_grouped_fp8_gemm_contiguous: the rows need their experts' segments");
  ActSegments sg;
  static_cast<Fp8ExpertRows&>(sg) = rows;
  fp8_gemm_skinny(W, ws, ws_stride, bias, x, xs, sg, y, N, false, N, K, rows_hint, st);
}

}  // namespace osprey::cuda
