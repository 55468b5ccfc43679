// Kernel timing for `osprey bench --backend cuda --moe-batches`: the MoE's two grouped expert
// GEMMs of one layer alone (MXFP4 experts and FP8 experts), for a decode batch whose tokens each
// pick top-k distinct experts at random, over enough layers' copies of the weights that no launch
// finds its weights in L2.
#pragma once

namespace osprey {

struct MoeGemmShape {
  int batch = 1, experts = 32, top_k = 4, hidden = 2880, intermediate = 2880;
};

// The mean time of one layer's two GEMMs (gate-up, then down) in seconds, and the weight bytes they
// read (the experts that have rows, as each format stores them: MXFP4 codes and scales, or FP8
// codes and block scales).
struct MoeGemmTiming {
  double seconds = 0, weight_bytes = 0;
  int experts_touched = 0;
};
MoeGemmTiming time_moe_gemm_mxfp4(const MoeGemmShape& shape, int reps);
MoeGemmTiming time_moe_gemm_fp8(const MoeGemmShape& shape, int reps);
// The prompt chunks' MXFP4 path on wgmma (m_grouped_mxfp4_gemm_bf16_wgmma_contiguous): the first
// GEMM's rows gathered into the wgmma layout, then the two GEMMs; meant for long chunks (more than
// 48 rows an expert).
MoeGemmTiming time_moe_gemm_mxfp4_wgmma(const MoeGemmShape& shape, int reps);

}  // namespace osprey
