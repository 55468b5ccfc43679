// Parity with Hugging Face transformers' GptOss: goldens in tests/data/parity/<case>/ were made
// on the GPU machine by tests/parity/make_goldens.py (float32, eager attention) from checkpoints
// that `osprey synth` wrote. Here the same checkpoint is synthesized again (same preset and seed),
// run through the CPU engine, and compared: per-position relative error <= 1e-4 and identical
// greedy continuations.
#include <cmath>
#include <filesystem>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "engine/generate.h"
#include "model/gpt_oss_forward.h"
#include "synth/synth.h"
#include "../unit/test_util.h"

namespace osprey {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> golden_cases() {
  std::vector<std::string> v;
  fs::path root = fs::path(OSPREY_TEST_DATA) / "parity";
  if (fs::exists(root))
    for (auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "meta.json")) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Parity, GoldensArePresent) {
  // The goldens must be committed; an empty list would make the parity tests vacuous.
  EXPECT_GE(golden_cases().size(), 2u);
}

class ParityVsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(ParityVsTransformers, LogitsAndGreedyContinuation) {
  fs::path dir = fs::path(OSPREY_TEST_DATA) / "parity" / GetParam();
  auto meta = nlohmann::json::parse(test::read_file((dir / "meta.json").string()));
  test::TempDir ckpt;
  synth_checkpoint(synth_preset(meta["preset"]), ckpt.str(), {.seed = meta["seed"].get<uint64_t>(), .progress = false, .branch_scale = meta.value("branch_scale", 1.0f)});
  GptOssWeights w = GptOssWeights::load(ckpt.str());
  GptOssCpuModel model(w);
  const int V = w.config.vocab;

  std::vector<int32_t> tokens = meta["tokens"].get<std::vector<int32_t>>();
  NpyF32 golden = read_npy_f32((dir / "logits.npy").string());
  ASSERT_EQ(golden.shape, (std::vector<int64_t>{int64_t(tokens.size()), V}));
  KvCache cache = model.new_cache();
  std::vector<float> logits = model.forward(tokens, cache, /*all_logits=*/true);
  double worst = 0;
  int argmax_agree = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* a = &logits[t * V];
    const float* b = &golden.data[t * V];
    double num = 0, den = 0;
    for (int i = 0; i < V; ++i) {
      num += double(a[i] - b[i]) * (a[i] - b[i]);
      den += double(b[i]) * b[i];
    }
    double rel = std::sqrt(num / den);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "position " << t;
    argmax_agree += argmax({a, size_t(V)}) == argmax({b, size_t(V)});
  }
  EXPECT_EQ(argmax_agree, int(tokens.size()));
  std::printf("[parity %s] %zu positions, worst relative error %.3g\n", GetParam().c_str(), tokens.size(), worst);

  std::vector<int32_t> prompt = meta["greedy_prompt"].get<std::vector<int32_t>>();
  std::vector<int32_t> expect = meta["greedy_new_tokens"].get<std::vector<int32_t>>();
  GenerateOptions opt{.max_tokens = int(expect.size()), .sampling = {.temperature = 0}, .stop_at_eos = false};
  EXPECT_EQ(generate(model, prompt, opt), expect);
}

// The trained default model as shipped (data/osprey-mini.tar.xz, unpacked by scripts/setup.sh):
// transformers fp32 logits of a held-out dialogue, kept over the ids the model uses (train.py keeps
// every other id's embedding and unembedding rows at zero, so their logits are exactly 0).
TEST(ParityTrained, OspreyMiniMatchesTransformers) {
  const fs::path model_dir = fs::path(OSPREY_MODELS_DIR) / "osprey-mini";
  const fs::path dir = fs::path(OSPREY_TEST_DATA) / "parity_trained" / "osprey-mini";
  ASSERT_TRUE(fs::exists(model_dir / "config.json")) << model_dir << " is missing: run scripts/setup.sh";
  auto meta = nlohmann::json::parse(test::read_file((dir / "meta.json").string()));
  const std::vector<int32_t> tokens = meta["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> cols = meta["columns"].get<std::vector<int32_t>>();
  NpyF32 golden = read_npy_f32((dir / "logits.npy").string());
  ASSERT_EQ(golden.shape, (std::vector<int64_t>{int64_t(tokens.size()), int64_t(cols.size())}));
  GptOssWeights w = GptOssWeights::load(model_dir.string());
  GptOssCpuModel model(w);
  const int V = w.config.vocab;
  KvCache cache = model.new_cache();
  std::vector<float> logits = model.forward(tokens, cache, /*all_logits=*/true);
  std::vector<bool> used(V, false);
  for (int32_t c : cols) used[c] = true;
  double worst = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* a = &logits[t * V];
    const float* b = &golden.data[t * cols.size()];
    double num = 0, den = 0;
    size_t best_a = 0, best_b = 0;
    for (size_t j = 0; j < cols.size(); ++j) {
      const double d = double(a[cols[j]]) - b[j];
      num += d * d, den += double(b[j]) * b[j];
      if (a[cols[j]] > a[cols[best_a]]) best_a = j;
      if (b[j] > b[best_b]) best_b = j;
    }
    int nonzero_unused = 0;
    for (int i = 0; i < V; ++i) nonzero_unused += !used[i] && a[i] != 0.0f;
    EXPECT_EQ(nonzero_unused, 0) << "position " << t << ": an unused id has a non-zero logit";
    const double rel = std::sqrt(num / den);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "position " << t;
    EXPECT_EQ(best_a, best_b) << "position " << t;
  }
  std::printf("[parity osprey-mini] %zu positions, worst relative error %.3g\n", tokens.size(), worst);
}

INSTANTIATE_TEST_SUITE_P(Goldens, ParityVsTransformers, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ParityVsTransformers);

}  // namespace
}  // namespace osprey
