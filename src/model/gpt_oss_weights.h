// gpt-oss weights as views into the memory-mapped checkpoint (nothing is expanded at load).
// Loads both published layouts: Hugging Face (model.layers.L.*) and OpenAI original/ (block.L.*,
// fused qkv). All dense tensors are BF16; expert weights stay MXFP4.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "formats/gpt_oss_config.h"
#include "formats/safetensors.h"

namespace osprey {

struct Bf16Matrix {
  const bf16* w = nullptr;  // [rows][cols], y = W x
  int rows = 0, cols = 0;
};

struct Mxfp4Experts {
  const uint8_t* blocks = nullptr;  // [experts][rows][cols/32][16]
  const uint8_t* scales = nullptr;  // [experts][rows][cols/32]
  const bf16* bias = nullptr;       // [experts][rows]
  int experts = 0, rows = 0, cols = 0;
  const uint8_t* expert_blocks(int e) const { return blocks + size_t(e) * rows * (cols / 2); }
  const uint8_t* expert_scales(int e) const { return scales + size_t(e) * rows * (cols / 32); }
  const bf16* expert_bias(int e) const { return bias + size_t(e) * rows; }
};

struct GptOssLayerWeights {
  bool sliding = false;
  const bf16* attn_norm = nullptr;  // [hidden]
  Bf16Matrix q, k, v;               // [q_dim|kv_dim][hidden]
  const bf16 *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;
  const bf16* sinks = nullptr;      // [num_heads]
  Bf16Matrix o;                     // [hidden][q_dim]
  const bf16* o_bias = nullptr;     // [hidden]
  const bf16* mlp_norm = nullptr;   // [hidden]
  Bf16Matrix router;                // [experts][hidden]
  const bf16* router_bias = nullptr;
  Mxfp4Experts mlp1;                // rows 2*intermediate (gate/up interleaved), cols hidden
  Mxfp4Experts mlp2;                // rows hidden, cols intermediate
};

struct GptOssFp8Weights;

struct GptOssWeights {
  enum class Layout { HuggingFace, Original };
  GptOssConfig config;
  Layout layout = Layout::HuggingFace;
  TensorStore store;                // owns the mappings every view points into
  Bf16Matrix embed;                 // [vocab][hidden]
  Bf16Matrix unembed;               // [vocab][hidden]
  const bf16* final_norm = nullptr; // [hidden]
  std::vector<GptOssLayerWeights> layers;
  // Set for a checkpoint written by `osprey convert`: the GEMM weights are FP8 views (model/
  // gpt_oss_fp8.h) and the Bf16Matrix / Mxfp4Experts above carry their shapes only (null data).
  std::shared_ptr<const GptOssFp8Weights> fp8;

  // dir holds config.json and the safetensors files (HF root, or original/).
  static GptOssWeights load(const std::string& dir);
};

}  // namespace osprey
