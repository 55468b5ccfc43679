// The MoE's expert GEMMs over MXFP4 weights kept 4-bit on the GPU (the checkpoint's E2M1 codes),
// with BF16 activations: each weight group is decoded exactly to BF16 in registers (E2M1 times its
// E8M0 power of two is a BF16 value) and multiplied on the tensor cores (mma.sync bf16, fp32
// accumulators that start from the expert's bias). One launch covers every expert of a layer: the
// rows are sorted by expert (MoeSorted, fp8.cuh) and each block finds its expert in the device-side
// offset table, so nothing waits on the host. Decode steps (up to 48 rows an expert) stream the
// weights: 8 rows a pass through each warp's own ring (the row path), or, past 16 rows an expert,
// 32 rows a pass through one ring for the block (the wide path); prefill chunks run output tiles
// of 64 rows (mma.sync, where experts get up to 64 rows on average) or 128 rows (wgmma) by 128
// weight rows, or, on rows in the wgmma layout, the model's path for prompt chunks:
// m_grouped_mxfp4_gemm_bf16_wgmma_contiguous (the weights decoded into wgmma's A registers, 256
// weight rows by 128 tokens). All give the same bits. K = 2880 is 22.5 blocks of 128 columns:
// the last block's missing half is read as zeros (no weight bytes loaded, zero activations).
// The CPU twin: kernels/cpu f32_mxfp4w_matmul on BF16-rounded inputs (tests/cuda/test_moe_mxfp4.cu).
#pragma once
#include <cstdint>

#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// One layer's experts as the kernels read them: the checkpoint's E2M1 codes and E8M0 scales
// re-laid out in 16-row tiles (formats/mxfp4.h mxfp4_relayout_experts: [E][N/16][KB][1088 B]),
// bias [E][N] (or null).
struct Mxfp4ExpertsView {
  const uint8_t* tiles = nullptr;
  const bf16* bias = nullptr;
  int experts = 0, N = 0, K = 0;  // N % 16 == 0, K % 32 == 0
  // Whether some scale is above 128 (formats/mxfp4.h mxfp4_any_big_scale): true is always right;
  // false (the loader checked) lets the row paths' decode kernels skip the per-K-block test for a
  // second multiply, a vote and 16 branches a K block of every warp (H100, session 36: the expert
  // GEMMs 1.02-1.06x, the 20b step 1.02-1.03x at batches 1, 8 and 64; docs/PERF.md).
  bool big_scales = true;
};

// The rows of one grouped GEMM, sorted by expert: expert e owns rows [seg[e], seg[e + 1]).
struct ExpertRows {
  const int32_t* seg = nullptr;       // device [experts + 1]
  const int32_t* active = nullptr;    // device [active_max]: the experts that have rows, then -1 (null: all)
  int active_max = 0;
  // Optional: rows with row_live[r] < 0 are padding (a suffix of each expert's run); the decode
  // path leaves their outputs as they were, the tiled path computes them from zero inputs.
  const int32_t* row_live = nullptr;
  const int32_t* x_rows = nullptr;    // optional: row r reads activation row x_rows[r] (< 0: zeros)
  int rows = 0;                       // a bound on seg[experts]
  int rows_per_expert = 0;            // what an expert typically gets (picks decode or tiled)
  // seg, active and row_live were written by a kernel that has finished when this one starts:
  // two or more launches back (kernels/cuda/launch.cuh), as for the experts' second GEMM. The
  // decode path reads them, and starts its weight loads, before its PDL wait.
  bool routed_early = false;
};

// The experts' clamped SwiGLU as the first GEMM's epilogue (gate and up interleaved in its N
// outputs): a [.][round128(N / 2)] BF16 in the MXFP4 activation layout, as moe_swiglu_bf16 writes it.
struct SwigluOut {
  bf16* a = nullptr;
  float alpha = 0, limit = 0;
};

// y[r][n] = sum_k W_e[n][k] * x[src(r)][k] + bias_e[n] for the rows r of every expert e; x BF16
// in the MXFP4 activation layout ([.][round128(K)], formats/mxfp4.h), y fp32 [rows][N].
// With swiglu: its a receives moe_swiglu_bf16 of those rows (rows < seg[experts]; padding rows
// marked by row_live as the decode path leaves them), bit for bit. The decode path's one-wave
// kernel (a batch-1 step) computes it in its epilogue and leaves y as it was; otherwise y is
// written and moe_swiglu_bf16 runs after.
void m_grouped_mxfp4_gemm_bf16_contiguous(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                                          cudaStream_t st, const SwigluOut* swiglu = nullptr);

