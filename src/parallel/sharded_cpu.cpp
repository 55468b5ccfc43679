#include "parallel/sharded_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/gpt_oss_forward.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

namespace {

RankShard shard_of(const GptOssConfig& c, const ParallelLayout& L, const Communicator& comm) {
  if (L.dp != 1) fail("ShardedCpuRank: {}: the CPU's sharded forward takes dp 1 (dp replicas serve other requests)", L.name());
  if (comm.size() != L.world())
    fail("ShardedCpuRank: {} needs {} ranks; the communicator has {}", L.name(), L.world(), comm.size());
  return plan_shards(c, L)[size_t(comm.rank())];
}

}  // namespace

ShardedCpuRank::ShardedCpuRank(const GptOssWeights& w, const ParallelLayout& L, Communicator& comm)
    : w_(w),
      comm_(comm),
      shard_(shard_of(w.config, L, comm)),
      rope_(gpt_oss_rope_table(w.config)),
      cache_(gpt_oss_kv_windows(w.config), shard_.kv_heads.size(), w.config.head_dim) {
  const GptOssConfig& c = w.config;
  if (shard_.intermediate.size() % 32)
    fail("ShardedCpuRank: {}: the intermediate range of rank {} ({} values) is not whole MXFP4 blocks", L.name(),
         comm.rank(), shard_.intermediate.size());
  for (const GptOssLayerWeights& l : w.layers) layers_.push_back(shard_layer(l, c, shard_));
}

void ShardedCpuRank::reset() {
  cache_ = KvCache(gpt_oss_kv_windows(w_.config), shard_.kv_heads.size(), w_.config.head_dim);
}

void ShardedCpuRank::attention(int l, float* x, const int32_t* pos, int T) {
  const GptOssConfig& c = w_.config;
  const GptOssLayerWeights& L = w_.layers[size_t(l)];
  const LayerShard& S = layers_[size_t(l)];
  const int H = c.hidden, d = c.head_dim, hq = shard_.q_heads.size(), hk = shard_.kv_heads.size();
  std::vector<float> h(size_t(T) * H), q(size_t(T) * hq * d), k(size_t(T) * hk * d), v(size_t(T) * hk * d);
  std::vector<float> attn(size_t(T) * hq * d), o(size_t(T) * H);
  cpu::f32_bf16w_rmsnorm(x, L.attn_norm, h.data(), T, H, float(c.rms_norm_eps));
  cpu::f32_bf16w_matmul(h.data(), S.q.data(), S.q_bias.data(), q.data(), T, hq * d, H);
  cpu::f32_bf16w_matmul(h.data(), S.k.data(), S.k_bias.data(), k.data(), T, hk * d, H);
  cpu::f32_bf16w_matmul(h.data(), S.v.data(), S.v_bias.data(), v.data(), T, hk * d, H);
  cpu::f32_rope(q.data(), pos, rope_, T, hq);
  cpu::f32_rope(k.data(), pos, rope_, T, hk);
  // The held query heads read the held KV heads: the same grouping as the whole model's (or, when
  // KV heads are replicated, their one shared head).
  const cpu::AttentionShape shape{.num_heads = hq, .num_kv_heads = hk, .head_dim = d,
                                  .window = L.sliding ? c.sliding_window : 0,
                                  .scale = 1.0f / std::sqrt(float(d))};
  const ChunkKv kv(cache_, l, pos[0], k.data(), v.data(), size_t(hk) * d, size_t(d));
  cpu::f32_bf16sink_attention(q.data(), pos, kv, S.sinks.data(), attn.data(), T, shape);
  cache_.append(l, k.data(), v.data(), T);
  cpu::f32_bf16w_matmul(attn.data(), S.o.data(), S.o_bias.empty() ? nullptr : S.o_bias.data(), o.data(), T, H, hq * d);
  comm_.all_reduce_sum(o.data(), o.size());  // the row-parallel projection's partial sums
  for (size_t i = 0; i < o.size(); ++i) x[i] += o[i];
}

