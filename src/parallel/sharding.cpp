#include "parallel/sharding.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

std::string ParallelLayout::name() const { return fmt::format("tp{} dp{} ep{}", tp, dp, ep); }

Range aligned_part(int n, int parts, int p, int align) {
  const int blocks = (n + align - 1) / align, base = blocks / parts, extra = blocks % parts;
  const int b0 = p * base + std::min(p, extra), b1 = b0 + base + (p < extra ? 1 : 0);
  return {std::min(n, b0 * align), std::min(n, b1 * align)};
}

std::vector<RankShard> plan_shards(const GptOssConfig& c, const ParallelLayout& L, int align) {
  if (L.tp < 1 || L.dp < 1 || L.ep < 1) fail("{}: every degree must be at least 1", L.name());
  if (c.num_heads % L.tp) fail("{}: {} attention heads do not split over tp {}", L.name(), c.num_heads, L.tp);
  if (c.num_kv_heads >= L.tp ? c.num_kv_heads % L.tp : L.tp % c.num_kv_heads)
    fail("{}: {} KV heads neither split over nor replicate evenly across tp {}", L.name(), c.num_kv_heads, L.tp);
  if (L.world() % L.ep) fail("{}: ep {} does not divide the world of {} GPUs (tp x dp)", L.name(), L.ep, L.world());
  if (c.num_experts % L.ep) fail("{}: {} experts do not split over ep {}", L.name(), c.num_experts, L.ep);
  const int moe_tp = L.moe_tp();
  if ((c.intermediate + align - 1) / align < moe_tp)
    fail("{}: the intermediate size {} has fewer blocks of {} than moe_tp {}", L.name(), c.intermediate, align, moe_tp);
  const int hq = c.num_heads / L.tp, group = c.num_heads / c.num_kv_heads;
  std::vector<RankShard> out;
  for (int r = 0; r < L.world(); ++r) {
    RankShard s;
    s.rank = r, s.tp_rank = r % L.tp, s.dp_rank = r / L.tp;
    s.ep_rank = r / moe_tp, s.moe_tp_rank = r % moe_tp;
    s.q_heads = {s.tp_rank * hq, (s.tp_rank + 1) * hq};
    s.kv_heads = {s.q_heads.begin / group, (s.q_heads.end - 1) / group + 1};  // split, or the one shared
    const int per = c.num_experts / L.ep;
    s.experts = {s.ep_rank * per, (s.ep_rank + 1) * per};
    s.intermediate = aligned_part(c.intermediate, moe_tp, s.moe_tp_rank, align);
    s.vocab = aligned_part(c.vocab, L.tp, s.tp_rank, 1);
    s.adds_o_bias = s.tp_rank == 0;
    s.adds_down_bias = s.moe_tp_rank == 0;
    out.push_back(s);
  }
  return out;
}

namespace {
void rows_of(const bf16* w, int cols, int r0, int r1, std::vector<bf16>& out) {
  out.insert(out.end(), w + size_t(r0) * cols, w + size_t(r1) * cols);
}
}  // namespace

LayerShard shard_layer(const GptOssLayerWeights& w, const GptOssConfig& c, const RankShard& s) {
  if (!w.q.w || !w.mlp1.blocks) fail("shard_layer: the layer's weights are not in the checkpoint's formats (FP8-converted?)");
  const int d = c.head_dim, H = c.hidden, I = c.intermediate;
  LayerShard o;
  rows_of(w.q.w, H, s.q_heads.begin * d, s.q_heads.end * d, o.q);
  rows_of(w.k.w, H, s.kv_heads.begin * d, s.kv_heads.end * d, o.k);
  rows_of(w.v.w, H, s.kv_heads.begin * d, s.kv_heads.end * d, o.v);
  auto span_of = [](const bf16* p, int b, int e) { return std::vector<bf16>(p + b, p + e); };
  o.q_bias = span_of(w.q_bias, s.q_heads.begin * d, s.q_heads.end * d);
  o.k_bias = span_of(w.k_bias, s.kv_heads.begin * d, s.kv_heads.end * d);
  o.v_bias = span_of(w.v_bias, s.kv_heads.begin * d, s.kv_heads.end * d);
  o.sinks = span_of(w.sinks, s.q_heads.begin, s.q_heads.end);
  const int Q = c.q_dim(), c0 = s.q_heads.begin * d, c1 = s.q_heads.end * d;
  for (int r = 0; r < H; ++r) o.o.insert(o.o.end(), w.o.w + size_t(r) * Q + c0, w.o.w + size_t(r) * Q + c1);
  if (s.adds_o_bias) o.o_bias = span_of(w.o_bias, 0, H);
  // Experts: gate/up rows 2i, 2i + 1 and down columns i of the intermediate range; MXFP4 blocks of
  // 32 columns stay whole (the range is 32-aligned).
  const Range ir = s.intermediate;
  if (ir.begin % 32 || (ir.end % 32 && ir.end != I)) fail("shard_layer: intermediate range [{}, {}) is not on MXFP4 blocks", ir.begin, ir.end);
  const Mxfp4Experts& m1 = w.mlp1;
  const Mxfp4Experts& m2 = w.mlp2;
  const size_t kb1 = size_t(m1.cols / 32), kb2 = size_t(m2.cols / 32);
  o.mlp1_rows = 2 * ir.size(), o.mlp2_cols = ir.size();
  for (int e = s.experts.begin; e < s.experts.end; ++e) {
    const uint8_t* b1 = m1.expert_blocks(e);
    const uint8_t* s1 = m1.expert_scales(e);
    o.mlp1_blocks.insert(o.mlp1_blocks.end(), b1 + size_t(2 * ir.begin) * kb1 * 16, b1 + size_t(2 * ir.end) * kb1 * 16);
    o.mlp1_scales.insert(o.mlp1_scales.end(), s1 + size_t(2 * ir.begin) * kb1, s1 + size_t(2 * ir.end) * kb1);
    const bf16* bias1 = m1.expert_bias(e);
    o.mlp1_bias.insert(o.mlp1_bias.end(), bias1 + 2 * ir.begin, bias1 + 2 * ir.end);
    const uint8_t* b2 = m2.expert_blocks(e);
    const uint8_t* s2 = m2.expert_scales(e);
    const size_t q0 = size_t(ir.begin / 32), q1 = size_t((ir.end + 31) / 32);
    for (int r = 0; r < H; ++r) {
      o.mlp2_blocks.insert(o.mlp2_blocks.end(), b2 + (r * kb2 + q0) * 16, b2 + (r * kb2 + q1) * 16);
      o.mlp2_scales.insert(o.mlp2_scales.end(), s2 + r * kb2 + q0, s2 + r * kb2 + q1);
    }
    if (s.adds_down_bias) {
      const bf16* bias2 = m2.expert_bias(e);
      o.mlp2_bias.insert(o.mlp2_bias.end(), bias2, bias2 + H);
    }
  }
  return o;
}

}  // namespace osprey
