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

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.greedy()) return argmax(logits);
  const int V = int(logits.size());
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int k = (p_.top_k > 0 && p_.top_k < V) ? p_.top_k : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
    order.resize(k);
  } else if (p_.top_p < 1.0f) {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += prob[i] = std::exp(double(logits[order[i]] - m) / p_.temperature);
  size_t keep = order.size();
  if (p_.top_p < 1.0f) {  // smallest prefix (by probability) whose mass reaches top_p
    double cum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += prob[i] / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
  // 53 random bits -> [0, 1): the same on every platform, unlike std::uniform_real_distribution.
  double r = double(rng_() >> 11) * 0x1.0p-53 * kept;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob[i];
    if (r < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace osprey
