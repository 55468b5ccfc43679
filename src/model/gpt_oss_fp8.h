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
  // (OpenMP over row blocks; progress on stderr when `progress`).
  static GptOssFp8Weights convert(const GptOssWeights& w, bool progress = true);
};

}  // namespace osprey
