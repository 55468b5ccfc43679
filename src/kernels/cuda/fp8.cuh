// The FP8 path's kernels, by file: quantize.cu (128x128 block quantization of weights at load,
// bit-identical to formats/fp8.h; 1x128 quantization of activations; RMSNorm fused with it),
// moe_route.cu (the MoE's norm, router, top-k softmax and sort by expert, one kernel),
// gemm_fp8.cu (FP8 GEMMs of few rows on the tensor cores, mma.sync e4m3, for decode steps and every
// GEMM with few rows: fp8_gemm_dense and m_grouped_fp8_gemm_contiguous; beside cuBLASLt's block-scaled GEMM,
// gemm_fp8.cuh), moe_gemm_fp8.cu (the experts of long prompt chunks: one grouped wgmma GEMM a
// layer, moe_gemm_fp8.cuh), moe_combine.cu (the experts' SwiGLU quantized for the second GEMM, the
// combine).
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

// Where the 1x128 scales of a quantized activation matrix live: dense, [K/128][ld] with
// ld >= rows; or, for rows sorted by expert (MoeSorted below), by expert: expert e's rows
// [seg[e], seg[e + 1]) have their scales [K/128][len_e] at offset K/128 * seg[e] (token-contiguous,
// what cuBLASLt's VEC128_32F reads for a matrix of those rows alone).
struct ActScales {
  const int32_t* seg = nullptr;  // device [experts + 1]; null: dense
  int experts = 0, ld = 0;
  static ActScales dense(int ld) { return {nullptr, 0, ld}; }
  static ActScales by_expert(const int32_t* seg, int experts) { return {seg, experts, 0}; }
};

// Activations x [.][K] fp32 -> codes q [rows][K] and scales (1x128 blocks). Row r reads x row
// in_rows[r] (null: r); in_rows[r] < 0 gives a zero row with scale 1 (padding).
void quantize_act_1x128(const float* x, const int32_t* in_rows, int rows, int K, uint8_t* q, float* s, ActScales scales,
                        cudaStream_t st);

// The rows of an already quantized matrix (codes q_in [.][K], dense scales s_in [K/128][ld_in])
// gathered into another layout: row r takes row in_rows[r] (< 0: a zero row with scale 1, as
// quantize_act_1x128 makes of padding). The codes and scales quantize_act_1x128 would make of the
// gathered fp32 rows, without reading them.
void gather_act_1x128(const uint8_t* q_in, const float* s_in, int ld_in, const int32_t* in_rows, int rows, int K,
                      uint8_t* q, float* s, ActScales scales, cudaStream_t st);

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
// fp32 into h_out when given), the router logits (router [E][H] BF16 as the checkpoint ships it,
// + bias) into logits [T][E], the top-k softmax (topk_softmax): idx, w [T][k], and those choices
// sorted by expert as moe_sort does. counters [T + 1] must be zero before the first call (they
// are left zero). h_mxfp4 (optional): the normalized rows also as BF16 in the MXFP4 activation
// layout [T][round128(H)] (what to_bf16_mxfp4_layout makes of h_out), the MXFP4 experts' input.
// - Up to 512 tokens (decode steps, verify chunks), or H not a multiple of 64: one kernel of
//   T x E/8 blocks; the logits are linear_f32_small's fp32 sums of the normalized rows, bit for
//   bit (each weight taken exactly to fp32 where it is used).
// - Prompt chunks (more than 512 tokens, H a multiple of 64): the same rows, codes and scales bit
//   for bit, by tiles of tokens. Up to 32 experts the same logits bit for bit too; above, the
//   logits on the tensor cores, as r * sum W (g x) + bias with g x in three BF16 terms
//   (moe_route.cu moe_route_wgmma_kernel): within fp32 rounding of the per-token kernel's. Either
//   way a token's logits are the same bits in any chunk. E at most 256.
void moe_route(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld, float* h_out,
               const bf16* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st, bf16* h_mxfp4 = nullptr);

