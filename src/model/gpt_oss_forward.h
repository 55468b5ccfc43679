// The gpt-oss forward pass on the CPU: fp32 activations, weights read as stored.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "kernels/cpu/ops.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

class GptOssCpuModel {
 public:
  explicit GptOssCpuModel(const GptOssWeights& w);

  const GptOssConfig& config() const { return w_.config; }
  KvCache new_cache() const;

  // Runs tokens at positions cache.length() .. +T-1, appends them to the cache, and returns
  // logits [T][vocab] (all_logits) or [1][vocab] for the last token.
  std::vector<float> forward(std::span<const int32_t> tokens, KvCache& cache, bool all_logits) const;

 private:
  void attention_block(const GptOssLayerWeights& L, int layer, float* x, const int32_t* pos, int T,
                       KvCache& cache) const;
  void moe_block(const GptOssLayerWeights& L, float* x, int T) const;

  const GptOssWeights& w_;
  cpu::RopeTable rope_;
};

}  // namespace osprey
