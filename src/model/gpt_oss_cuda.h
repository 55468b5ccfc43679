// The gpt-oss forward on one NVIDIA GPU. BF16 path: dense weights uploaded as stored (BF16),
// MXFP4 experts dequantized to BF16 on the GPU at load (exact), fp32 activations between ops,
// BF16 GEMM inputs through cuBLAS, a contiguous fp32 KV cache. An FP32 mode runs the same
// kernels with fp32 weights and GEMMs, to separate BF16 rounding from errors in the math. Plain C++ interface (no CUDA
// types), so the CLI builds with or without the CUDA backend.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/gpt_oss_weights.h"

namespace osprey {

bool cuda_backend_available();  // false when built without CUDA

class GptOssCudaModel {
 public:
  enum class Precision { BF16, FP32 };  // FP32: every weight and activation in fp32 (a check of the math)
  // Uploads the weights (progress on stderr); max_seq_len sizes the KV cache.
  GptOssCudaModel(const GptOssWeights& w, int max_seq_len, Precision precision = Precision::BF16);
  ~GptOssCudaModel();

  const GptOssConfig& config() const;
  void reset();  // empties the KV cache
  int length() const;
  // Runs tokens at positions length().., returns logits [T][vocab] or the last row.
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits);
  // Greedy step on the GPU: forward, then argmax of the last row; only the id comes back.
  int32_t forward_argmax(std::span<const int32_t> tokens);
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey
