#include "engine/slot_runner.h"

#include "core/error.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey {

int SlotModelRunner::slot_for(int64_t seq_id) {
  if (!initialized_) {
    for (int s = model_.slots() - 1; s >= 0; --s) free_.push_back(s);
    initialized_ = true;
  }
  if (auto it = slot_of_.find(seq_id); it != slot_of_.end()) return it->second;
  if (free_.empty()) fail("all {} model slots are in use (--max-batch must not exceed them)", model_.slots());
  const int s = free_.back();
  free_.pop_back();
  model_.release(s);
  slot_of_[seq_id] = s;
  return s;
}

void SlotModelRunner::release(int64_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it == slot_of_.end()) return;
  model_.release(it->second);
  free_.push_back(it->second);
  slot_of_.erase(it);
}

std::vector<std::vector<float>> SlotModelRunner::run(const StepPlan& plan) {
  // Logits per chunk (empty when it does not sample), filled out of order, returned in plan order.
  std::vector<std::vector<float>> per_chunk(plan.chunks.size());
  std::vector<int32_t> dec_slots, dec_tokens;
  std::vector<size_t> dec_chunk;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const int slot = slot_for(c.seq->id);
    if (c.start == 0 && model_.length(slot) > 0) model_.release(slot);  // recomputed after a preemption
    if (model_.length(slot) != c.start)
      fail("sequence {}: chunk starts at {} but its slot holds {} positions", c.seq->id, c.start, model_.length(slot));
    std::span<const int32_t> toks = std::span(c.seq->tokens).subspan(size_t(c.start), size_t(c.count));
    if (c.count == 1 && c.start > 0) {  // a decode step: batched below
      dec_slots.push_back(slot);
      dec_tokens.push_back(toks[0]);
      dec_chunk.push_back(i);
      continue;
    }
    std::vector<float> lg = model_.prefill(slot, toks);
    if (c.sample) per_chunk[i] = std::move(lg);
  }
  if (!dec_slots.empty()) {
    std::vector<std::vector<float>> lg = model_.decode(dec_slots, dec_tokens);
    for (size_t j = 0; j < dec_chunk.size(); ++j)
      if (plan.chunks[dec_chunk[j]].sample) per_chunk[dec_chunk[j]] = std::move(lg[j]);
  }
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < plan.chunks.size(); ++i)
    if (plan.chunks[i].sample) out.push_back(std::move(per_chunk[i]));
  return out;
}

CpuSlotModel::CpuSlotModel(const GptOssCpuModel& model, int slots) : model_(model) {
  if (slots < 1) fail("CpuSlotModel needs at least one slot");
  for (int s = 0; s < slots; ++s) caches_.push_back(model.new_cache());
}

void CpuSlotModel::release(int slot) { caches_.at(slot) = model_.new_cache(); }

std::vector<float> CpuSlotModel::prefill(int slot, std::span<const int32_t> tokens) {
  return model_.forward(tokens, caches_.at(slot), /*all_logits=*/false);
}

std::vector<std::vector<float>> CpuSlotModel::decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
  std::vector<SequenceChunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i) chunks.push_back({tokens.subspan(i, 1), &caches_.at(slots[i]), false});
  return model_.forward_batch(chunks);
}

const GptOssConfig& CudaSlotModel::config() const { return model_.config(); }
int CudaSlotModel::slots() const { return model_.options().slots; }
int CudaSlotModel::length(int slot) const { return model_.length(slot); }
void CudaSlotModel::release(int slot) { model_.release(slot); }
std::vector<float> CudaSlotModel::prefill(int slot, std::span<const int32_t> tokens) {
  return model_.prefill(slot, tokens, /*all_logits=*/false);
}
std::vector<std::vector<float>> CudaSlotModel::decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
  return model_.decode_logits(slots, tokens);
}

}  // namespace osprey
