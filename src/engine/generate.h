// Token-in/token-out generation on one sequence: chunked prefill, then one token per step.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "model/gpt_oss_forward.h"

namespace osprey {

struct GenerateOptions {
  int max_tokens = 16;
  SamplingParams sampling;
  bool stop_at_eos = true;       // stop after emitting one of the config's eos ids
  std::vector<int32_t> stop_tokens;  // if set, these replace the config's eos ids
  int prefill_chunk = 512;       // tokens per prefill forward (bounds activation memory)
};

struct GenerateStats {
  int prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

class GptOssCudaModel;
class GptOssCudaFp8;
// Generation on the FP8 CUDA path (slot 0 of a CudaSlots; decode steps are graphs):
// greedy, or sampled on the GPU with opt.sampling's generator.
std::vector<int32_t> generate_cuda(GptOssCudaFp8& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                   GenerateStats* stats = nullptr);
// Greedy generation on the CUDA backend (argmax on the GPU; only ids cross to the host).
std::vector<int32_t> generate_greedy_cuda(GptOssCudaModel& model, const std::vector<int32_t>& prompt,
                                          const GenerateOptions& opt, GenerateStats* stats = nullptr);

// The host token loop over any forward of one sequence: forward(tokens) appends them and returns
// the last one's logits [vocab]; the prompt in opt.prefill_chunk pieces, then one token a step,
// chosen by a Sampler of opt.sampling. on_token (optional) sees each new token as it is chosen;
// returning false stops generation.
using ForwardFn = std::function<std::vector<float>(std::span<const int32_t>)>;
std::vector<int32_t> generate_loop(const GptOssConfig& cfg, const std::vector<int32_t>& prompt,
                                   const GenerateOptions& opt, const ForwardFn& forward, GenerateStats* stats = nullptr,
                                   const std::function<bool(int32_t)>& on_token = {});

// generate_loop over the CPU model, from an empty cache.
std::vector<int32_t> generate(const GptOssCpuModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt, GenerateStats* stats = nullptr,
                              const std::function<bool(int32_t)>& on_token = {});

}  // namespace osprey
