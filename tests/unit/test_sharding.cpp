// Sharding for tensor, expert and data parallelism (issue 17), on the CPU: every layout of 1 to 8
// GPUs gives each head, KV head, expert, intermediate block and vocabulary row to exactly the ranks
// it should; invalid layouts are refused with the constraint named; and a rank's slices of a real
// checkpoint reassemble to the unsharded tensors and compute the same (the row-parallel output
// projection summed over the tp group, the experts' gate/up and down slices summed over moe_tp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/gpt_oss_weights.h"
#include "parallel/sharding.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

std::vector<ParallelLayout> layouts_of(int world) {
  std::vector<ParallelLayout> out;
  for (int tp = 1; tp <= world; ++tp)
    if (world % tp == 0)
      for (int ep = 1; ep <= world; ++ep)
        if (world % ep == 0) out.push_back({tp, world / tp, ep});
  return out;
}

TEST(Sharding, AlignedPartsCoverEvenlyOnBlocks) {
  // 2,880 = 90 blocks of 32 over 4: 23, 23, 22, 22 blocks.
  EXPECT_EQ(aligned_part(2880, 4, 0, 32), (Range{0, 736}));
  EXPECT_EQ(aligned_part(2880, 4, 1, 32), (Range{736, 1472}));
  EXPECT_EQ(aligned_part(2880, 4, 3, 32), (Range{2176, 2880}));
  // 2,880 = 22.5 blocks of 128 over 2: the partial block goes to the second part.
  EXPECT_EQ(aligned_part(2880, 2, 0, 128), (Range{0, 1536}));
  EXPECT_EQ(aligned_part(2880, 2, 1, 128), (Range{1536, 2880}));
}

TEST(Sharding, EveryLayoutOfOneToEightGpusCoversTheModelOnce) {
  for (const char* preset : {"20b", "120b"}) {
    const GptOssConfig c = synth_preset(preset).config;
    for (int world : {1, 2, 4, 8})
      for (const ParallelLayout& L : layouts_of(world)) {
        SCOPED_TRACE(std::string(preset) + " " + L.name());
        const std::vector<RankShard> plan = plan_shards(c, L);
        ASSERT_EQ(int(plan.size()), world);
        const int group = c.num_heads / c.num_kv_heads;
        for (int dp = 0; dp < L.dp; ++dp) {
          std::vector<int> head_owner(size_t(c.num_heads), 0), vocab(size_t(c.vocab), 0);
          int o_bias = 0;
          for (const RankShard& s : plan) {
            if (s.dp_rank != dp) continue;
            for (int h = s.q_heads.begin; h < s.q_heads.end; ++h) {
              ++head_owner[size_t(h)];
              EXPECT_TRUE(h / group >= s.kv_heads.begin && h / group < s.kv_heads.end) << "head " << h << " lacks its KV head";
            }
            EXPECT_LE(s.kv_heads.size(), std::max(1, c.num_kv_heads / L.tp));
            for (int v = s.vocab.begin; v < s.vocab.end; ++v) ++vocab[size_t(v)];
            o_bias += s.adds_o_bias;
          }
          EXPECT_TRUE(std::all_of(head_owner.begin(), head_owner.end(), [](int n) { return n == 1; }));
          EXPECT_TRUE(std::all_of(vocab.begin(), vocab.end(), [](int n) { return n == 1; }));
          EXPECT_EQ(o_bias, 1);
        }
        // Each (expert, intermediate block) is held by exactly one rank; one down bias per expert.
        std::vector<int> held(size_t(c.num_experts) * c.intermediate, 0), down_bias(size_t(c.num_experts), 0);
        for (const RankShard& s : plan) {
          EXPECT_EQ(s.intermediate.begin % 32, 0);
          for (int e = s.experts.begin; e < s.experts.end; ++e) {
            for (int i = s.intermediate.begin; i < s.intermediate.end; ++i) ++held[size_t(e) * c.intermediate + i];
            down_bias[size_t(e)] += s.adds_down_bias;
          }
        }
        EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](int n) { return n == 1; }));
        EXPECT_TRUE(std::all_of(down_bias.begin(), down_bias.end(), [](int n) { return n == 1; }));
      }
  }
  // The uneven cut: 20b experts over 4 moe_tp ranks.
  const auto plan = plan_shards(synth_preset("20b").config, {4, 1, 1});
  EXPECT_EQ(plan[2].intermediate, (Range{1472, 2176}));
  // KV heads replicated when tp exceeds them: 20b at tp 16 (8 KV heads): two ranks share each.
  const auto wide = plan_shards(synth_preset("20b").config, {16, 1, 16});
  EXPECT_EQ(wide[0].kv_heads, (Range{0, 1}));
  EXPECT_EQ(wide[1].kv_heads, (Range{0, 1}));
  EXPECT_EQ(wide[2].kv_heads, (Range{1, 2}));
}

