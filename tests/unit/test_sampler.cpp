#include <cmath>
#include <random>
#include <gtest/gtest.h>

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

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({.temperature = -1}), Error);
  EXPECT_THROW(Sampler({.top_p = 0}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.top_k = -2}), Error);
}

}  // namespace
}  // namespace osprey
