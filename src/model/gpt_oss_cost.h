// What a gpt-oss step must move and compute, for benchmarks to state each figure as a fraction
// of its ceiling: the bytes an FP8 decode step reads (weights in FP8 with 128x128 block scales,
// the experts the batch touches, a BF16 KV cache) and the FLOPs of a prefill.
#pragma once
#include "formats/gpt_oss_config.h"

namespace osprey {

// Bytes of FP8 weights (+ their float scales) in a [rows][cols] matrix.
double fp8_matrix_bytes(double rows, double cols);

// Bytes of an MXFP4 [rows][cols] matrix as the GPU keeps it (formats/mxfp4.h tiles: 4.25 bits a
// weight, the last 128-column block padded).
double mxfp4_matrix_bytes(double rows, double cols);

// Bytes of the weights the GPU path holds with FP8 experts (every GEMM weight FP8 128x128, the
// embedding, norms, biases and router as stored): what `--weights fp8` puts on the card.
double fp8_weight_bytes(const GptOssConfig& c);

// Bytes a decode step of `b` sequences at context `ctx` must read: every layer's dense weights,
// the experts the batch touches (the expected number of distinct experts under uniform routing;
// FP8 128x128, or MXFP4 with mxfp4_experts), the unembedding, and each sequence's keys and values
// (sliding layers: their window).
// fp8_kv: the FP8 KV cache (a byte a value and a byte of exponent per position and KV head).
double decode_step_bytes(const GptOssConfig& c, int b, int ctx, bool mxfp4_experts = false, bool fp8_kv = false);

// FLOPs of a prefill of n tokens that ends with one token's logits: 2 per active weight per token
// in every layer (attention projections, router, the top-k experts), the unembedding of the last
// token, and the attention's QK^T and PV over the keys each query sees (causal; a sliding layer's
// window).
double prefill_flops(const GptOssConfig& c, int n);

}  // namespace osprey