TEST(Sharding, InvalidLayoutsAreRefused) {
  const GptOssConfig c = synth_preset("20b").config;
  auto refused = [](ParallelLayout L, const char* why, const GptOssConfig& cfg = synth_preset("20b").config) {
    try {
      plan_shards(cfg, L);
      ADD_FAILURE() << L.name() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused({3, 1, 1}, "attention heads");
  refused({1, 3, 3}, "experts do not split");
  refused({2, 1, 4}, "does not divide the world");
  refused({0, 1, 1}, "at least 1");
  GptOssConfig odd = c;
  odd.num_kv_heads = 3, odd.num_heads = 48;
  refused({2, 1, 1}, "KV heads", odd);
}

class ShardingWeights : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    // parity-a: 6 heads over 2 KV heads, 8 experts, hidden 96, intermediate 160 (5 MXFP4 blocks).
    synth_checkpoint(synth_preset("parity-a"), dir_->str(), {.seed = 4, .progress = false});
    w_ = new GptOssWeights(GptOssWeights::load(dir_->str()));
  }
  static void TearDownTestSuite() {
    delete w_;
    delete dir_;
  }
  static test::TempDir* dir_;
  static GptOssWeights* w_;
};
test::TempDir* ShardingWeights::dir_ = nullptr;
GptOssWeights* ShardingWeights::w_ = nullptr;

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

