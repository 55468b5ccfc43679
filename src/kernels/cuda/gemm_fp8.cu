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

// ---------------------------------------------------------------------------------------------
// The skinny FP8 GEMM (fp8.cuh fp8_gemm_dense, m_grouped_fp8_gemm_contiguous) puts 16 weight rows on the M side of an
// mma.m16n8k32 e4m3 and up to 8 activation rows (tokens) on the N side, so a decode step reads
// each weight byte once and the tensor cores do the arithmetic. Because a dot product may visit
// k in any order as long as both operands agree, each thread loads 16 contiguous bytes of its
// weight row and of its token row and feeds them to the mma's k slots in the same order:
// 16-byte coalesced loads, no shared memory, no shuffles.

namespace {

// Activations: written by the kernel before, which under PDL may still have been running when
// this one started, so never through the non-coherent path (L2 only, .cg).
__device__ inline uint4 load16_act(const uint8_t* p, bool ok) {
  return ok ? __ldcg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

constexpr int kSkinnyWarps = 8;

// Shared-memory row stride of staged activation codes: K bytes padded so that two consecutive rows
// start 16 banks apart (a quarter-warp's 16-byte loads then touch every bank once).
__host__ __device__ inline int skinny_x_stride(int K) {
  const int words = K / 4;
  return K + 4 * ((16 - words % 32 + 32) % 32);
}
// Stages of each warp's weight ring: one 128-column block of its 16 rows (2 KB) per stage.
__host__ __device__ constexpr int skinny_stages(int NT) { return NT == 1 ? 4 : NT == 2 ? 6 : 3; }
constexpr int kRingStage = 16 * kB;
// Staged activation rows of one pass (R of them): codes + scales.
__host__ __device__ inline size_t skinny_stage_bytes(int R, int K) {
  const int KB = (K + kB - 1) / kB;
  return (size_t(R) * skinny_x_stride(K) + size_t(R) * KB * sizeof(float) + 15) / 16 * 16;
}
__host__ __device__ inline size_t skinny_smem_bytes(int NT, int R, int K) {
  return skinny_stage_bytes(R, K) + size_t(kSkinnyWarps) * skinny_stages(NT) * kRingStage;
}

// Block: 8 warps = (8 / ks) tiles of 16 weight rows x ks K-splits (a tile's ks partial sums are
// added in a fixed order through shared memory, so results do not depend on timing; ks = 1: each
// warp owns a tile over the whole K and writes it directly). blockIdx.y = segment. Each pass
// covers 8 * NT activation rows, staged with their scales in shared memory by the whole block
// (one round trip). Each warp streams its weights through a ring of S stages with cp.async
// (S - 1 blocks of 2 KB in flight per warp, no registers held); every thread copies and later
// reads back only its own 64 bytes of a stage, so the ring needs no synchronization beyond
// cp.async.wait_group. A dense GEMM fills its ring before pdl_wait, i.e. while the kernel before
// it is still finishing.
// R: activation rows staged per pass (compile time: 8 NT, or 1 for a batch-1 step, which leaves
// shared memory and, with MINB = 3, registers for a third block per SM).
template <int NT, int R, int MINB>
__global__ void __launch_bounds__(kSkinnyWarps * 32, MINB) fp8_skinny_kernel(const uint8_t* __restrict__ W, const float* __restrict__ ws,
                                                         int ws_stride, const bf16* __restrict__ bias,
                                                         const uint8_t* x, const float* xs,
                                                         ActSegments sg, float* y, int y_ld,
                                                         bool accumulate, int N, int K, int ks) {
  constexpr int S = skinny_stages(NT);
  __shared__ float red[kSkinnyWarps][NT][4][32];
  extern __shared__ __align__(16) uint8_t stage[];  // [8 NT][x_stride] codes, [8 NT][KB] scales, then the rings
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int tile = warp / ks, split = warp % ks, tiles_per_block = kSkinnyWarps / ks;
  const bool grouped = sg.seg != nullptr;
  int e = 0;
  if (grouped) {  // the expert comes from the routing kernels
    if (!sg.routed_early) pdl_wait();
    e = sg.active ? __ldcg(sg.active + blockIdx.y) : blockIdx.y;
  }
  const int n0 = (blockIdx.x * tiles_per_block + tile) * 16;
  const int KB = (K + kB - 1) / kB, per_split = (KB + ks - 1) / ks;
  const int kb0 = min(KB, split * per_split), kb1 = min(KB, kb0 + per_split);
  const bool ok_lo = n0 + g < N, ok_hi = n0 + g + 8 < N, active = e >= 0 && n0 < N;
  const uint8_t* We = W + size_t(max(e, 0)) * N * K;
  const uint8_t* wlo = We + size_t(ok_lo ? n0 + g : 0) * K + c * 16;
  const uint8_t* whi = We + size_t(ok_hi ? n0 + g + 8 : 0) * K + c * 16;
  static_assert(R >= 1 && R <= 8 * NT, "rows per pass");
  uint8_t* ring = stage + skinny_stage_bytes(R, K) + size_t(warp) * S * kRingStage + lane * 16;
  auto issue = [&](int kb) {  // block kb into its slot; always one commit group
    if (active && kb < kb1) {
      const int k0 = kb * kB;
      const bool in0 = k0 + c * 16 < K, in1 = k0 + 64 + c * 16 < K;  // K % 16 == 0: a 16-byte piece is in or out
      uint8_t* d = ring + ((kb - kb0) % S) * kRingStage;
      cp_async16(d, wlo + k0, ok_lo && in0);
      cp_async16(d + 512, whi + k0, ok_hi && in0);
      cp_async16(d + 1024, wlo + k0 + 64, ok_lo && in1);
      cp_async16(d + 1536, whi + k0 + 64, ok_hi && in1);
    }
    cp_async_commit();
  };
  for (int i = 0; i < S - 1; ++i) issue(kb0 + i);
  if (!grouped || sg.routed_early) pdl_wait();
  pdl_launch_dependents();
  if (e < 0) return;  // uniform over the block
  const int s0 = grouped ? sg.seg[e] : 0, s_end = grouped ? sg.seg[e + 1] : sg.rows;
  if (s_end <= s0) {  // uniform over the block
    cp_async_wait<0>();
    return;
  }
  // The one-row tile skips the segment's padding rows (a suffix) when row_live marks them; the
  // wider tiles keep the code they had (no runtime row count: fewer registers, measured faster).
  const int s1 = R == 1 && grouped && sg.row_live ? s0 + live_rows(sg.row_live, s0, s_end) : s_end;
  // Activation scales: [KB][sld] at sbase for this segment, or by source row with stride x_ld
  // when rows are gathered (x_rows).
  const int sld = grouped ? s_end - s0 : sg.ld;  // the whole segment's rows, padding included
  const size_t sbase = grouped ? size_t(KB) * s0 : 0;
  const int sstride = sg.x_rows ? sg.x_ld : sld;
  const int x_stride = skinny_x_stride(K);
  constexpr int rows_pass = R;
  float* stage_s = reinterpret_cast<float*>(stage + size_t(rows_pass) * x_stride);
  const int ws_rows = round4((N + kB - 1) / kB);
  const float* wse = n0 < N ? ws + size_t(e) * ws_rows * ws_stride + size_t(n0 / kB) * ws_stride : nullptr;
  const bf16* be = bias ? bias + size_t(e) * N : nullptr;
  const float b_lo = (split == 0 && be && ok_lo) ? __bfloat162float(be[n0 + g]) : 0.0f;
  const float b_hi = (split == 0 && be && ok_hi) ? __bfloat162float(be[n0 + g + 8]) : 0.0f;
  for (int base = s0; base < s1; base += rows_pass) {
    if (base != s0)
      for (int i = 0; i < S - 1; ++i) issue(kb0 + i);
    // Stage this pass's rows: codes (zero rows past the segment or for padding) and scales.
    const int pieces = K / 16;
    for (int i = threadIdx.x; i < rows_pass * pieces; i += blockDim.x) {
      const int rl = i / pieces, p = i % pieces, r = base + rl;
      const int src = r < s1 ? (sg.x_rows ? sg.x_rows[r] : r) : -1;
      *reinterpret_cast<uint4*>(stage + size_t(rl) * x_stride + p * 16) =
          load16_act(x + size_t(src < 0 ? 0 : src) * K + p * 16, src >= 0);
    }
    for (int i = threadIdx.x; i < rows_pass * KB; i += blockDim.x) {
      const int rl = i / KB, kb = i % KB, r = base + rl;
      float v = 0.0f;
      if (r < s1) {
        if (!sg.x_rows) v = __ldcg(xs + sbase + size_t(kb) * sstride + (r - s0));
        else if (sg.x_rows[r] >= 0) v = __ldcg(xs + size_t(kb) * sstride + sg.x_rows[r]);
      }
      stage_s[rl * KB + kb] = v;
    }
    __syncthreads();
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = acc[t][1] = b_lo;  // the accumulators start from the bias (split 0's share)
      acc[t][2] = acc[t][3] = b_hi;
    }
    if (active)
      for (int kb = kb0; kb < kb1; ++kb) {
        issue(kb + S - 1);
        cp_async_wait<S - 1>();  // block kb has landed (its group is the oldest of the last S)
        const uint8_t* src = ring + ((kb - kb0) % S) * kRingStage;
        const uint4 lo0 = *reinterpret_cast<const uint4*>(src), hi0 = *reinterpret_cast<const uint4*>(src + 512);
        const uint4 lo1 = *reinterpret_cast<const uint4*>(src + 1024), hi1 = *reinterpret_cast<const uint4*>(src + 1536);
        const int k0 = kb * kB;
        const bool in0 = k0 + c * 16 < K, in1 = k0 + 64 + c * 16 < K;
        float part[NT][4];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          // Rows past R (R < 8 only): zero operands, their sums not stored; a compile-time test
          // for R = 8 NT, so the full tile's loop is what it was.
          const bool staged = R == 8 * NT || t * 8 + g < R;
          const uint8_t* xr = stage + size_t(staged ? t * 8 + g : 0) * x_stride + k0 + c * 16;
          const uint4 b0 = in0 && staged ? *reinterpret_cast<const uint4*>(xr) : make_uint4(0, 0, 0, 0);
          const uint4 b1 = in1 && staged ? *reinterpret_cast<const uint4*>(xr + 64) : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int i = 0; i < 4; ++i) part[t][i] = 0.0f;
          mma_e4m3_16832(part[t], lo0.x, hi0.x, lo0.y, hi0.y, b0.x, b0.y);
          mma_e4m3_16832(part[t], lo0.z, hi0.z, lo0.w, hi0.w, b0.z, b0.w);
          mma_e4m3_16832(part[t], lo1.x, hi1.x, lo1.y, hi1.y, b1.x, b1.y);
          mma_e4m3_16832(part[t], lo1.z, hi1.z, lo1.w, hi1.w, b1.z, b1.w);
        }
        const float w_s = wse[kb];  // fold in the two scales of this 128-block
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int r0 = t * 8 + 2 * c;
          const float x0 = (R == 8 * NT || r0 < R) ? stage_s[r0 * KB + kb] : 0.0f;
          const float x1 = (R == 8 * NT || r0 + 1 < R) ? stage_s[(r0 + 1) * KB + kb] : 0.0f;
          acc[t][0] += part[t][0] * (w_s * x0);
          acc[t][1] += part[t][1] * (w_s * x1);
          acc[t][2] += part[t][2] * (w_s * x0);
          acc[t][3] += part[t][3] * (w_s * x1);
        }
      }
    auto store = [&](int t, int i, float v) {
      const int rl = t * 8 + 2 * c + (i & 1), r = base + rl, n = n0 + g + (i >= 2 ? 8 : 0);
      if ((R == 8 * NT || rl < R) && r < s1 && n < N) {
        float* out = y + size_t(r) * y_ld + n;
        *out = accumulate ? *out + v : v;
      }
    };
    if (ks == 1) {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) store(t, i, acc[t][i]);
    } else {
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[warp][t][i][lane] = acc[t][i];
      __syncthreads();
      if (split == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float v = red[warp][t][i][lane];
            for (int w = 1; w < ks; ++w) v += red[warp + w][t][i][lane];
            store(t, i, v);
          }
      }
    }
    __syncthreads();  // the stage and red are reused by the next pass
  }
  cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

