#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "core/error.h"
#include "model/gpt_oss_cuda.h"
#include "engine/cuda_runner.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey {

namespace {
template <typename TimePoint>
void fill_stats(GenerateStats* stats, size_t prompt, size_t generated, TimePoint t0, TimePoint t1, TimePoint t2) {
  if (!stats) return;
  stats->prompt_tokens = int(prompt);
  stats->generated_tokens = int(generated);
  stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  stats->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
}
}  // namespace

std::vector<int32_t> generate_loop(const GptOssConfig& cfg, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& opt, const ForwardFn& forward, GenerateStats* stats,
                                   const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) fail("generate: the prompt is empty");
  if (opt.max_tokens < 0) fail("max_tokens must be >= 0");
  if (opt.prefill_chunk <= 0) fail("prefill chunk must be positive");
  if (int(prompt.size()) + opt.max_tokens > cfg.max_position_embeddings)
    fail("prompt ({} tokens) plus max_tokens ({}) exceeds the model's context of {}", prompt.size(), opt.max_tokens,
         cfg.max_position_embeddings);
  using clock = std::chrono::steady_clock;
  Sampler sampler(opt.sampling);
  std::vector<int32_t> out;
  auto t0 = clock::now();
  std::vector<float> logits;
  for (size_t i = 0; i < prompt.size(); i += opt.prefill_chunk) {
    size_t n = std::min(prompt.size() - i, size_t(opt.prefill_chunk));
    logits = forward(std::span(prompt).subspan(i, n));
  }
  auto t1 = clock::now();
  for (int step = 0; step < opt.max_tokens; ++step) {
    int32_t tok = sampler.sample(logits);
    out.push_back(tok);
    if (on_token && !on_token(tok)) break;
    const auto& stops = opt.stop_tokens.empty() ? cfg.eos_token_ids : opt.stop_tokens;
    if (opt.stop_at_eos && std::count(stops.begin(), stops.end(), tok)) break;
    if (step + 1 == opt.max_tokens) break;
    logits = forward(std::span(&out.back(), 1));
  }
  fill_stats(stats, prompt.size(), out.size(), t0, t1, clock::now());
  return out;
}

std::vector<int32_t> generate(const GptOssCpuModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt, GenerateStats* stats,
                              const std::function<bool(int32_t)>& on_token) {
  KvCache cache = model.new_cache();
  return generate_loop(
      model.config(), prompt, opt,
      [&](std::span<const int32_t> tokens) { return model.forward(tokens, cache, /*all_logits=*/false); }, stats,
      on_token);
}

namespace {
// The token loop of the GPU paths: first(prompt) prefills and returns the first id, next(id)
// appends it and returns the following one; only ids cross to the host.
template <typename First, typename Next>
std::vector<int32_t> token_loop(const GptOssConfig& cfg, const std::vector<int32_t>& prompt,
                                 const GenerateOptions& opt, GenerateStats* stats, First&& first, Next&& next) {
  if (prompt.empty()) fail("generate: the prompt is empty");
  using clock = std::chrono::steady_clock;
  const auto& stops = opt.stop_tokens.empty() ? cfg.eos_token_ids : opt.stop_tokens;
  std::vector<int32_t> out;
  auto t0 = clock::now();
  int32_t tok = first(prompt);
  auto t1 = clock::now();
  for (int step = 0; step < opt.max_tokens; ++step) {
    out.push_back(tok);
    if (opt.stop_at_eos && std::count(stops.begin(), stops.end(), tok)) break;
    if (step + 1 == opt.max_tokens) break;
    tok = next(out.back());
  }
  fill_stats(stats, prompt.size(), out.size(), t0, t1, clock::now());
  return out;
}
}  // namespace

std::vector<int32_t> generate_greedy_cuda(GptOssCudaModel& model, const std::vector<int32_t>& prompt,
                                          const GenerateOptions& opt, GenerateStats* stats) {
  model.reset();
  return token_loop(
      model.config(), prompt, opt, stats, [&](const std::vector<int32_t>& p) { return model.forward_argmax(p); },
      [&](int32_t t) { return model.forward_argmax(std::span(&t, 1)); });
}

std::vector<int32_t> generate_cuda(GptOssCudaFp8& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                   GenerateStats* stats) {
  // The token selection the server's runner does on the GPU, with the generator's draws in
  // sample()'s order (the token stream generate() would give from the same logits).
  CudaSlots slots(model);
  const int32_t slot = 0;
  Sampler sampler(opt.sampling);
  return token_loop(
      model.config(), prompt, opt, stats,
      [&](const std::vector<int32_t>& p) { return slots.prefill_select(slot, p, row_sampling(sampler.next_choice())); },
      [&](int32_t t) {
        const GptOssCudaFp8::RowSampling r = row_sampling(sampler.next_choice());
        return slots.decode_select(std::span(&slot, 1), std::span(&t, 1), std::span(&r, 1))[0];
      });
}

}  // namespace osprey
