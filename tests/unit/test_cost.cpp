// The benchmarks' cost model (model/gpt_oss_cost.h) against what a checkpoint holds: a prefill's
// FLOPs are 2 per active weight per token in every layer, counted here from the tensors of a
// synthetic checkpoint, plus the attention's pairs counted one query at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>

#include "formats/safetensors.h"
#include "model/gpt_oss_cost.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

double numel(const TensorStore& s, const std::string& name) { return double(s.get(name).numel()); }

TEST(CostModel, PrefillFlopsCountEveryLayersActiveWeightsAndAttentionPairs) {
  test::TempDir dir;
  const SynthPreset& p = synth_preset("parity-b");  // window 8: prompts outrun it
  synth_checkpoint(p, dir.str(), {.seed = 1, .progress = false});
  TensorStore s = TensorStore::open(dir.str());
  const GptOssConfig& c = p.config;
  double active = 0;  // weights one token goes through
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string pre = fmt::format("model.layers.{}.", l);
    for (const char* m : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                          "self_attn.o_proj.weight", "mlp.router.weight"})
      active += numel(s, pre + m);
    for (const char* m : {"mlp.experts.gate_up_proj_blocks", "mlp.experts.down_proj_blocks"})  // two FP4 values a byte
      active += 2 * numel(s, pre + m) * c.experts_per_token / c.num_experts;
  }
  const double unembed = numel(s, "lm_head.weight");
  for (int n : {1, 5, 8, 9, 300}) {
    double pairs = 0;  // (query, key) pairs, one query at a time
    for (int l = 0; l < c.num_layers; ++l)
      for (int q = 0; q < n; ++q) pairs += c.layer_is_sliding[l] ? std::min(q + 1, c.sliding_window) : q + 1;
    const double want = 2 * active * n + 2 * unembed + 4.0 * c.num_heads * c.head_dim * pairs;
    EXPECT_DOUBLE_EQ(prefill_flops(c, n), want) << "n = " << n;
  }
}

TEST(CostModel, DecodeStepBytesGrowWithKeysAndTouchedExperts) {
  const GptOssConfig& c = synth_preset("20b").config;
  const int full = int(std::count(c.layer_is_sliding.begin(), c.layer_is_sliding.end(), false));
  const double kv_position = 2.0 * 2 * c.kv_dim();  // K and V of one position of one layer, bf16
  // One more position: every full layer's keys and values; sliding layers only inside the window.
  EXPECT_DOUBLE_EQ(decode_step_bytes(c, 1, 8001) - decode_step_bytes(c, 1, 8000), full * kv_position);
  EXPECT_DOUBLE_EQ(decode_step_bytes(c, 1, 101) - decode_step_bytes(c, 1, 100), c.num_layers * kv_position);
  // The FP8 cache: a byte a value and a byte of exponent per position and KV head.
  EXPECT_DOUBLE_EQ(decode_step_bytes(c, 1, 8001, true, true) - decode_step_bytes(c, 1, 8000, true, true),
                   full * 2.0 * (c.kv_dim() + c.num_kv_heads));
  // Batch 1 reads top-k experts a layer; a large batch touches (nearly) all of them.
  const double expert = fp8_matrix_bytes(2.0 * c.intermediate, c.hidden) + fp8_matrix_bytes(c.hidden, c.intermediate) +
                        2.0 * 3 * c.intermediate;
  const double b1 = decode_step_bytes(c, 1, 1), b2 = decode_step_bytes(c, 2, 1);
  const double k = c.experts_per_token, E = c.num_experts;
  EXPECT_NEAR(b2 - b1, c.num_layers * expert * (k - k * k / E) + c.num_layers * kv_position, 1.0);
  EXPECT_NEAR(decode_step_bytes(c, 4096, 1) - 4096 * c.num_layers * kv_position,
              b1 - c.num_layers * kv_position + c.num_layers * expert * (E - k), 1.0);
  // Dense weights, four experts a layer and the unembedding in FP8: about 3.6 GB at batch 1.
  EXPECT_GT(b1, 3.0e9);
  EXPECT_LT(b1, 5.0e9);
}

// MXFP4 experts as the GPU keeps them: 4.25 bits a weight in 16-row tiles whose last 128-column
// block is padded (K = 2880: 23 blocks for 22.5), so a batch-1 step of the 20b reads the dense
// weights as before and each touched expert in 1088 / 2048 of its FP8 bytes, roughly.
TEST(CostModel, Mxfp4ExpertBytes) {
  const GptOssConfig& c = synth_preset("20b").config;
  EXPECT_DOUBLE_EQ(mxfp4_matrix_bytes(5760, 2880), 360.0 * 23 * 1088);
  const double H = c.hidden, I = c.intermediate, k = c.experts_per_token;
  const double fp8 = fp8_matrix_bytes(2 * I, H) + fp8_matrix_bytes(H, I);
  const double mx = mxfp4_matrix_bytes(2 * I, H) + mxfp4_matrix_bytes(H, I);
  EXPECT_NEAR(mx / fp8, 1088.0 / 2048 * 23 / 22.5, 0.01);
  EXPECT_NEAR(decode_step_bytes(c, 1, 1) - decode_step_bytes(c, 1, 1, /*mxfp4_experts=*/true),
              c.num_layers * k * (fp8 - mx), 1.0);
}

}  // namespace
}  // namespace osprey
