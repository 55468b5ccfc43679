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

void apply_token_mask(std::span<const uint32_t> mask, std::span<float> logits) {
  for (size_t t = 0; t < logits.size(); ++t)
    if (t / 32 >= mask.size() || !((mask[t / 32] >> (t % 32)) & 1u)) logits[t] = -INFINITY;
}

void LogitAdjust::apply(std::span<const int32_t> generated, std::span<float> logits) const {
  for (auto [t, b] : bias)
    if (t >= 0 && size_t(t) < logits.size()) logits[size_t(t)] += b;
  if (presence == 0 && frequency == 0) return;
  std::vector<int32_t> seen(generated.begin(), generated.end());
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size();) {
    size_t j = i;
    while (j < seen.size() && seen[j] == seen[i]) ++j;
    if (seen[i] >= 0 && size_t(seen[i]) < logits.size()) logits[size_t(seen[i])] -= presence + frequency * float(j - i);
    i = j;
  }
}

TokenLogprobs token_logprobs(std::span<const float> logits, float temperature, int32_t chosen, int k) {
  const double inv_t = temperature > 0 ? 1.0 / temperature : 1.0;
  const float m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l - m) * inv_t);
  const double lse = std::log(sum);
  auto lp = [&](int32_t t) { return float(double(logits[size_t(t)] - m) * inv_t - lse); };
  TokenLogprobs out;
  out.logprob = lp(chosen);
  if (k > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const size_t n = std::min(order.size(), size_t(k));
    std::partial_sort(order.begin(), order.begin() + long(n), order.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < n; ++i) out.top.push_back({order[i], lp(order[i])});
  }
  return out;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { p.validate(); }

// 53 random bits -> [0, 1): the same on every platform, unlike std::uniform_real_distribution.
double Sampler::draw() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(std::span<const float> logits) {
  return p_.greedy() ? argmax(logits) : sample_from(logits, p_, draw());
}

TokenChoice Sampler::next_choice() { return {p_, p_.greedy() ? 0.0 : draw()}; }

std::vector<TokenChoice> Sampler::peek_choices(int n) const {
  Sampler ahead(*this);
  std::vector<TokenChoice> out;
  for (int i = 0; i < n; ++i) out.push_back(ahead.next_choice());
  return out;
}

void Sampler::skip(int n) {
  for (int i = 0; i < n; ++i) next_choice();
}

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
