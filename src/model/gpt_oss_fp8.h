// The gpt-oss weights converted to FP8 e4m3 with 128x128 block scales (formats/fp8.h): every
// GEMM weight (q, k, v, o, the experts' mlp1/mlp2, the unembedding). The embedding, norms, sinks,
// biases and the router stay as stored (BF16): the router decides which experts run and is 0.1%
// of the bytes. Used by the CPU emulation (--precision fp8) and written by `osprey convert`.
#pragma once
#include <string>
#include <vector>

#include "formats/fp8.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

struct GptOssFp8Layer {
  fp8::Matrix q, k, v, o;  // [q_dim|kv_dim][hidden], o [hidden][q_dim]
  fp8::Matrix mlp1, mlp2;  // count = experts: [E][2I][H], [E][H][I]
};

struct GptOssFp8Weights {
  std::vector<GptOssFp8Layer> layers;
  fp8::Matrix unembed;  // [vocab][hidden]

  // MXFP4 experts are decoded exactly to fp32 and BF16 matrices widened, then block-quantized
  // (OpenMP over row blocks; progress on stderr when `progress`). experts = false: the dense
  // matrices only (mlp1 and mlp2 stay empty).
  static GptOssFp8Weights convert(const GptOssWeights& w, bool progress = true, bool experts = true);
};

// `osprey convert`: writes a checkpoint (Hugging Face tensor names, sharded safetensors) whose GEMM
// weights are FP8 codes `<name>_fp8` (F8_E4M3) with scales `<name>_fp8_scale` (F32, the layout of
// formats/fp8.h); every other tensor as stored; config.json gains an "osprey_fp8" entry; the
// tokenizer and generation files are copied. GptOssWeights::load reads it back (weights.fp8).
// Returns the bytes of tensors written.
uint64_t write_fp8_checkpoint(const GptOssWeights& w, const GptOssFp8Weights& f, const std::string& out_dir,
                              bool progress = true);

// Used by GptOssWeights::load for such a checkpoint: the FP8 views, with shape checks.
std::shared_ptr<const GptOssFp8Weights> load_fp8_views(const TensorStore& s, const GptOssConfig& c);

}  // namespace osprey