TEST_F(ShardingWeights, SlicesReassembleAndComputeTheSame) {
  const GptOssConfig& c = w_->config;
  const GptOssLayerWeights& lw = w_->layers[1];
  const int H = c.hidden, Q = c.q_dim(), I = c.intermediate, d = c.head_dim;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> attn(static_cast<size_t>(Q)), x(static_cast<size_t>(H));
  for (float& v : attn) v = nd(rng);
  for (float& v : x) v = nd(rng);
  std::vector<float> o_full(static_cast<size_t>(H));
  cpu::f32_bf16w_matmul(attn.data(), lw.o.w, lw.o_bias, o_full.data(), 1, H, Q);
  for (const ParallelLayout& L : {ParallelLayout{2, 1, 2}, {2, 1, 1}, {1, 2, 2}, {2, 2, 4}, {2, 2, 1}, {6, 1, 2}, {1, 4, 1}}) {
    SCOPED_TRACE(L.name());
    const std::vector<RankShard> plan = plan_shards(c, L);
    // Attention of dp group 0: q rows and sinks reassemble; the row-parallel output sums to the full one.
    std::vector<bf16> q_rows, sinks;
    std::vector<float> o_sum(size_t(H), 0.0f);
    for (const RankShard& s : plan) {
      if (s.dp_rank != 0) continue;
      const LayerShard sh = shard_layer(lw, c, s);
      q_rows.insert(q_rows.end(), sh.q.begin(), sh.q.end());
      sinks.insert(sinks.end(), sh.sinks.begin(), sh.sinks.end());
      EXPECT_EQ(sh.k.size(), size_t(s.kv_heads.size()) * d * H);
      EXPECT_TRUE(std::equal(sh.k.begin(), sh.k.end(), lw.k.w + size_t(s.kv_heads.begin) * d * H));
      const int cols = s.q_heads.size() * d;
      std::vector<float> part(static_cast<size_t>(H));
      cpu::f32_bf16w_matmul(attn.data() + size_t(s.q_heads.begin) * d, sh.o.data(), sh.o_bias.empty() ? nullptr : sh.o_bias.data(),
                            part.data(), 1, H, cols);
      for (int i = 0; i < H; ++i) o_sum[size_t(i)] += part[size_t(i)];
    }
    EXPECT_TRUE(std::equal(q_rows.begin(), q_rows.end(), lw.q.w, lw.q.w + size_t(Q) * H));
    EXPECT_TRUE(std::equal(sinks.begin(), sinks.end(), lw.sinks, lw.sinks + c.num_heads));
    EXPECT_LT(rel(o_sum, o_full), 1e-6);
    // Every expert: its slices over the moe_tp ranks that hold it sum to the full expert's output.
    for (int e = 0; e < c.num_experts; ++e) {
      std::vector<float> t(static_cast<size_t>(2 * I)), a(static_cast<size_t>(I)), y_full(static_cast<size_t>(H)), y_sum(static_cast<size_t>(H), 0.0f);
      cpu::f32_mxfp4w_matmul(x.data(), lw.mlp1.expert_blocks(e), lw.mlp1.expert_scales(e), lw.mlp1.expert_bias(e), t.data(), 1,
                             2 * I, H);
      cpu::f32_swiglu_clamped(t.data(), a.data(), 1, I, float(c.swiglu_alpha), float(c.swiglu_limit));
      cpu::f32_mxfp4w_matmul(a.data(), lw.mlp2.expert_blocks(e), lw.mlp2.expert_scales(e), lw.mlp2.expert_bias(e), y_full.data(),
                             1, H, I);
      int holders = 0;
      for (const RankShard& s : plan) {
        if (e < s.experts.begin || e >= s.experts.end) continue;
        ++holders;
        const LayerShard sh = shard_layer(lw, c, s);
        const int k = e - s.experts.begin, n = sh.mlp2_cols, kb1 = H / 32, kb2 = (n + 31) / 32;
        std::vector<float> ts(static_cast<size_t>(2 * n)), as(static_cast<size_t>(n)), ys(static_cast<size_t>(H));
        cpu::f32_mxfp4w_matmul(x.data(), sh.mlp1_blocks.data() + size_t(k) * 2 * n * kb1 * 16,
                               sh.mlp1_scales.data() + size_t(k) * 2 * n * kb1, sh.mlp1_bias.data() + size_t(k) * 2 * n,
                               ts.data(), 1, 2 * n, H);
        cpu::f32_swiglu_clamped(ts.data(), as.data(), 1, n, float(c.swiglu_alpha), float(c.swiglu_limit));
        cpu::f32_mxfp4w_matmul(as.data(), sh.mlp2_blocks.data() + size_t(k) * H * kb2 * 16,
                               sh.mlp2_scales.data() + size_t(k) * H * kb2,
                               sh.mlp2_bias.empty() ? nullptr : sh.mlp2_bias.data() + size_t(k) * H, ys.data(), 1, H, n);
        for (int i = 0; i < H; ++i) y_sum[size_t(i)] += ys[size_t(i)];
      }
      EXPECT_EQ(holders, L.moe_tp()) << "expert " << e;
      EXPECT_LT(rel(y_sum, y_full), 1e-6) << "expert " << e;
    }
  }
  EXPECT_THROW(plan_shards(c, {3, 1, 1}), Error);  // 2 KV heads neither split over nor replicate across 3
}

}  // namespace
}  // namespace osprey
