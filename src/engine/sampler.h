// Token selection from one row of logits: greedy, or seeded sampling with temperature, top-k, top-p.
#pragma once
#include <cstdint>
#include <random>
#include <span>

namespace osprey {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f;        // nucleus mass kept, (0, 1]
  int top_k = 0;             // 0: no limit
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
  void validate() const;     // throws Error on out-of-range values
};

int32_t argmax(std::span<const float> logits);  // lowest index on ties

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(std::span<const float> logits);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace osprey
