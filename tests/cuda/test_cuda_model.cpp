// The FP8 model end to end on the GPU, at the prompt lengths that broke it: cuBLASLt's block-scaled
// GEMM takes a row count that is a multiple of 4, so a prefill of T rows computes round4(T); the
// all-positions logits buffer once held only T rows and `osprey logits --backend cuda` died with an
// illegal memory access at 33, 34, 65 and 83 tokens (2026-12-01, on trained checkpoints).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "model/gpt_oss_weights.h"
#include "synth/synth.h"
#include "../unit/test_util.h"

namespace osprey {
namespace {

// The trained osprey-mini's shape (hidden 256: cuBLASLt takes its GEMMs), two layers.
SynthPreset mini_shape() {
  SynthPreset p = synth_preset("tiny");
  p.name = "mini-shape";
  GptOssConfig& c = p.config;
  c.hidden = 256, c.num_heads = 4, c.num_kv_heads = 1, c.head_dim = 64, c.intermediate = 256;
  c.validate("mini-shape");
  return p;
}

TEST(CudaFp8Model, AllLogitsAtLengthsNotAMultipleOf4) {
  test::TempDir dir;
  synth_checkpoint(mini_shape(), dir.str(), {.seed = 5, .progress = false, .branch_scale = 0.25f});
  GptOssWeights w = GptOssWeights::load(dir.str());
  const int V = w.config.vocab;
  GptOssCudaFp8 model(w, {.slots = 1, .max_context = 512, .graphs = false});
  std::mt19937 rng(11);
  for (int T : {33, 34, 35, 65, 83, 130, 257}) {
    std::vector<int32_t> tokens(T);
    for (auto& t : tokens) t = int32_t(rng() % 200000);
    model.release(0);
    std::vector<float> all = model.prefill(0, tokens, /*all_logits=*/true);
    model.release(0);
    std::vector<float> last = model.prefill(0, tokens, /*all_logits=*/false);
    OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_EQ(all.size(), size_t(T) * V);
    ASSERT_EQ(last.size(), size_t(V));
    size_t nonfinite = 0;
    for (float v : all) nonfinite += !std::isfinite(v);
    EXPECT_EQ(nonfinite, 0u) << "T=" << T;
    // The same layers (cuBLASLt from 32 rows); the last row's unembedding differs only in its GEMM
    // (cuBLASLt over every row against the skinny kernel for one): ~1e-4.
    double num = 0, den = 0;
    for (int i = 0; i < V; ++i) {
      const double d = double(all[size_t(T - 1) * V + i]) - last[i];
      num += d * d, den += double(last[i]) * last[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-3) << "T=" << T;
  }
}

// Masked decode (structured outputs on the GPU): the masks computed during the step, applied on
// the device, then argmax or a draw, equal the host path (the step's logits, the CPU twin of the
// mask, choose_token) at batch 1, 3 and 17, greedy and sampled rows, some rows without a mask.
TEST(CudaFp8Model, MaskedDecodeEqualsTheHostPath) {
  test::TempDir dir;
  synth_checkpoint(mini_shape(), dir.str(), {.seed = 6, .progress = false, .branch_scale = 0.25f});
  GptOssWeights w = GptOssWeights::load(dir.str());
  const int V = w.config.vocab, words = (V + 31) / 32;
  for (int B : {1, 3, 17}) {
    GptOssCudaFp8 a(w, {.slots = B, .max_context = 256}), b(w, {.slots = B, .max_context = 256});
    std::mt19937 rng(static_cast<uint32_t>(B));
    std::vector<int32_t> slots(B), toks(B);
    for (int i = 0; i < B; ++i) {
      slots[i] = i;
      std::vector<int32_t> prompt(5 + i);
      for (auto& t : prompt) t = int32_t(rng() % 200000);
      a.prefill(i, prompt, false);
      b.prefill(i, prompt, false);
      toks[i] = int32_t(rng() % 200000);
    }
    std::vector<std::vector<uint32_t>> masks(B, std::vector<uint32_t>(words));
    std::vector<GptOssCudaFp8::RowSampling> rows(B);
    for (int i = 0; i < B; ++i) {
      for (auto& m : masks[i]) m = uint32_t(rng()) & uint32_t(rng()) & uint32_t(rng());
      if (i % 2) rows[i] = {.temperature = 0.9f, .top_p = 0.95f, .u = double(rng() % 1000) / 1000.0};
    }
    bool computed = false;
    std::vector<int32_t> got = a.decode_masked(
        slots, toks, rows, [&] { computed = true; },
        [&](size_t i) -> const uint32_t* { return i % 3 == 2 ? nullptr : masks[i].data(); });
    EXPECT_TRUE(computed);
    std::vector<std::vector<float>> lg = b.decode_logits(slots, toks);
    for (int i = 0; i < B; ++i) {
      if (i % 3 != 2) apply_token_mask(masks[i], lg[i]);
      TokenChoice c;
      c.params.temperature = rows[i].temperature, c.params.top_p = rows[i].top_p, c.u = rows[i].u;
      EXPECT_EQ(got[i], choose_token(lg[i], c)) << "B " << B << " row " << i;
      if (i % 3 != 2) EXPECT_TRUE((masks[i][size_t(got[i]) / 32] >> (got[i] % 32)) & 1u) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace osprey
