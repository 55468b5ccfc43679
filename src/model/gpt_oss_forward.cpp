#include "model/gpt_oss_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/kv_fp8.h"
#include "formats/mxfp4.h"

namespace osprey {

namespace {

// Every value to its nearest BF16 (the GPU paths' BF16 tensors).
void round_to_bf16(std::vector<float>& v) {
  for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
}

}  // namespace

GptOssCpuModel::~GptOssCpuModel() = default;

GptOssCpuModel::GptOssCpuModel(const GptOssWeights& w, CpuPrecision precision, KvDtype kv, bool w4a8_long_chunks)
    : w_(w), kv_(kv), w4a8_long_chunks_(w4a8_long_chunks) {
  mxfp4_experts_ = precision == CpuPrecision::Mxfp4;
  if (kv != KvDtype::Bf16 && precision != CpuPrecision::Fp8 && precision != CpuPrecision::Mxfp4)
    fail("an {} KV cache is emulated with the GPU engine's paths (--precision fp8 or mxfp4)",
         kv == KvDtype::Fp8 ? "FP8" : "FP16");
  if (mxfp4_experts_ && w.fp8)
    fail("this checkpoint holds FP8 weights (written by `osprey convert`): its experts are no longer MXFP4; run it "
         "with --precision fp8");
  if (precision == CpuPrecision::Fp8)
    fp8_ = w.fp8 ? w.fp8 : std::make_shared<const GptOssFp8Weights>(GptOssFp8Weights::convert(w));
  else if (mxfp4_experts_)
    fp8_ = std::make_shared<const GptOssFp8Weights>(GptOssFp8Weights::convert(w, true, /*experts=*/false));
  else if (w.fp8)
    fail("this checkpoint holds FP8 weights (written by `osprey convert`): run it with --precision fp8");
  bf16_act_ = precision == CpuPrecision::Bf16;
  if (mxfp4_experts_ && w4a8_long_chunks_)
    for (const GptOssLayerWeights& L : w.layers)
      w4a8_block_rows_.emplace_back(mxfp4_fp8_blocks(L.mlp1.scales, L.mlp1.experts, L.mlp1.rows, L.mlp1.cols).block_rows,
                                    mxfp4_fp8_blocks(L.mlp2.scales, L.mlp2.experts, L.mlp2.rows, L.mlp2.cols).block_rows);
  rope_ = gpt_oss_rope_table(w.config);
}

void GptOssCpuModel::linear(const Bf16Matrix& W, const fp8::Matrix* q8, const bf16* bias, const float* x, float* y,
                            int T) const {
  if (q8) cpu::f32_fp8w_matmul(x, q8->data(), q8->scale(), q8->scale_stride(), bias, y, T, W.rows, W.cols);
  else cpu::f32_bf16w_matmul(x, W.w, bias, y, T, W.rows, W.cols);
}

void GptOssCpuModel::expert_linear(const Mxfp4Experts& W, const fp8::Matrix* q8, int e, const float* x, float* y,
                                   int T) const {
  if (q8)
    cpu::f32_fp8w_matmul(x, q8->data(e), q8->scale(e), q8->scale_stride(), W.expert_bias(e), y, T, W.rows, W.cols);
  else
    cpu::f32_mxfp4w_matmul(x, W.expert_blocks(e), W.expert_scales(e), W.expert_bias(e), y, T, W.rows, W.cols);
}

void GptOssCpuModel::expert_linear_w4a8(const Mxfp4Experts& W, int block_rows, int e, const float* x, float* y,
                                        int T) const {
  const int N = W.rows, K = W.cols;
  std::vector<uint8_t> codes(size_t(N) * K);
  std::vector<float> scales(mxfp4_fp8_scales_size(N, K, block_rows), 1.0f);
  mxfp4_to_fp8(W.expert_blocks(e), W.expert_scales(e), N, K, block_rows, codes.data(), scales.data());
  const cpu::Fp8WeightScales ws = block_rows == 1 ? cpu::Fp8WeightScales{scales.data(), 1, 1, size_t(N)}
                                                  : cpu::Fp8WeightScales{scales.data(), 128, size_t(fp8::round4(fp8::blocks(K))), 1};
  cpu::f32_fp8w_matmul(x, codes.data(), ws, W.expert_bias(e), y, T, N, K);
}

void GptOssCpuModel::round_act(std::vector<float>& v) const {
  if (bf16_act_) round_to_bf16(v);
}

cpu::RopeTable gpt_oss_rope_table(const GptOssConfig& c) {
  return cpu::make_rope_table({.head_dim = c.head_dim,
                               .theta = c.rope_theta,
                               .factor = c.rope_factor,
                               .beta_fast = c.rope_beta_fast,
                               .beta_slow = c.rope_beta_slow,
                               .original_max_pos = c.rope_original_max_pos,
                               .yarn = c.rope_yarn,
                               .truncate = c.rope_truncate});
}

void check_token_ids(std::span<const int32_t> tokens, const GptOssConfig& c) {
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab) fail("token id {} is outside the vocabulary [0, {})", t, c.vocab);
}

