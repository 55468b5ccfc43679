#include <cmath>
#include <random>
#include <gtest/gtest.h>
#include <numeric>
#include <algorithm>

#include "core/error.h"
#include "engine/sampler.h"

namespace osprey {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({.temperature = 0});
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, SeededAndReproducible) {
  std::vector<float> l = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f};
  Sampler a({.temperature = 1, .seed = 42}), b({.temperature = 1, .seed = 42}), c({.temperature = 1, .seed = 43});
  std::vector<int> ra, rb, rc;
  for (int i = 0; i < 64; ++i) {
    ra.push_back(a.sample(l));
    rb.push_back(b.sample(l));
    rc.push_back(c.sample(l));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

// The choice handed to a token-selecting runner reproduces sample(): next_choice() draws as
// sample() does (none when greedy) and choose_token() selects as sample() would with that draw.
TEST(Sampler, NextChoiceThenChooseTokenEqualsSample) {
  const std::vector<SamplingParams> params = {{.temperature = 0, .seed = 1},
                                              {.temperature = 0.7f, .seed = 2},
                                              {.temperature = 1.3f, .top_k = 3, .seed = 3},
                                              {.temperature = 1.0f, .top_p = 0.8f, .seed = 4},
                                              {.temperature = 0.5f, .top_p = 0.5f, .top_k = 20, .seed = 5}};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const SamplingParams& p : params) {
    Sampler a(p), b(p);
    for (int i = 0; i < 200; ++i) {
      std::vector<float> l(50);
      for (auto& x : l) x = nd(rng);
      EXPECT_EQ(choose_token(l, b.next_choice()), a.sample(l)) << "temperature " << p.temperature << " step " << i;
    }
  }
}

TEST(Sampler, FrequenciesFollowTheTemperedSoftmax) {
  std::vector<float> l = {0.0f, 1.0f, 2.0f};
  Sampler s({.temperature = 2.0f, .seed = 1});
  std::vector<int> count(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(l)];
  double z = 1 + std::exp(0.5) + std::exp(1.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(count[i] / double(n), std::exp(0.5 * i) / z, 0.015) << i;
}

TEST(Sampler, TopKAndTopPTruncate) {
  std::vector<float> l = {5.0f, 4.9f, 0.0f, -1.0f};
  Sampler k1({.temperature = 1, .top_k = 1, .seed = 3});
  Sampler k2({.temperature = 1, .top_k = 2, .seed = 3});
  Sampler p({.temperature = 1, .top_p = 0.5f, .seed = 3});
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(k1.sample(l), 0);
    EXPECT_LT(k2.sample(l), 2);
    EXPECT_EQ(p.sample(l), 0);  // token 0 alone holds > 50% of the mass
  }
}

// sample_from sorts candidates only as far as its cut needs: the same token as the definition,
// which sorts every token (descending logit, ascending token among equal logits), sums the
// candidates' mass (the top k in sorted order, or every token in token order), keeps the
// smallest sorted prefix reaching top_p of it and walks that prefix with u times its mass.
int32_t sample_by_definition(const std::vector<float>& l, const SamplingParams& p, double u) {
  const int V = int(l.size());
  const float m = *std::max_element(l.begin(), l.end());
  auto w = [&](int i) { return std::exp(double(l[size_t(i)] - m) / p.temperature); };
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
  const bool top_k = p.top_k > 0 && p.top_k < V;
  if (!top_k && p.top_p >= 1.0f) std::iota(order.begin(), order.end(), 0);  // token order
  const int n = top_k ? p.top_k : V;
  double total = 0;
  for (int i = 0; i < V; ++i) total += top_k ? (i < n ? w(order[size_t(i)]) : 0.0) : w(i);
  int keep = n;
  double kept = total, cum = 0;
  if (p.top_p < 1.0f)
    for (int j = 0; j < n; ++j)
      if ((cum += w(order[size_t(j)])) >= double(p.top_p) * total) {
        keep = j + 1, kept = cum;
        break;
      }
  double r = u * kept;
  for (int j = 0; j < keep; ++j)
    if ((r -= w(order[size_t(j)])) < 0) return order[size_t(j)];
  return order[size_t(keep - 1)];
}

TEST(Sampler, SampleFromEqualsTheDefinition) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  int checked = 0;
  for (int V : {7, 777, 5000}) {
    std::vector<float> l(static_cast<size_t>(V));
    for (int round = 0; round < 8; ++round) {
      for (auto& x : l) x = nd(rng);
      for (int i = 0; i + 1 < V; i += 5) l[size_t(i + 1)] = l[size_t(i)];  // ties
      for (const SamplingParams& p : {SamplingParams{.temperature = 1.0f}, SamplingParams{.temperature = 0.7f, .top_p = 0.9f},
                                      SamplingParams{.temperature = 3.0f, .top_p = 0.999f}, SamplingParams{.temperature = 1.0f, .top_k = 3},
                                      SamplingParams{.temperature = 1.5f, .top_p = 0.6f, .top_k = 300},
                                      SamplingParams{.temperature = 0.5f, .top_p = 1e-6f}})
        for (double u : {0.0, 0.013, 0.5, 0.77, 0.999999}) {
          EXPECT_EQ(Sampler::sample_from(l, p, u), sample_by_definition(l, p, u))
              << "V " << V << " round " << round << " T " << p.temperature << " top_p " << p.top_p << " top_k " << p.top_k << " u " << u;
          ++checked;
        }
    }
  }
  EXPECT_EQ(checked, 3 * 8 * 6 * 5);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1}), Error);
  EXPECT_THROW(Sampler({.top_p = 0}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.top_k = -2}), Error);
}

}  // namespace
}  // namespace osprey
