// CPU kernels: fp32 activations over weights as stored (BF16, MXFP4). Every CUDA kernel has its
// twin here; tests compare them. Shapes are given beside each pointer.
#pragma once
#include <cstdint>
#include <vector>

#include "core/bf16.h"

namespace osprey::cpu {

// y[t][n] = sum_k W[n][k] x[t][k] + bias[n]      x [T][K], W [N][K] BF16, bias [N] BF16 or null, y [T][N]
void f32_bf16w_matmul(const float* x, const bf16* W, const bf16* bias, float* y, int T, int N, int K);

// Same with an MXFP4 weight: blocks [N][K/32][16], scales [N][K/32]; K % 32 == 0.
void f32_mxfp4w_matmul(const float* x, const uint8_t* blocks, const uint8_t* scales, const bf16* bias, float* y,
                       int T, int N, int K);

// The FP8 emulation (CPU twin of the Hopper path): W as e4m3 codes [N][K] with one fp32 scale per
// 128x128 block (scales [N/128 blocks][ws_stride]); each row of x is quantized to e4m3 in 1x128
// blocks first; then y[t][n] = sum over blocks b of (ws[n/128][b] * xs[t][b]) * sum_{k in b}
// W[n][k] x[t][k] in fp32, + bias[n]. Any K (the last block may be partial).
void f32_fp8w_matmul(const float* x, const uint8_t* Wq, const float* Ws, int ws_stride, const bf16* bias, float* y,
                     int T, int N, int K);
// The same with the weight scales laid out as given: row n's scale of column block b is
// s[(n / rows_per_scale) * row_stride + b * block_stride] (128x128 blocks: {s, 128, ws_stride, 1};
// one scale per 128 columns of a row, [KB][N]: {s, 1, 1, N}).
struct Fp8WeightScales {
  const float* s = nullptr;
  int rows_per_scale = 128;
  size_t row_stride = 0, block_stride = 1;
};
void f32_fp8w_matmul(const float* x, const uint8_t* Wq, const Fp8WeightScales& Ws, const bf16* bias, float* y, int T,
                     int N, int K);

// y[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * gain              x, y [T][H], gain [H] BF16
void f32_bf16w_rmsnorm(const float* x, const bf16* gain, float* y, int T, int H, float eps);

// YaRN rotary table: inv_freq [head_dim/2] and the concentration that scales cos and sin.
struct RopeTable {
  std::vector<float> inv_freq;
  float concentration = 1.0f;
  int head_dim = 0;
};
struct RopeParams {
  int head_dim;
  double theta, factor, beta_fast, beta_slow;
  int original_max_pos;
  bool yarn, truncate;
};
RopeTable make_rope_table(const RopeParams& p);

// In place, half-split rotation of every head: x [T][heads][head_dim], positions [T].
void f32_rope(float* x, const int32_t* positions, const RopeTable& table, int T, int heads);

// Attention with a sink logit per head. For query t at position pos[t], head h (KV head g = h / group):
//   s_j = scale * <q, k_j> over allowed keys j (causal; sliding: pos - j < window),
//   out = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink[h]))
// Keys come from `keys(j, g)` / `values(j, g)`, each returning a [head_dim] fp32 row for absolute
// position j (so one kernel serves the cache and the current chunk).
struct KvSource {
  virtual ~KvSource() = default;
  virtual const float* key(int pos, int kv_head) const = 0;
  virtual const float* value(int pos, int kv_head) const = 0;
};
struct AttentionShape {
  int num_heads, num_kv_heads, head_dim;
  int window;  // 0: full causal; otherwise keys with pos - j < window
  float scale;
};
void f32_bf16sink_attention(const float* q /*[T][heads][d]*/, const int32_t* positions /*[T]*/, const KvSource& kv,
                            const bf16* sinks /*[heads]*/, float* out /*[T][heads][d]*/, int T,
                            const AttentionShape& shape);

// Router: top-k of logits [T][E] (ties: lower index first), softmax over the k selected.
// idx, weight: [T][k].
void f32_topk_softmax(const float* logits, int32_t* idx, float* weight, int T, int E, int k);

// Clamped SwiGLU on interleaved gate/up: t [T][2I] -> a [T][I];
//   g = min(t[2j], limit), u = clamp(t[2j+1], -limit, limit), a = g * sigmoid(alpha g) * (u + 1)
void f32_swiglu_clamped(const float* t, float* a, int T, int I, float alpha, float limit);

// Embedding gather: out [T][H] = table[tokens[t]]  (table [vocab][H] BF16)
void bf16_embedding(const bf16* table, const int32_t* tokens, float* out, int T, int H);

}  // namespace osprey::cpu