std::vector<int> gpt_oss_kv_windows(const GptOssConfig& c) {
  std::vector<int> windows;
  for (bool s : c.layer_is_sliding) windows.push_back(s ? c.sliding_window : 0);
  return windows;
}

KvCache GptOssCpuModel::new_cache() const {
  const GptOssConfig& c = w_.config;
  return KvCache(gpt_oss_kv_windows(c), c.num_kv_heads, c.head_dim);
}

std::vector<float> GptOssCpuModel::forward(std::span<const int32_t> tokens, SequenceKv& kv, bool all_logits) const {
  SequenceChunk c{tokens, &kv, all_logits};
  return std::move(forward_batch(std::span(&c, 1))[0]);
}

std::vector<std::vector<float>> GptOssCpuModel::forward_batch(std::span<const SequenceChunk> chunks,
                                                              std::vector<float>* hidden) const {
  const GptOssConfig& c = w_.config;
  const int H = c.hidden;
  std::vector<int32_t> tokens, pos;  // [T] over all chunks
  for (const SequenceChunk& ch : chunks) {
    if (ch.tokens.empty()) fail("forward: a chunk has no tokens");
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const int32_t tok = ch.tokens[i];
      check_token_ids(std::span(&tok, 1), c);
      tokens.push_back(tok);
      pos.push_back(ch.kv->length() + int32_t(i));
    }
  }
  const int T = int(tokens.size());
  if (T == 0) fail("forward: no tokens");

  std::vector<float> x(size_t(T) * H);  // residual stream [T][H]
  cpu::bf16_embedding(w_.embed.w, tokens.data(), x.data(), T, H);
  for (int l = 0; l < c.num_layers; ++l) {
    attention_block(w_.layers[l], l, x.data(), pos.data(), chunks, T);
    moe_block(w_.layers[l], l, x.data(), T);
  }
  // Rows that need logits: every row of an all_logits chunk, else its last.
  std::vector<int> rows;
  int t0 = 0;
  for (const SequenceChunk& ch : chunks) {
    ch.kv->advance(int(ch.tokens.size()));
    const int n = int(ch.tokens.size());
    for (int i = ch.all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(t0 + i);
    t0 += n;
  }
  const int R = int(rows.size());
  std::vector<float> sel(size_t(R) * H), h(size_t(R) * H), logits(size_t(R) * c.vocab);
  for (int r = 0; r < R; ++r) std::copy_n(&x[size_t(rows[r]) * H], H, &sel[size_t(r) * H]);
  if (hidden) *hidden = sel;
  cpu::f32_bf16w_rmsnorm(sel.data(), w_.final_norm, h.data(), R, H, float(c.rms_norm_eps));
  round_act(h);
  linear(w_.unembed, fp8_ ? &fp8_->unembed : nullptr, /*bias=*/nullptr, h.data(), logits.data(), R);
  std::vector<std::vector<float>> out;
  int r0 = 0;
  for (const SequenceChunk& ch : chunks) {
    const int n = ch.all_logits ? int(ch.tokens.size()) : 1;
    out.emplace_back(logits.begin() + size_t(r0) * c.vocab, logits.begin() + size_t(r0 + n) * c.vocab);
    r0 += n;
  }
  return out;
}

