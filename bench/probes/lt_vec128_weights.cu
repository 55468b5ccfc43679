// Probe: does cuBLASLt 13 on Hopper run FP8 GEMMs with 1x128 (VEC128_32F) scales on BOTH
// operands, and how fast beside the 128x128 weight blocks the FP8 path uses? Also checks the
// weight scale layout [ceil(K/128)][N] against a host reference.
// nvcc -O2 -std=c++20 -gencode=arch=compute_90a,code=sm_90a lt_vec128_weights.cu -lcublasLt -o probe
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { std::printf("%s:%d error %d\n", __FILE__, __LINE__, int(e_)); std::exit(1);} } while (0)

static int r4(int x) { return (x + 3) / 4 * 4; }

int main() {
  cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
  size_t ws_bytes = 32u << 20; void* ws; CK(cudaMalloc(&ws, ws_bytes));
  struct Shape { int M, N, K; };
  Shape shapes[] = {{8192, 5760, 2880}, {8192, 2880, 2880}, {1024, 5760, 2880}, {1024, 2880, 2880}, {256, 5760, 2880}, {128, 2880, 2880}};
  for (Shape s : shapes) {
    const int M = s.M, N = s.N, K = s.K, KB = (K + 127) / 128;
    uint8_t *A, *B; float *As, *Bs, *D;
    CK(cudaMalloc(&A, size_t(N) * K)); CK(cudaMalloc(&B, size_t(M) * K));
    CK(cudaMalloc(&As, size_t(r4(KB)) * r4(N) * 4 + size_t(r4(N / 128 + 1)) * r4(KB) * 4));
    CK(cudaMalloc(&Bs, size_t(r4(KB)) * r4(M) * 4)); CK(cudaMalloc(&D, size_t(M) * N * 4));
    // codes: all 1.0 (0x38); scales: powers of two depending on (kb, n) / (kb, m)
    CK(cudaMemset(A, 0x38, size_t(N) * K)); CK(cudaMemset(B, 0x38, size_t(M) * K));
    std::vector<float> as(size_t(r4(KB)) * r4(N), 1.f), bs(size_t(r4(KB)) * r4(M), 1.f);
    for (int kb = 0; kb < KB; ++kb) for (int n = 0; n < N; ++n) as[size_t(kb) * N + n] = std::ldexp(1.f, (kb * 7 + n) % 5 - 2);
    for (int kb = 0; kb < KB; ++kb) for (int m = 0; m < M; ++m) bs[size_t(kb) * M + m] = std::ldexp(1.f, (kb * 3 + m) % 3 - 1);
    CK(cudaMemcpy(Bs, bs.data(), bs.size() * 4, cudaMemcpyHostToDevice));
    for (int a_mode : {int(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F), int(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F)}) {
      if (a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) CK(cudaMemcpy(As, as.data(), as.size() * 4, cudaMemcpyHostToDevice));
      else { std::vector<float> ab(size_t(r4(N / 128 + 1)) * r4(KB), 1.f); CK(cudaMemcpy(As, ab.data(), ab.size() * 4, cudaMemcpyHostToDevice)); }
      for (cudaDataType_t dt : {CUDA_R_32F, CUDA_R_16BF}) {
        cublasLtMatmulDesc_t desc; CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N; int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &As, sizeof(As)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &Bs, sizeof(Bs)));
        cublasLtMatrixLayout_t la, lb, ld;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, N, K));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, M, K));
        CK(cublasLtMatrixLayoutCreate(&ld, dt, N, M, N));
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
        cublasLtMatmulHeuristicResult_t res{}; int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found);
        const char* an = a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? "A vec128 " : "A blk128x128";
        if (st != 0 || found == 0) { std::printf("M=%d N=%d K=%d %s out %s: NO ALGORITHM (status %d)\n", M, N, K, an, dt == CUDA_R_32F ? "f32" : "bf16", int(st)); continue; }
        float alpha = 1, beta = 0;
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        for (int i = 0; i < 3; ++i) CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws, ws_bytes, 0));
        cudaEventRecord(e0);
        const int reps = 20;
        for (int i = 0; i < reps; ++i) CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws, ws_bytes, 0));
        cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
        float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= reps;
        double err = 0;
        if (dt == CUDA_R_32F) {
          std::vector<float> d(size_t(M) * N); CK(cudaMemcpy(d.data(), D, d.size() * 4, cudaMemcpyDeviceToHost));
          for (int m = 0; m < M; m += 37) for (int n = 0; n < N; n += 13) {
            double ref = 0;
            for (int kb = 0; kb < KB; ++kb) {
              const int len = std::min(128, K - kb * 128);
              const double sa = a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F ? as[size_t(kb) * N + n] : 1.0;
              ref += len * sa * bs[size_t(kb) * M + m];
            }
            err = std::max(err, std::fabs(d[size_t(m) * N + n] - ref) / ref);
          }
        }
        std::printf("M=%d N=%d K=%d %s out %s: %.3f ms, %.0f TFLOP/s, max rel err vs [KB][N] layout %.3g\n", M, N, K, an,
                    dt == CUDA_R_32F ? "f32" : "bf16", ms, 2.0 * M * N * K / ms / 1e9, err);
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
      }
    }
    cudaFree(A); cudaFree(B); cudaFree(As); cudaFree(Bs); cudaFree(D);
  }
  return 0;
}
