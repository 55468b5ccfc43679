// The gpt-oss forward pass on the CPU: fp32 activations, weights read as stored. One call runs
// chunks of several sequences together: the matmuls and the MoE see every token of the step,
// attention runs per sequence against its own KV. A token's result does not depend on the
// other tokens of the batch (the kernels sum in a fixed order).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "formats/kv_dtype.h"
#include "kernels/cpu/ops.h"
#include "model/gpt_oss_fp8.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

// The model's YaRN rotary table, from its config.
cpu::RopeTable gpt_oss_rope_table(const GptOssConfig& c);
// Each layer's KV window for KvCache: 0 for full attention, else the sliding window.
std::vector<int> gpt_oss_kv_windows(const GptOssConfig& c);
// Throws Error naming the first token id outside the vocabulary [0, c.vocab).
void check_token_ids(std::span<const int32_t> tokens, const GptOssConfig& c);

// Keys/values of one layer for the attention of a chunk: positions before the chunk (p0) from the
// cache, the chunk's own from its buffers k, v [T][kv heads][head_dim] (rows `row` floats apart).
struct ChunkKv final : cpu::KvSource {
  const SequenceKv& cache;
  int layer, p0;
  const float *k, *v;
  size_t row, head_dim;
  ChunkKv(const SequenceKv& c, int l, int p0_, const float* k_, const float* v_, size_t row_, size_t d)
      : cache(c), layer(l), p0(p0_), k(k_), v(v_), row(row_), head_dim(d) {}
  const float* key(int pos, int g) const override {
    return pos >= p0 ? k + size_t(pos - p0) * row + g * head_dim : cache.key(layer, pos, g);
  }
  const float* value(int pos, int g) const override {
    return pos >= p0 ? v + size_t(pos - p0) * row + g * head_dim : cache.value(layer, pos, g);
  }
};

struct SequenceChunk {
  std::span<const int32_t> tokens;  // at positions kv->length() ..
  SequenceKv* kv;
  bool all_logits;                  // logits for every token, or the last one only
};

// AsStored: BF16 and MXFP4 weights as stored, fp32 math (the reference). Fp8: the emulation of the
// Hopper path: GEMM weights converted to FP8 128x128 (model/gpt_oss_fp8.h) at construction,
// activations quantized to FP8 in 1x128 blocks before each of those GEMMs, keys and values rounded
// to BF16 (the GPU's KV cache), fp32 math. Bf16: the emulation of the CUDA BF16 path (weights as
// stored, which BF16 holds exactly): each GEMM's input rounded to BF16 where that path rounds it
// (the attention norm's output, the attention output, the MLP norm's output for the experts (the
// router reads it in fp32), the SwiGLU output, the final norm's output), fp32 math and fp32 KV.
// Mxfp4: the emulation of the Hopper path's default (--weights mxfp4): the dense GEMMs as Fp8, the
// experts as stored (MXFP4, exact) with their inputs (the MLP norm's output, the SwiGLU output)
// rounded to BF16; a forward of at least kMxfp4W4a8RowsPerExpert rows an expert on average (a long
// prompt chunk) runs them W4A8 as that path does: their inputs quantized to FP8 in 1x128 blocks,
// the weights as FP8 with power-of-two block scales (formats/mxfp4.h mxfp4_to_fp8: 128x128 blocks
// for a layer's matrix whose blocks all convert exactly, else 1x128; mxfp4_fp8_blocks).
enum class CpuPrecision { AsStored, Fp8, Bf16, Mxfp4 };

// The GPU's MXFP4 experts take cuBLAS(Lt) GEMMs over the layer's experts converted for the chunk
// (W4A8 with FP8 dense layers, BF16 with BF16 ones) from this many rows an expert on average:
// the conversion costs about 0.3 ms a 20b layer, which the tensor-core GEMMs win back from about
// 1,000 tokens a chunk.
constexpr int kMxfp4LtRowsPerExpert = 128;

class GptOssCpuModel {
 public:
  // kv (Fp8 and Mxfp4 precisions: the GPU engine's paths): keys and values rounded as the GPU's KV
  // cache holds them (--kv-cache-dtype, formats/kv_dtype.h): BF16 (the default), FP16, or FP8 (E4M3
  // codes, a power-of-two exponent per (position, KV head) row, formats/kv_fp8.h). The other
  // precisions keep them fp32 and take only Bf16 (meaning: no cache rounding).
  // w4a8_long_chunks (Mxfp4 only): long chunks' experts W4A8 as above (false: BF16 inputs at every
  // length, the GPU path without cuBLASLt).
  explicit GptOssCpuModel(const GptOssWeights& w, CpuPrecision precision = CpuPrecision::AsStored,
                          KvDtype kv = KvDtype::Bf16, bool w4a8_long_chunks = true);
  ~GptOssCpuModel();

  const GptOssConfig& config() const { return w_.config; }
  KvCache new_cache() const;

  // Logits per chunk: [T][vocab] (all_logits) or [1][vocab]. Appends every chunk to its KV.
  // hidden (optional): the last layer's hidden states (the final norm's input) of the same rows,
  // [rows][hidden], in the same order.
  std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks,
                                                std::vector<float>* hidden = nullptr) const;
  std::vector<float> forward(std::span<const int32_t> tokens, SequenceKv& kv, bool all_logits) const;

 private:
  void attention_block(const GptOssLayerWeights& L, int layer, float* x, const int32_t* pos,
                       std::span<const SequenceChunk> chunks, int T) const;
  void moe_block(const GptOssLayerWeights& L, int layer, float* x, int T) const;

  // y [T][rows] = x [T][cols] . W^T + bias, in the model's precision (fp8: matrix e of `q8`).
  void linear(const Bf16Matrix& W, const fp8::Matrix* q8, const bf16* bias, const float* x, float* y, int T) const;
  void expert_linear(const Mxfp4Experts& W, const fp8::Matrix* q8, int e, const float* x, float* y, int T) const;
  // The W4A8 expert GEMM of long chunks (Mxfp4 precision).
  void expert_linear_w4a8(const Mxfp4Experts& W, int block_rows, int e, const float* x, float* y, int T) const;

  const GptOssWeights& w_;
  bool bf16_act_ = false;  // Bf16 precision: GEMM inputs rounded to BF16 (round_act)
  bool mxfp4_experts_ = false;  // Mxfp4 precision: the experts as stored, their inputs rounded to BF16
  KvDtype kv_ = KvDtype::Bf16;  // the GPU cache's format the keys and values are rounded through (fp8_ set)
  bool w4a8_long_chunks_ = true;
  std::vector<std::pair<int, int>> w4a8_block_rows_;  // per layer: mlp1's, mlp2's (mxfp4_fp8_blocks)
  void round_act(std::vector<float>& v) const;
  std::shared_ptr<const GptOssFp8Weights> fp8_;  // set in Fp8 precision (converted here, or the checkpoint's)
  cpu::RopeTable rope_;
};

}  // namespace osprey