void GptOssCpuModel::attention_block(const GptOssLayerWeights& L, int layer, float* x, const int32_t* pos,
                                     std::span<const SequenceChunk> chunks, int T) const {
  const GptOssConfig& c = w_.config;
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim();
  std::vector<float> h(size_t(T) * H), q(size_t(T) * Q), k(size_t(T) * KV), v(size_t(T) * KV);
  std::vector<float> attn(size_t(T) * Q), o(size_t(T) * H);

  cpu::f32_bf16w_rmsnorm(x, L.attn_norm, h.data(), T, H, float(c.rms_norm_eps));
  round_act(h);
  const GptOssFp8Layer* L8 = fp8_ ? &fp8_->layers[layer] : nullptr;
  linear(L.q, L8 ? &L8->q : nullptr, L.q_bias, h.data(), q.data(), T);
  linear(L.k, L8 ? &L8->k : nullptr, L.k_bias, h.data(), k.data(), T);
  linear(L.v, L8 ? &L8->v : nullptr, L.v_bias, h.data(), v.data(), T);
  cpu::f32_rope(q.data(), pos, rope_, T, c.num_heads);
  cpu::f32_rope(k.data(), pos, rope_, T, c.num_kv_heads);
  if (fp8_ && kv_ == KvDtype::Fp8) {  // the Hopper path's FP8 cache: each (position, KV head) row through its codes
    for (size_t r = 0; r < size_t(T) * c.num_kv_heads; ++r) {
      kv_fp8::round_row(k.data() + r * c.head_dim, c.head_dim);
      kv_fp8::round_row(v.data() + r * c.head_dim, c.head_dim);
    }
  } else if (fp8_) {  // the Hopper path's 16-bit cache (BF16 or FP16): the emulation rounds them the same way
    for (float& f : k) f = kv_round16(f, kv_);
    for (float& f : v) f = kv_round16(f, kv_);
  }

  const cpu::AttentionShape shape{.num_heads = c.num_heads,
                                  .num_kv_heads = c.num_kv_heads,
                                  .head_dim = c.head_dim,
                                  .window = L.sliding ? c.sliding_window : 0,
                                  .scale = 1.0f / std::sqrt(float(c.head_dim))};
  int t0 = 0;
  for (const SequenceChunk& ch : chunks) {  // each sequence against its own keys
    const int n = int(ch.tokens.size());
    const float* kc = k.data() + size_t(t0) * KV;
    const float* vc = v.data() + size_t(t0) * KV;
    ChunkKv kv(*ch.kv, layer, pos[t0], kc, vc, size_t(KV), size_t(c.head_dim));
    cpu::f32_bf16sink_attention(q.data() + size_t(t0) * Q, pos + t0, kv, L.sinks, attn.data() + size_t(t0) * Q, n, shape);
    ch.kv->append(layer, kc, vc, n);
    t0 += n;
  }
  round_act(attn);
  linear(L.o, L8 ? &L8->o : nullptr, L.o_bias, attn.data(), o.data(), T);
  for (size_t i = 0; i < o.size(); ++i) x[i] += o[i];
}

void GptOssCpuModel::moe_block(const GptOssLayerWeights& L, int layer, float* x, int T) const {
  const GptOssConfig& c = w_.config;
  const int H = c.hidden, I = c.intermediate, E = c.num_experts, K = c.experts_per_token;
  std::vector<float> h(size_t(T) * H), router(size_t(T) * E), wts(size_t(T) * K);
  std::vector<int32_t> idx(size_t(T) * K);
  cpu::f32_bf16w_rmsnorm(x, L.mlp_norm, h.data(), T, H, float(c.rms_norm_eps));
  cpu::f32_bf16w_matmul(h.data(), L.router.w, L.router_bias, router.data(), T, E, H);
  cpu::f32_topk_softmax(router.data(), idx.data(), wts.data(), T, E, K);
  const bool w4a8 = mxfp4_experts_ && w4a8_long_chunks_ && size_t(T) * K >= size_t(kMxfp4LtRowsPerExpert) * E;
  const bool bf16_in = bf16_act_ || (mxfp4_experts_ && !w4a8);  // the experts' inputs rounded to BF16
  if (bf16_in) round_to_bf16(h);  // the experts' input (the router read it in fp32)

  // Group (token, weight) pairs by expert; run each expert once over its tokens.
  std::vector<std::vector<std::pair<int, float>>> by_expert(E);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < K; ++j) by_expert[idx[size_t(t) * K + j]].push_back({t, wts[size_t(t) * K + j]});
  std::vector<float> xe, t1, a, y;
  for (int e = 0; e < E; ++e) {
    const auto& toks = by_expert[e];
    if (toks.empty()) continue;
    const int n = int(toks.size());
    xe.resize(size_t(n) * H);
    t1.resize(size_t(n) * 2 * I);
    a.resize(size_t(n) * I);
    y.resize(size_t(n) * H);
    for (int i = 0; i < n; ++i) std::memcpy(&xe[size_t(i) * H], &h[size_t(toks[i].first) * H], H * sizeof(float));
    const bool q8 = fp8_ && !mxfp4_experts_;
    if (w4a8) expert_linear_w4a8(L.mlp1, w4a8_block_rows_[size_t(layer)].first, e, xe.data(), t1.data(), n);
    else expert_linear(L.mlp1, q8 ? &fp8_->layers[layer].mlp1 : nullptr, e, xe.data(), t1.data(), n);
    cpu::f32_swiglu_clamped(t1.data(), a.data(), n, I, float(c.swiglu_alpha), float(c.swiglu_limit));
    if (bf16_in) round_to_bf16(a);
    if (w4a8) expert_linear_w4a8(L.mlp2, w4a8_block_rows_[size_t(layer)].second, e, a.data(), y.data(), n);
    else expert_linear(L.mlp2, q8 ? &fp8_->layers[layer].mlp2 : nullptr, e, a.data(), y.data(), n);
    for (int i = 0; i < n; ++i) {
      float* xt = x + size_t(toks[i].first) * H;
      const float w = toks[i].second;
      for (int d = 0; d < H; ++d) xt[d] += w * y[size_t(i) * H + d];
    }
  }
}

}  // namespace osprey