void ShardedCpuRank::moe(int l, float* x, int T) {
  const GptOssConfig& c = w_.config;
  const GptOssLayerWeights& L = w_.layers[size_t(l)];
  const LayerShard& S = layers_[size_t(l)];
  const int H = c.hidden, E = c.num_experts, K = c.experts_per_token, R = shard_.intermediate.size();
  std::vector<float> h(size_t(T) * H), router(size_t(T) * E), wts(size_t(T) * K), acc(size_t(T) * H, 0.0f);
  std::vector<int32_t> idx(size_t(T) * K);
  cpu::f32_bf16w_rmsnorm(x, L.mlp_norm, h.data(), T, H, float(c.rms_norm_eps));
  cpu::f32_bf16w_matmul(h.data(), L.router.w, L.router_bias, router.data(), T, E, H);
  cpu::f32_topk_softmax(router.data(), idx.data(), wts.data(), T, E, K);
  std::vector<float> xe, t1, a, y;
  const size_t blocks1 = size_t(2 * R) * (H / 32), blocks2 = size_t(H) * (R / 32);
  for (int e = shard_.experts.begin; e < shard_.experts.end; ++e) {
    std::vector<std::pair<int, float>> toks;  // the dispatch: this expert's tokens, in token order
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < K; ++j)
        if (idx[size_t(t) * K + j] == e) toks.push_back({t, wts[size_t(t) * K + j]});
    if (toks.empty()) continue;
    const int n = int(toks.size()), i = e - shard_.experts.begin;
    xe.resize(size_t(n) * H), t1.resize(size_t(n) * 2 * R), a.resize(size_t(n) * R), y.resize(size_t(n) * H);
    for (int r = 0; r < n; ++r) std::memcpy(&xe[size_t(r) * H], &h[size_t(toks[r].first) * H], H * sizeof(float));
    cpu::f32_mxfp4w_matmul(xe.data(), S.mlp1_blocks.data() + size_t(i) * blocks1 * 16,
                           S.mlp1_scales.data() + size_t(i) * blocks1, S.mlp1_bias.data() + size_t(i) * 2 * R,
                           t1.data(), n, 2 * R, H);
    cpu::f32_swiglu_clamped(t1.data(), a.data(), n, R, float(c.swiglu_alpha), float(c.swiglu_limit));
    cpu::f32_mxfp4w_matmul(a.data(), S.mlp2_blocks.data() + size_t(i) * blocks2 * 16,
                           S.mlp2_scales.data() + size_t(i) * blocks2,
                           S.mlp2_bias.empty() ? nullptr : S.mlp2_bias.data() + size_t(i) * H, y.data(), n, H, R);
    for (int r = 0; r < n; ++r) {
      float* at = acc.data() + size_t(toks[r].first) * H;
      for (int dd = 0; dd < H; ++dd) at[dd] += toks[r].second * y[size_t(r) * H + dd];
    }
  }
  comm_.all_reduce_sum(acc.data(), acc.size());  // the combine over every rank's experts
  for (size_t j = 0; j < acc.size(); ++j) x[j] += acc[j];
}

std::vector<float> ShardedCpuRank::forward(std::span<const int32_t> tokens, bool all_logits) {
  const GptOssConfig& c = w_.config;
  const int H = c.hidden, T = int(tokens.size()), V = c.vocab;
  if (T == 0) fail("ShardedCpuRank::forward: no tokens");
  check_token_ids(tokens, c);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) pos[size_t(i)] = cache_.length() + i;
  std::vector<float> x(size_t(T) * H);
  cpu::bf16_embedding(w_.embed.w, tokens.data(), x.data(), T, H);
  for (int l = 0; l < c.num_layers; ++l) {
    attention(l, x.data(), pos.data(), T);
    moe(l, x.data(), T);
  }
  cache_.advance(T);
  const int first = all_logits ? 0 : T - 1, rows = T - first;
  std::vector<float> h(size_t(rows) * H);
  cpu::f32_bf16w_rmsnorm(x.data() + size_t(first) * H, w_.final_norm, h.data(), rows, H, float(c.rms_norm_eps));
  // This rank's vocabulary rows, padded to the largest part so every rank gathers the same count.
  const Range vr = shard_.vocab;
  int widest = 0;
  for (int r = 0; r < comm_.size(); ++r) widest = std::max(widest, aligned_part(V, comm_.size(), r, 1).size());
  std::vector<float> mine(size_t(rows) * widest, 0.0f), part(size_t(rows) * vr.size());
  cpu::f32_bf16w_matmul(h.data(), w_.unembed.w + size_t(vr.begin) * H, nullptr, part.data(), rows, vr.size(), H);
  for (int r = 0; r < rows; ++r) std::copy_n(&part[size_t(r) * vr.size()], vr.size(), &mine[size_t(r) * widest]);
  std::vector<float> all(size_t(comm_.size()) * mine.size()), logits(size_t(rows) * V);
  comm_.all_gather(mine.data(), mine.size(), all.data());
  for (int q = 0; q < comm_.size(); ++q) {
    const Range qr = aligned_part(V, comm_.size(), q, 1);
    for (int r = 0; r < rows; ++r)
      std::copy_n(&all[size_t(q) * mine.size() + size_t(r) * widest], qr.size(), &logits[size_t(r) * V + qr.begin]);
  }
  return logits;
}

}  // namespace osprey
