#include "model/gpt_oss_cost.h"

#include <algorithm>
#include <cmath>

#include "formats/mxfp4.h"

namespace osprey {

double fp8_matrix_bytes(double rows, double cols) {
  return rows * cols + 4.0 * std::ceil(rows / 128) * std::ceil(cols / 128);
}

double mxfp4_matrix_bytes(double rows, double cols) {
  return std::ceil(rows / kMxfp4TileRows) * std::ceil(cols / kMxfp4ActBlock) * kMxfp4TileBytes;
}

double fp8_weight_bytes(const GptOssConfig& c) {
  const double H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts, V = c.vocab;
  const double dense = fp8_matrix_bytes(Q, H) + 2 * fp8_matrix_bytes(KV, H) + fp8_matrix_bytes(H, Q);
  const double experts = E * (fp8_matrix_bytes(2 * I, H) + fp8_matrix_bytes(H, I) + 2.0 * (2 * I + H));
  const double small = 2.0 * (Q + 2 * KV + H + c.num_heads + 2 * H + E) + 2.0 * E * H;  // biases, norms, sinks, BF16 router
  return c.num_layers * (dense + experts + small) + fp8_matrix_bytes(V, H) + 2.0 * V * H + 2.0 * H;
}

double decode_step_bytes(const GptOssConfig& c, int b, int ctx, bool mxfp4_experts, bool fp8_kv) {
  const double H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts,
               k = c.experts_per_token;
  const double dense = fp8_matrix_bytes(Q, H) + 2 * fp8_matrix_bytes(KV, H) + fp8_matrix_bytes(H, Q) + 2.0 * E * H;  // + BF16 router
  const double expert = (mxfp4_experts ? mxfp4_matrix_bytes(2 * I, H) + mxfp4_matrix_bytes(H, I)
                                       : fp8_matrix_bytes(2 * I, H) + fp8_matrix_bytes(H, I)) +
                        2.0 * (2 * I + H);  // + bf16 biases
  const double touched = E * (1.0 - std::pow(1.0 - k / E, b));
  double kv_positions = 0;  // per sequence, over the layers
  for (bool sliding : c.layer_is_sliding) kv_positions += sliding ? std::min(ctx, c.sliding_window) : ctx;
  const double per_position = fp8_kv ? 2.0 * (KV + c.num_kv_heads) : 2.0 * 2 * KV;  // K and V
  const double kv = b * per_position * kv_positions;
  return c.num_layers * (dense + touched * expert) + fp8_matrix_bytes(c.vocab, H) + kv;
}

double prefill_flops(const GptOssConfig& c, int n) {
  const double H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
  const double weights_per_layer =
      Q * H + 2 * KV * H + H * Q + c.num_experts * H + c.experts_per_token * (2 * I * H + H * I);
  double keys = 0;  // (query, key) pairs over the layers
  for (bool sliding : c.layer_is_sliding) {
    const double w = c.sliding_window;
    keys += !sliding || n <= w ? double(n) * (n + 1) / 2 : w * (w + 1) / 2 + (n - w) * w;
  }
  return 2 * weights_per_layer * c.num_layers * n + 2 * H * c.vocab + 4.0 * c.num_heads * c.head_dim * keys;
}

}  // namespace osprey
