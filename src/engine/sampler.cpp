#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace osprey {

void SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0) fail("temperature must be >= 0, got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { p.validate(); }

// 53 random bits -> [0, 1): the same on every platform, unlike std::uniform_real_distribution.
double Sampler::draw() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits) {
  return p_.greedy() ? argmax(logits) : sample_from(logits, p_, draw());
}

TokenChoice Sampler::next_choice() { return {p_, p_.greedy() ? 0.0 : draw()}; }

int32_t choose_token(std::span<const float> logits, const TokenChoice& choice) {
  return choice.params.greedy() ? argmax(logits) : Sampler::sample_from(logits, choice.params, choice.u);
}

int32_t Sampler::sample_from(std::span<const float> logits, const SamplingParams& p, double u) {
  const int V = int(logits.size());
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
    order.resize(k);
  } else if (p.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += prob[i] = std::exp(double(logits[order[i]] - m) / p.temperature);
  size_t keep = order.size();
  if (p.top_p < 1.0f) {  // smallest prefix (by probability) whose mass reaches top_p
    double cum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += prob[i] / sum;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
  double r = u * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace osprey