// The launcher behind fp8_gemm_dense and m_grouped_fp8_gemm_contiguous.
void fp8_gemm_skinny(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                     const float* xs, ActSegments sg, float* y, int y_ld, bool accumulate, int N, int K,
                     int rows_hint, cudaStream_t st) {
  if (K % 16) fail_plain("fp8 GEMM: K must be a multiple of 16 (got " + std::to_string(K) + ")");
  if (!sg.seg && sg.rows == 0) return;
  // K-splits per 16-row tile: the fewest that give every SM a block (a block's warps keep 3-5
  // weight blocks of 2 KB each in flight, enough to stream at full rate; more splits only add
  // waves and reductions), never more splits than 128-blocks.
  const int segments = !sg.seg ? 1 : sg.active ? sg.active_max : sg.experts, row_tiles = (N + 15) / 16;
  const int KB = (K + kB - 1) / kB;
  const int sms = sm_count();
  auto blocks = [&](int k) { return size_t(row_tiles * k + kSkinnyWarps - 1) / kSkinnyWarps * segments; };
  constexpr int kMaxStage = 200 * 1024;
  static std::once_flag once;  // set outside any graph capture's dependence on it: once, for the largest stage
  std::call_once(once, [] {
    for (auto k : {fp8_skinny_kernel<1, 1, 3>, fp8_skinny_kernel<1, 8, 2>, fp8_skinny_kernel<2, 16, 1>,
                   fp8_skinny_kernel<4, 32, 1>})
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStage));
  });
  // K-splits per 16-row tile: the fewest that give every SM a block; then more while every block
  // is still resident at once (one wave): the bytes in flight, i.e. the warps streaming at once,
  // set a decode GEMM's speed.
  auto run = [&](auto kernel, int NT, int R) {
    const size_t smem = skinny_smem_bytes(NT, R, K);
    if (smem > kMaxStage) fail_plain("fp8 GEMM: K = " + std::to_string(K) + " is too long to stage");
    int ks = 1;
    while (ks < kSkinnyWarps && blocks(ks) < size_t(sms) && ks * 2 <= KB) ks *= 2;
    const int per_sm = resident_blocks_per_sm(reinterpret_cast<const void*>(kernel), kSkinnyWarps * 32, smem);
    while (ks < kSkinnyWarps && ks * 2 <= KB && blocks(ks * 2) <= size_t(per_sm) * sms) ks *= 2;
    const int tiles_per_block = kSkinnyWarps / ks;
    const dim3 grid(unsigned((row_tiles + tiles_per_block - 1) / tiles_per_block), unsigned(segments));
    launch_pdl("gemm", kernel, grid, kSkinnyWarps * 32, smem, st, W, ws, ws_stride, bias, x, xs, sg, y, y_ld,
               accumulate, N, K, ks);
  };
  // Rows a launch can have per pass: a dense matrix's rows; a segment's bound when known.
  const int rows_max = !sg.seg ? sg.rows : sg.rows_max > 0 ? sg.rows_max : 32;
  // The one-row tile (3 blocks per SM) only where its grid is one wave: the long unembedding keeps
  // the 8-row tile at 2 blocks per SM (under ncu 170 us with it, 188 us with the one-row tile).
  const bool one_wave = blocks(1) <= size_t(3) * sms;
  if (rows_hint <= 8 && rows_max == 1 && one_wave)
    run(fp8_skinny_kernel<1, 1, 3>, 1, 1);
  else if (rows_hint <= 8) run(fp8_skinny_kernel<1, 8, 2>, 1, 8);
  else if (rows_hint <= 16) run(fp8_skinny_kernel<2, 16, 1>, 2, 16);
  else run(fp8_skinny_kernel<4, 32, 1>, 4, 32);
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

void m_grouped_fp8_gemm_contiguous(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias,
                                   const uint8_t* x, const float* xs, const Fp8ExpertRows& rows, float* y, int N, int K,
                                   int rows_hint, cudaStream_t st) {
  if (!rows.seg || rows.experts < 1) fail_plain("m_grouped_fp8_gemm_contiguous: the rows need their experts' segments");
  ActSegments sg;
  static_cast<Fp8ExpertRows&>(sg) = rows;
  fp8_gemm_skinny(W, ws, ws_stride, bias, x, xs, sg, y, N, false, N, K, rows_hint, st);
}

}  // namespace osprey::cuda
