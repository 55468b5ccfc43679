// The FP8 CUDA model in the engine and outside it.
//
// CudaModelRunner: the engine's runner. Each step is one forward over all its chunks (decode
// tokens and prompt chunks together), on KV that the engine's block manager places: the runner
// gives each running sequence a slot (a row of the model's page tables) and hands the model the
// sequence's block tables before the step. Tokens are selected on the GPU.
//
// CudaSlots: a few sequences on the model without the engine (generate, benchmarks, tests), one
// per slot, their KV placed by a block manager of their own (no prefix caching).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey {

// The GPU's sampling row for a sequence's draw.
GptOssCudaFp8::RowSampling row_sampling(const TokenChoice& c);

class CudaModelRunner final : public ModelRunner {
 public:
  explicit CudaModelRunner(GptOssCudaFp8& model) : model_(model) {}
  std::vector<std::vector<float>> run(const StepPlan& plan) override;
  bool selects_tokens() const override { return true; }
  std::vector<int32_t> run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                  const StepMasks* masks = nullptr) override;
  const GptOssConfig& config() const override { return model_.config(); }
  void release(int64_t seq_id) override;
  bool uses_host_kv() const override { return false; }
  int kv_block_size() const override { return GptOssCudaFp8::kBlockPositions; }
  int kv_blocks() const override { return model_.kv_blocks(); }
  bool provides_hidden() const override { return true; }  // read from the GPU on demand
  std::vector<float> hidden(size_t row) const override { return model_.last_hidden(row); }
  int slots_in_use() const { return int(slot_of_.size()); }

 private:
  // The step's chunks for the model, each sequence's block tables handed over first.
  std::vector<GptOssCudaFp8::Chunk> chunks_of(const StepPlan& plan);
  int slot_for(int64_t seq_id);
  GptOssCudaFp8& model_;
  std::unordered_map<int64_t, int> slot_of_;
  std::vector<int> free_;
  bool initialized_ = false;
};

class CudaSlots {
 public:
  explicit CudaSlots(GptOssCudaFp8& model);
  ~CudaSlots();
  int slots() const { return int(seq_.size()); }
  int length(int slot) const;
  void release(int slot);  // its blocks go back; its length becomes 0
  int64_t free_blocks() const { return kv_.available_blocks(); }

  // Appends tokens to the slot (any number: forwards of up to max_rows); the last one's next
  // token as `row` selects it (mask: optional, the allowed tokens), or its logits, or (all) every
  // token's logits [T][vocab].
  int32_t prefill_select(int slot, std::span<const int32_t> tokens, const GptOssCudaFp8::RowSampling& row = {},
                         const uint32_t* mask = nullptr);
  std::vector<float> prefill_logits(int slot, std::span<const int32_t> tokens, bool all);
  // One token for each listed slot (distinct), one forward: the next token of each.
  std::vector<int32_t> decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const GptOssCudaFp8::RowSampling> rows,
                                     const GptOssCudaFp8::Masks* masks = nullptr);
  std::vector<std::vector<float>> decode_logits(std::span<const int32_t> slots, std::span<const int32_t> tokens);
  // Speculative verification: each listed slot (distinct) appends tokens[i] (its newest token and
  // drafts) as one verify chunk; the token after every one of them, selected with rows (one per
  // token, in order), or their logits. truncate(slot, n) rolls a slot back to n positions.
  std::vector<int32_t> verify_select(std::span<const int32_t> slots, const std::vector<std::vector<int32_t>>& tokens,
                                     std::span<const GptOssCudaFp8::RowSampling> rows);
  std::vector<std::vector<float>> verify_logits(std::span<const int32_t> slots, const std::vector<std::vector<int32_t>>& tokens);
  void truncate(int slot, int n);
  // One forward over parts of several slots (distinct), each appended at its slot's length: the
  // logits of the parts that sample, in order (the engine's ragged step, by hand).
  struct Part {
    int slot = 0;
    std::vector<int32_t> tokens;
    bool sample = true;
  };
  std::vector<std::vector<float>> ragged_logits(const std::vector<Part>& parts);
  // Benchmarks: the slot holds n positions of the pool's random K/V, as after a prefill of n tokens.
  void fill_random(int slot, int n);

 private:
  // Blocks for positions [start, start + n) of the slot, handed to the model.
  GptOssCudaFp8::Chunk place(int slot, int start, std::span<const int32_t> tokens, bool sample);
  void advance(std::span<const GptOssCudaFp8::Chunk> chunks);
  template <typename Fn>
  void pieces(int slot, std::span<const int32_t> tokens, bool sample_all, Fn&& fn);
  std::vector<GptOssCudaFp8::Chunk> verify_chunks(std::span<const int32_t> slots,
                                                  const std::vector<std::vector<int32_t>>& tokens);
  GptOssCudaFp8& model_;
  KvBlockManager kv_;
  std::vector<std::unique_ptr<SeqKv>> seq_;
  bool randomized_ = false;
};

}  // namespace osprey
