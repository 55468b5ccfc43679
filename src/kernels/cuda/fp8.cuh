// The FP8 path's kernels, by file: quantize.cu (128x128 block quantization of weights at load,
// bit-identical to formats/fp8.h; 1x128 quantization of activations; RMSNorm fused with it),
// moe_route.cu (the MoE's norm, router, top-k softmax and sort by expert, one kernel),
// gemm_fp8.cu (the skinny FP8 GEMM on the tensor cores, mma.sync e4m3, for decode steps and every
// GEMM with few rows, dense or grouped by expert; beside cuBLASLt's block-scaled GEMM,
// gemm_fp8.cuh), moe_combine.cu (the experts' SwiGLU quantized for the second GEMM, the combine).
// The MXFP4 experts' GEMMs are moe_gemm_mxfp4.cuh's. Formats and the CPU twins are in
// formats/fp8.h and kernels/cpu/ops.h.
#pragma once
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

// Weights -> e4m3 codes [rows][cols] and scales [.][s_stride] (formats/fp8.h), bit-identical to fp8::quantize_row_blocks.
void quantize_bf16_block128(const bf16* w, int rows, int cols, uint8_t* q, float* s, int s_stride, cudaStream_t st);
// MXFP4 [rows][cols/32][16] + E8M0 [rows][cols/32], decoded exactly, then as above.
void quantize_mxfp4_block128(const uint8_t* blocks, const uint8_t* e8m0, int rows, int cols, uint8_t* q, float* s,
                             int s_stride, cudaStream_t st);

// Row-segment layout of activation scales. Segment e holds rows [seg[e], seg[e+1]); its scales
// are [KB][len_e] at offset KB * seg[e] (token-contiguous, what cuBLASLt's VEC128_32F reads for a
// matrix of len_e rows). A single dense matrix is one segment {0, ld}.
struct ActSegments {
  const int32_t* seg = nullptr;  // device [n + 1]; null: one dense matrix of `rows` rows, scales [KB][ld]
  int n = 1, rows = 0, ld = 0;
  // Optional (grouped GEMMs): the segments that have rows, in order, -1 after the last; the GEMM
  // then launches `active_max` segment slots instead of n (a decode step touches few experts).
  const int32_t* active = nullptr;
  int active_max = 0;
  // Optional (skinny GEMM): row r reads activation row x_rows[r] (< 0: a zero row) of a dense
  // matrix whose scales are [KB][x_ld], instead of row r of the segment layout. The MoE GEMMs read
  // each token's quantized row this way instead of copying it once per chosen expert.
  const int32_t* x_rows = nullptr;
  int x_ld = 0;
  // Optional (grouped skinny GEMM): row_live[r] < 0 marks padding rows, which follow a segment's
  // real rows (MoeSorted's row_token does). The one-row tile (seg_rows_max 1) does not compute them
  // (their outputs are left as they were); wider tiles compute them as any row.
  const int32_t* row_live = nullptr;
  // Optional (grouped skinny GEMM): a bound on any segment's computed rows (0: none known): T real
  // rows with row_live, round4(T) without. A bound of 1 (batch 1) runs the one-row tile.
  int seg_rows_max = 0;
  // Optional (grouped): seg and active were written at least two kernels back and every kernel in
  // between waits (pdl_wait) before it lets its dependents start, so they are complete when this
  // GEMM starts: it reads them and fills its weight ring before its own wait, overlapping the
  // kernel before it (the experts' second GEMM, after the first or the SwiGLU).
  bool routed_early = false;
};

// Activations x [.][K] fp32 -> codes q [rows][K] and scales (1x128 blocks). Row r reads x row
// in_rows[r] (null: r); in_rows[r] < 0 gives a zero row with scale 1 (padding).
void quantize_act_1x128(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s, ActSegments seg,
                        cudaStream_t st);

// RMSNorm (as rmsnorm_to_f32) fused with quantize_act_1x128 of the result (dense layout with ld);
// h_out (optional) receives the fp32 normalized rows.
void rmsnorm_quantize(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld,
                      float* h_out, cudaStream_t st);

// The (token, choice) pairs sorted by expert, every expert's run padded to a multiple of 4 rows:
// seg [E+1] (padded offsets), row_token [T*k + 4E] (token of each sorted row, -1 for padding),
// pair_row [T][k] (the sorted row of each pair), active [min(E, T*k)] (the experts with rows, in
// order, then -1).
struct MoeSorted {
  int32_t *seg = nullptr, *row_token = nullptr, *pair_row = nullptr, *active = nullptr;
};

// The MoE's routing front: RMSNorm of x [T][H] with `gain`, quantized in 1x128 blocks (and in
// fp32 into h_out when given), the fp32 router logits (router [E][H] + bias, the products of
// linear_f32_small, into logits [T][E]), the top-k softmax (topk_softmax): idx, w [T][k], and
// those choices sorted by expert as moe_sort does. One kernel: of T x E/8 blocks for up to 512
// tokens, of tiles of tokens that share each router row above (the same bits); counters [T + 1]
// must be zero before the first call (they are left zero).
void moe_route(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld, float* h_out,
               const float* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st);

// Skinny FP8 GEMM on the tensor cores: for each segment e (expert e when grouped), rows r in the
// segment: y[r][n] (+)= sum_b ws_e[n/128][b] * xs[r][b] * sum_{k in b} W_e[n][k] x[r][k] + bias_e[n].
// W [E][N][K] codes, ws [E][round4(N/128)][ws_stride], bias [E][N] bf16 or null; x codes [rows][K]
// with scales in `seg` layout; y rows y_ld apart. K % 16 == 0. rows_hint: the rows a segment
// typically has (picks the tile width: 8, 16 or 32 rows per pass over the weights); every row of
// every segment is computed whatever the hint. Grouped: `rows` bounds seg[n].
void fp8_gemm_skinny(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                     const float* xs, ActSegments seg, float* y, int y_ld, bool accumulate, int N, int K,
                     int rows_hint, cudaStream_t st);

// MoE routing choices idx [T][k] sorted by expert (the MoeSorted layout above). One block; no
// host sync. (moe_route sorts its own choices the same way.)
void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st);
inline int moe_rows_max(int T, int k, int E) { return T * k + 4 * E; }

// t [rows][2I] (+ bias b1 of the row's expert when b1 != null) -> clamped SwiGLU, quantized in
// 1x128 blocks into codes q [rows][I] and scales in the `seg` layout (rows past seg[n] untouched).
void moe_swiglu_quantize(const float* t, const bf16* b1, ActSegments seg, int rows, int I, float alpha, float limit,
                         uint8_t* q, float* s, cudaStream_t st);
// The MoE combine, x[t] += sum_j w[t][j] * (y[pair_row[t][j]] + b2[idx[t][j]]) (b2 [E][H] or null),
// then rmsnorm_quantize of the new x with `gain` (the next layer's first norm, or the final one).
void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st);

}  // namespace osprey::cuda
