// Token selection from one row of logits: greedy, or seeded sampling with temperature, top-k, top-p.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

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

// OpenAI's logit_bias, presence_penalty and frequency_penalty: added to the logits before the
// constraint and the sampler; the penalties count the tokens generated so far (not the prompt).
struct LogitAdjust {
  float presence = 0, frequency = 0;
  std::vector<std::pair<int32_t, float>> bias;
  bool empty() const { return presence == 0 && frequency == 0 && bias.empty(); }
  void apply(std::span<const int32_t> generated, std::span<float> logits) const;
};

// Log probabilities of the distribution a request samples from: log-softmax of logits / T (T the
// temperature, 1 when greedy) after logit_bias, penalties and the constraint's mask, before
// top-k / top-p truncation.
struct TokenLogprobs {
  float logprob = 0;                               // of the chosen token
  std::vector<std::pair<int32_t, float>> top;      // the k most likely, most likely first
};
TokenLogprobs token_logprobs(std::span<const float> logits, float temperature, int32_t chosen, int k);

// One token choice handed to whoever selects the token (the host, or a model runner that selects
// on the device): the request's parameters and, for sampling, the uniform draw in [0, 1) that the
// request's generator produced for this token.
struct TokenChoice {
  SamplingParams params;
  double u = 0.0;
};

// Token masks (bit t % 32 of word t / 32 set: token t allowed): the other logits become -inf.
// The CPU twin of cuda::mask_logits_rows.
void apply_token_mask(std::span<const uint32_t> mask, std::span<float> logits);

// The token a choice selects from logits: argmax when greedy, else sample_from(logits, params, u).
int32_t choose_token(std::span<const float> logits, const TokenChoice& choice);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // draw() then sample_from(), or argmax when greedy (no draw).
  int32_t sample(std::span<const float> logits);
  // The choice for the next token: the parameters and, unless greedy, the next draw (this advances
  // the generator exactly as sample() would).
  TokenChoice next_choice();
  // The next n choices without taking them (speculative verification draws one per position it
  // checks, then takes only as many as it emits); skip(n) then takes n, as n next_choice() would.
  std::vector<TokenChoice> peek_choices(int n) const;
  void skip(int n);
  const SamplingParams& params() const { return p_; }
  // Temperature, top-k, top-p sampling with the uniform draw u in [0, 1).
  static int32_t sample_from(std::span<const float> logits, const SamplingParams& p, double u);

 private:
  double draw();  // 53 random bits -> [0, 1)
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace osprey
