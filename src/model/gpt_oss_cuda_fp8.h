// The Hopper path: gpt-oss on one GPU with FP8 e4m3 128x128 block-scaled weights (converted on
// the GPU at load, bit-identical to model/gpt_oss_fp8.h), activations quantized in 1x128 blocks,
// a paged BF16 KV cache shared by `slots` sequences, prefill in chunks (cuBLASLt block-scaled
// GEMMs for long chunks, the skinny tensor-core kernel otherwise) and batched decode steps that
// run as one CUDA graph per batch-size bucket. Plain C++ interface (no CUDA types).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/gpt_oss_weights.h"

namespace osprey {

class GptOssCudaFp8 {
 public:
  struct Options {
    int slots = 1;              // sequences held at once (decode batch up to this)
    int max_context = 4096;     // positions per sequence
    int prefill_chunk = 2048;   // tokens per prefill step (also sizes the sliding-window rings)
    bool graphs = true;         // decode steps as CUDA graphs
    int64_t kv_pages = 0;       // pages of 64 positions for the full-attention layers: 0 = slots x
                                // max_context; -1 = as many as fit in the free GPU memory (less 3 GiB)
    // Prefill GEMMs of 64+ rows through cuBLASLt (its FP8 products differ from exact fp32 sums by
    // ~1.2e-4 relative, measured); false: the skinny kernel everywhere (exact fp32 sums of the FP8 products).
    bool cublaslt = true;
  };
  GptOssCudaFp8(const GptOssWeights& w, const Options& opt);
  ~GptOssCudaFp8();

  const GptOssConfig& config() const;
  const Options& options() const;
  int length(int slot) const;
  void release(int slot);  // frees the slot's KV pages; its length becomes 0

  // Appends tokens to the slot; logits [T][vocab] (all_logits) or [1][vocab] of the last token.
  std::vector<float> prefill(int slot, std::span<const int32_t> tokens, bool all_logits);
  // Token selection on the GPU: temperature <= 0 greedy, else sampled as Sampler::sample_from
  // samples with top_p, top_k and the request generator's draw u in [0, 1).
  struct RowSampling {
    float temperature = 0.0f, top_p = 1.0f;
    int top_k = 0;
    double u = 0.0;
  };
  // The same prefill, returning only the next token (argmax, or sampled with `row`).
  int32_t prefill_argmax(int slot, std::span<const int32_t> tokens);
  // mask (optional, host): the allowed tokens (bit t % 32 of word t / 32), applied on the GPU.
  int32_t prefill_select(int slot, std::span<const int32_t> tokens, const RowSampling& row, const uint32_t* mask = nullptr);
  // One token for each listed slot (distinct): appends it and returns the greedy next ids.
  std::vector<int32_t> decode_argmax(std::span<const int32_t> slots, std::span<const int32_t> tokens);
  // The same step, returning the logits [B][vocab] (for constraints on the host).
  std::vector<std::vector<float>> decode_logits(std::span<const int32_t> slots, std::span<const int32_t> tokens);
  // The same step, each row's token selected on the GPU with rows[i].
  std::vector<int32_t> decode_sample(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const RowSampling> rows);
  // The same step with token masks: the step's graph is launched, compute() runs on the host
  // meanwhile (it fills the masks), row(i) is then slot i's mask (nullptr: none); the masks are
  // applied to the logits on the GPU before each row's argmax or draw.
  std::vector<int32_t> decode_masked(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const RowSampling> rows, const std::function<void()>& compute,
                                     const std::function<const uint32_t*(size_t)>& row);
  // Benchmarks: the slot holds n positions of random keys and values, as after a prefill of n
  // tokens (a decode step reads exactly the same bytes).
  void fill_random(int slot, int n);
  void synchronize();
  double weight_bytes() const;  // bytes of weights on the device
  int64_t free_kv_pages() const;
  // Device-to-device copy bandwidth (bytes read + written per second), the decode ceiling.
  static double measure_copy_bandwidth();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey
