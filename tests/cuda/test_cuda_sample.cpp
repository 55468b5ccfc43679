// GPU sampling (sample_rows) against its CPU twin, Sampler::sample_from, with the same draws:
// temperature alone (candidates in token order), top-k and top-p (sorted candidates), greedy rows
// left untouched, on a small vocabulary with ties and on the full 201,088-token one, with few rows
// (every token sorted) and with many (the candidates above a histogram threshold). Runs on the
// GPU machine only; CI builds it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "kernels/cuda/sample.cuh"
#include "cuda_test_util.h"

namespace osprey {
namespace {

// `repeat` copies of each parameter set per round: enough rows make sample_rows gather
// candidates above a histogram threshold instead of sorting every token.
void SampleCase(int V, int rounds, uint32_t seed, int repeat = 1) {
  const std::vector<SamplingParams> sets = {{.temperature = 0},
                                              {.temperature = 1.0f},
                                              {.temperature = 0.6f},
                                              {.temperature = 1.3f, .top_k = 5},
                                              {.temperature = 0.8f, .top_p = 0.7f},
                                              {.temperature = 1.0f, .top_p = 0.95f, .top_k = 40},
                                              {.temperature = 2.0f, .top_k = V},
                                              {.temperature = 0.7f, .top_p = 1e-6f},
                                              {.temperature = 3.0f, .top_p = 0.99f},  // the cut deep in the row
                                              {.temperature = 1.0f, .top_p = 0.5f, .top_k = 3000}};
  std::vector<SamplingParams> params;
  for (int i = 0; i < repeat; ++i) params.insert(params.end(), sets.begin(), sets.end());
  const int rows = int(params.size());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  cuda::SampleScratch scratch;
  int compared = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> logits(size_t(rows) * V);
    for (auto& x : logits) x = nd(rng);
    for (int i = 0; i + 1 < V; i += 7) logits[i + 1] = logits[i];  // ties: the lower token id first
    std::vector<cuda::SampleRow> rp(rows);
    std::vector<int32_t> want(rows), init(rows, -7);
    for (int r = 0; r < rows; ++r) {
      const double u = ud(rng);
      rp[r] = {params[r].temperature, params[r].top_p, params[r].top_k, u};
      std::span<const float> row(logits.data() + size_t(r) * V, size_t(V));
      want[r] = params[r].greedy() ? -7 : Sampler::sample_from(row, params[r], u);
    }
    Dev<float> dl(logits);
    Dev<int32_t> out(init);
    cuda::sample_rows(dl.p, rows, V, rp.data(), out.p, scratch, nullptr);
    auto got = out.get();
    for (int r = 0; r < rows; ++r, ++compared)
      EXPECT_EQ(got[r], want[r]) << "V " << V << " round " << round << " row " << r << " (temperature "
                                 << params[r].temperature << ", top_k " << params[r].top_k << ", top_p "
                                 << params[r].top_p << ")";
  }
  EXPECT_EQ(compared, rows * rounds);
}

TEST(CudaSample, SmallVocabularyMatchesHostSampler) { SampleCase(777, 40, 1); }
TEST(CudaSample, FullVocabularyMatchesHostSampler) { SampleCase(201088, 6, 2); }
TEST(CudaSample, ManyRowsGatherCandidatesAndMatchHostSampler) { SampleCase(777, 3, 3, 150); }

// -0.0 and +0.0 are equal to the host's comparison, so they tie and keep token order.
TEST(CudaSample, SignedZerosTieInTokenOrder) {
  const int V = 8;
  std::vector<float> logits;
  std::vector<cuda::SampleRow> rp;
  std::vector<int32_t> want;
  for (double u : {0.1, 0.4, 0.7, 0.95}) {
    for (int i = 0; i < V; ++i) logits.push_back(i % 2 ? 0.0f : -0.0f);
    rp.push_back({1.0f, 1.0f, 3, u});
    const SamplingParams p{.temperature = 1.0f, .top_k = 3};
    want.push_back(Sampler::sample_from(std::span<const float>(logits.data() + logits.size() - V, V), p, u));
  }
  EXPECT_EQ(want, (std::vector<int32_t>{0, 1, 2, 2}));  // the first three tokens, a third of the mass each
  cuda::SampleScratch scratch;
  Dev<float> dl(logits);
  Dev<int32_t> out(std::vector<int32_t>(rp.size(), -1));
  cuda::sample_rows(dl.p, int(rp.size()), V, rp.data(), out.p, scratch, nullptr);
  EXPECT_EQ(out.get(), want);
}

// Token masks on the GPU (mask_logits_rows) against the CPU twin (apply_token_mask): masked rows
// at an awkward vocabulary size (not a multiple of 32), rows without a mask left as they were.
TEST(CudaSample, TokenMasksMatchTheCpuTwin) {
  for (int V : {777, 201088}) {
    const int rows = 5, words = (V + 31) / 32;
    std::mt19937 rng(21);
    std::vector<float> logits(size_t(rows) * V);
    for (auto& x : logits) x = float(rng() % 1000) * 0.01f;
    std::vector<uint32_t> masks(size_t(rows) * words);
    for (auto& w : masks) w = uint32_t(rng()) & uint32_t(rng());  // about a quarter allowed
    const std::vector<int32_t> has = {1, 0, 1, 1, 0};
    std::vector<float> want = logits;
    for (int r = 0; r < rows; ++r)
      if (has[r])
        apply_token_mask(std::span(masks.data() + size_t(r) * words, size_t(words)), std::span(want.data() + size_t(r) * V, size_t(V)));
    Dev<float> dl(logits);
    Dev<uint32_t> dm(masks);
    Dev<int32_t> dh(has);
    cuda::mask_logits_rows(dl.p, rows, V, dm.p, dh.p, nullptr);
    auto got = dl.get();
    size_t masked = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "V " << V << " index " << i;
      masked += std::isinf(got[i]);
    }
    EXPECT_GT(masked, size_t(V));  // the masks did mask
  }
}

}  // namespace
}  // namespace osprey
