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
  const float m = *std::max_element(logits.begin(), logits.end());
  auto weight = [&](int32_t i) { return std::exp(double(logits[size_t(i)] - m) / p.temperature); };
  const bool top_k = p.top_k > 0 && p.top_k < V, top_p = p.top_p < 1.0f;
  if (!top_k && !top_p) {  // every token, in token order
    std::vector<double> w(static_cast<size_t>(V));
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += w[size_t(i)] = weight(i);
    double r = u * sum;
    for (int i = 0; i < V; ++i)
      if ((r -= w[size_t(i)]) < 0) return i;
    return V - 1;
  }
  // Candidates by descending logit, equal logits by ascending token: sorted only as far as needed.
  const int n = top_k ? p.top_k : V;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  int sorted = 0;
  auto sort_to = [&](int upto) {  // the next largest after the first `sorted`, which are in place
    upto = std::min(upto, n);
    if (upto > sorted) std::partial_sort(order.begin() + sorted, order.begin() + upto, order.end(), by_logit);
    sorted = std::max(sorted, upto);
  };
  std::vector<double> prob;  // weights of the sorted prefix
  auto prob_at = [&](int j) {
    if (j >= sorted) sort_to(std::max(64, 4 * sorted));
    while (int(prob.size()) <= j) prob.push_back(weight(order[prob.size()]));
    return prob[size_t(j)];
  };
  double total = 0;  // the candidates' mass: the top k in sorted order, or every token in token order
  if (top_k)
    for (int j = 0; j < n; ++j) total += prob_at(j);
  else
    for (int i = 0; i < V; ++i) total += weight(i);
  int keep = n;
  double kept = total;
  if (top_p) {  // the smallest prefix whose mass reaches top_p of the total
    const double target = double(p.top_p) * total;
    double cum = 0;
    for (int j = 0; j < n; ++j)
      if ((cum += prob_at(j)) >= target) {
        keep = j + 1, kept = cum;
        break;
      }
  }
  double r = u * kept;
  for (int j = 0; j < keep; ++j)
    if ((r -= prob_at(j)) < 0) return order[size_t(j)];
  return order[size_t(keep - 1)];
}

}  // namespace osprey