// Above this many rows an expert typically (ExpertRows::rows_per_expert), m_grouped_mxfp4_gemm_bf16_
// contiguous takes its tiled path; the model takes the wgmma path below for such prompt chunks.
constexpr int kMxfp4PromptRowsHint = 48;

// The same products for prompt chunks on wgmma, the weights decoded in registers
// (moe_gemm_mxfp4_wgmma.cuh): x the sorted rows [rows.rows][round128(K)] in the wgmma layout
// (formats/mxfp4.h mxfp4_wgmma_position; mxfp4_rows_to_wgmma_layout makes it), read by TMA
// (rows.x_rows is not used: padding rows are zero rows there). y fp32 [rows][N]: the tiled path's
// bits (split 0 from the bias, the decode path's K splits); N % 16 == 0. With swiglu: its a
// receives the clamped SwiGLU of every row of the experts' runs, in the wgmma layout (zeros past
// N / 2), as moe_swiglu_bf16 computes it; y then holds only the earlier K splits' sums.
void m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows,
                                                float* y, cudaStream_t st, const SwigluOut* swiglu = nullptr);
// out[r] = x[src[r]] (src null: x[r]; src[r] < 0, or r at or past *rows_end when rows_end is
// given (device): zeros) moved from the activation layout to the wgmma layout: rows of round128(K)
// BF16, r < rows.
void mxfp4_rows_to_wgmma_layout(const bf16* x, const int32_t* src, const int32_t* rows_end, int rows, int K, bf16* out,
                                cudaStream_t st);

// x fp32 [.][K] -> BF16 (round to nearest) in the MXFP4 activation layout, out [T][round128(K)];
// out row t reads x row in_rows[t] (zeros where it is < 0) when in_rows is given, else row t.
void to_bf16_mxfp4_layout(const float* x, int T, int K, bf16* out, cudaStream_t st, const int32_t* in_rows = nullptr);

// The experts' clamped SwiGLU: rows r < *rows_end (a device count, at most rows_max) of
// t [.][2I] (gate and up interleaved) -> a [.][round128(I)] BF16 in the MXFP4 activation layout.
// With bias [E][2I] and seg [E + 1] (rows sorted by expert): each row's expert bias is added to
// its gate and up values first (for products that were computed without it).
void moe_swiglu_bf16(const float* t, const int32_t* rows_end, int rows_max, int I, float alpha, float limit, bf16* a,
                     cudaStream_t st, const bf16* bias = nullptr, const int32_t* seg = nullptr, int experts = 0);

// The weights of every expert that has rows (seg[e + 1] > seg[e]) decoded exactly to BF16, out
// [experts][N][round128(K)] in the activation layout (zeros past K), for a dense BF16 GEMM per
// expert against activations in that layout (the prefill of long prompts: the tensor-core GEMMs
// of cuBLAS beat the in-register decode there). Other experts' rows are left as they were.
void mxfp4_experts_to_bf16(const Mxfp4ExpertsView& W, const int32_t* seg, bf16* out, cudaStream_t st);

// The weights of every expert that has rows (seg null: of every expert) as FP8 E4M3 with power-of-two block scales
// (formats/mxfp4.h mxfp4_to_fp8, bit for bit): codes [experts][N][K], each expert's scales at
// scales + e * scales_per_expert in mxfp4_to_fp8's layout for block_rows (1: [KB][N]; 128:
// [round4(NB)][round4(KB)], whose Smax per block comes from smax [experts][ceil(N/128)][KB],
// mxfp4_fp8_blocks). Other experts' buffers, and padding entries, are left as they are. For the
// grouped FP8 GEMM (moe_gemm_fp8.cuh, WeightScales::Row1x128 or Block128x128; cuBLASLt's
// BlockFp8Gemm reads the same layouts) on FP8 activations: the W4A8 prefill of long prompt
// chunks with FP8 dense layers.
struct Mxfp4AsFp8 {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  size_t scales_per_expert = 0;
  int block_rows = 1;              // 1 or 128
  const uint8_t* smax = nullptr;   // block_rows 128
};
void mxfp4_experts_to_fp8(const Mxfp4ExpertsView& W, const int32_t* seg, const Mxfp4AsFp8& out, cudaStream_t st);

}  // namespace osprey::cuda
