// A model runner for models that keep each sequence's KV cache themselves, in numbered slots
// (the GPU path). The runner maps engine sequences to slots, prefills chunks slot by slot and runs
// all single-token chunks of a step as one batched decode.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace osprey {

class SlotModel {
 public:
  virtual ~SlotModel() = default;
  virtual const GptOssConfig& config() const = 0;
  virtual int slots() const = 0;
  virtual int length(int slot) const = 0;
  virtual void release(int slot) = 0;
  // Appends tokens to the slot; the logits after its last token.
  virtual std::vector<float> prefill(int slot, std::span<const int32_t> tokens) = 0;
  // The same, returning the next token as choose_token picks it with `choice`. This default
  // selects on the host from prefill()'s logits; a GPU model selects on the device.
  // mask (optional): the token mask the selection obeys (StepMasks' format).
  virtual int32_t prefill_select(int slot, std::span<const int32_t> tokens, const TokenChoice& choice,
                                 const uint32_t* mask = nullptr);
  // One token for each slot (distinct); logits [B][vocab] in the same order.
  virtual std::vector<std::vector<float>> decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) = 0;
  // The same step, returning the next token of each slot as choose_token picks it with choices[i].
  // This default selects on the host from decode()'s logits; a GPU model selects on the device.
  // masks (optional, rows indexed as slots): compute() is called once the step is under way.
  virtual std::vector<int32_t> decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                             std::span<const TokenChoice> choices, const StepMasks* masks = nullptr);
};

class SlotModelRunner final : public ModelRunner {
 public:
  explicit SlotModelRunner(SlotModel& model) : model_(model) {}
  std::vector<std::vector<float>> run(const StepPlan& plan) override;
  bool selects_tokens() const override { return true; }
  std::vector<int32_t> run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                  const StepMasks* masks = nullptr) override;
  const GptOssConfig& config() const override { return model_.config(); }
  void release(int64_t seq_id) override;
  bool uses_host_kv() const override { return false; }
  int slots_in_use() const { return int(slot_of_.size()); }

 private:
  int slot_for(int64_t seq_id);
  // Runs the plan's prompt chunks slot by slot (prefill(chunk index, slot, tokens)) and its
  // decode chunks as one batch (decode(slots, tokens, chunk indices)).
  template <typename Prefill, typename DecodeBatch>
  void walk(const StepPlan& plan, Prefill&& prefill, DecodeBatch&& decode_batch);
  SlotModel& model_;
  std::unordered_map<int64_t, int> slot_of_;
  std::vector<int> free_;
  bool initialized_ = false;
};

// The CPU engine as a SlotModel (a KvCache per slot): the reference the slot runner is tested
// against, and a way to run the runner's logic where there is no GPU.
class CpuSlotModel final : public SlotModel {
 public:
  CpuSlotModel(const GptOssCpuModel& model, int slots);
  const GptOssConfig& config() const override { return model_.config(); }
  int slots() const override { return int(caches_.size()); }
  int length(int slot) const override { return caches_.at(slot).length(); }
  void release(int slot) override;
  std::vector<float> prefill(int slot, std::span<const int32_t> tokens) override;
  std::vector<std::vector<float>> decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) override;

 private:
  const GptOssCpuModel& model_;
  std::vector<KvCache> caches_;
};

class GptOssCudaFp8;

// The FP8 CUDA path as a SlotModel (one GPU slot per engine sequence).
class CudaSlotModel final : public SlotModel {
 public:
  explicit CudaSlotModel(GptOssCudaFp8& model) : model_(model) {}
  const GptOssConfig& config() const override;
  int slots() const override;
  int length(int slot) const override;
  void release(int slot) override;
  std::vector<float> prefill(int slot, std::span<const int32_t> tokens) override;
  int32_t prefill_select(int slot, std::span<const int32_t> tokens, const TokenChoice& choice,
                         const uint32_t* mask = nullptr) override;
  std::vector<std::vector<float>> decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) override;
  // Tokens selected on the GPU: greedy steps take the argmax computed in the step's graph, steps
  // with a sampling row sample there too (decode_sample); no logits are copied. Masks are computed
  // on the host while the step's graph runs, then applied to the logits on the GPU.
  std::vector<int32_t> decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const TokenChoice> choices, const StepMasks* masks = nullptr) override;

 private:
  GptOssCudaFp8& model_;
};

}  // namespace osprey