// FP8 GEMMs on the tensor cores (mma.sync e4m3) for few rows: each pass streams the weights once
// for 1, 8, 16 or 32 rows (the tile picked from rows_hint; every row is computed whatever the
// hint). W [E][N][K] codes (E = 1 dense), ws [E][round4(N/128)][ws_stride] (formats/fp8.h), bias
// [E][N] bf16 or null. K % 16 == 0.
//
// Dense: y[t][n] (+)= sum_b ws[n/128][b] * xs[b][t] * sum_{k in b} W[n][k] x[t][k] + bias[n] for
// t < T; x codes [T][K], scales [K/128][x_ld]; y rows y_ld apart.
void fp8_gemm_dense(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                    const float* xs, int x_ld, float* y, int y_ld, bool accumulate, int N, int K, int T, int rows_hint,
                    cudaStream_t st);
// The K-splits fp8_gemm_dense takes for T = rows_hint rows (the order of its fp32 sums): the
// persistent decode kernel's dense GEMMs take the same, so that its results are this path's bits.
int fp8_dense_k_splits(int N, int K, int T);

// The rows of a grouped FP8 GEMM, sorted by expert (MoeSorted): expert e owns rows
// [seg[e], seg[e + 1]), seg[experts] <= rows.
struct Fp8ExpertRows {
  const int32_t* seg = nullptr;
  int experts = 0, rows = 0;
  // The experts that have rows, in order, -1 after the last: the GEMM launches active_max expert
  // slots instead of `experts` (a decode step touches few experts). Null: every expert.
  const int32_t* active = nullptr;
  int active_max = 0;
  // Row r's activation: null, row r of x (codes [rows][K], scales by expert, ActScales); else
  // token x_rows[r] (< 0: a zero row) of a dense matrix with scales [K/128][x_ld], so the first
  // GEMM reads each token's quantized row instead of a copy per chosen expert.
  const int32_t* x_rows = nullptr;
  int x_ld = 0;
  // row_live[r] < 0 marks padding rows (a suffix of each expert's rows, as MoeSorted's row_token
  // has them) and rows_max bounds any expert's computed rows (0: none known). With rows_max 1
  // (batch 1) the one-row tile runs and leaves padding rows' outputs as they were; wider tiles
  // compute them as any row.
  const int32_t* row_live = nullptr;
  int rows_max = 0;
  // seg and active were written at least two kernels back and every kernel in between waits
  // (pdl_wait) before it lets its dependents start, so they are complete when this GEMM starts:
  // it reads them and fills its weight ring before its own wait, overlapping the kernel before it
  // (the experts' second GEMM, after the first or the SwiGLU).
  bool routed_early = false;
};
// Grouped: y[r][n] = the dense product of expert e's W_e, ws_e, bias_e for every row r of e; y
// [rows][N].
void m_grouped_fp8_gemm_contiguous(const uint8_t* W, const float* ws, int ws_stride, const bf16* bias,
                                   const uint8_t* x, const float* xs, const Fp8ExpertRows& rows, float* y, int N, int K,
                                   int rows_hint, cudaStream_t st);

// MoE routing choices idx [T][k] sorted by expert (the MoeSorted layout above). One block; no
// host sync. (moe_route sorts its own choices the same way.)
void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st);
inline int moe_rows_max(int T, int k, int E) { return T * k + 4 * E; }

// t [rows][2I] (+ bias b1 of the row's expert when b1 != null) -> clamped SwiGLU, quantized in
// 1x128 blocks into codes q [rows][I] and scales laid out by expert (rows past seg[experts]
// untouched).
void moe_swiglu_quantize(const float* t, const bf16* b1, ActScales by_expert, int rows, int I, float alpha, float limit,
                         uint8_t* q, float* s, cudaStream_t st);
// The MoE combine, x[t] += sum_j w[t][j] * (y[pair_row[t][j]] + b2[idx[t][j]]) (b2 [E][H] or null),
// then rmsnorm_quantize of the new x with `gain` (the next layer's first norm, or the final one),
// the fp32 normalized rows also into h_out when given.
void moe_combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx,
                      const bf16* b2, int T, int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld,
                      cudaStream_t st, float* h_out = nullptr);

}  // namespace osprey::cuda
