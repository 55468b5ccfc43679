#include "engine/slot_runner.h"

#include <algorithm>
#include <numeric>

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

template <typename Prefill, typename DecodeBatch>
void SlotModelRunner::walk(const StepPlan& plan, Prefill&& prefill, DecodeBatch&& decode_batch) {
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
    prefill(i, slot, toks);
  }
  if (!dec_slots.empty()) decode_batch(dec_slots, dec_tokens, dec_chunk);
}

std::vector<std::vector<float>> SlotModelRunner::run(const StepPlan& plan) {
  // Logits per chunk (empty when it does not sample), filled out of order, returned in plan order.
  std::vector<std::vector<float>> per_chunk(plan.chunks.size());
  walk(
      plan,
      [&](size_t i, int slot, std::span<const int32_t> toks) {
        std::vector<float> lg = model_.prefill(slot, toks);
        if (plan.chunks[i].sample) per_chunk[i] = std::move(lg);
      },
      [&](const std::vector<int32_t>& slots, const std::vector<int32_t>& tokens, const std::vector<size_t>& chunk) {
        std::vector<std::vector<float>> lg = model_.decode(slots, tokens);
        for (size_t j = 0; j < chunk.size(); ++j)
          if (plan.chunks[chunk[j]].sample) per_chunk[chunk[j]] = std::move(lg[j]);
      });
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < plan.chunks.size(); ++i)
    if (plan.chunks[i].sample) out.push_back(std::move(per_chunk[i]));
  return out;
}

std::vector<int32_t> SlotModelRunner::run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                                 const StepMasks* masks) {
  // choices[k] belongs to the k-th sampling chunk in plan order.
  std::vector<int> choice_of(plan.chunks.size(), -1);
  int k = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i)
    if (plan.chunks[i].sample) choice_of[i] = k++;
  if (k != int(choices.size())) fail("run_select: {} choices for {} sampling chunks", choices.size(), k);
  std::vector<int32_t> out(size_t(k), -1);
  TokenChoice greedy;  // for chunks that do not sample: their token is ignored
  greedy.params.temperature = 0.0f;
  auto choice = [&](size_t i) -> const TokenChoice& { return choice_of[i] >= 0 ? choices[size_t(choice_of[i])] : greedy; };
  // A prompt chunk's mask is computed just before its prefill; the decode batch's while it runs.
  auto mask_of = [&](size_t i) -> const uint32_t* { return masks && choice_of[i] >= 0 ? masks->row(size_t(choice_of[i])) : nullptr; };
  walk(
      plan,
      [&](size_t i, int slot, std::span<const int32_t> toks) {
        if (masks && choice_of[i] >= 0) {
          const size_t row = size_t(choice_of[i]);
          masks->compute(std::span(&row, 1));
        }
        const int32_t id = model_.prefill_select(slot, toks, choice(i), mask_of(i));
        if (choice_of[i] >= 0) out[size_t(choice_of[i])] = id;
      },
      [&](const std::vector<int32_t>& slots, const std::vector<int32_t>& tokens, const std::vector<size_t>& chunk) {
        std::vector<TokenChoice> dec(chunk.size());
        for (size_t j = 0; j < chunk.size(); ++j) dec[j] = choice(chunk[j]);
        const StepMasks rows{[&](std::span<const size_t> js) {
                               std::vector<size_t> engine_rows;
                               for (size_t j : js)
                                 if (choice_of[chunk[j]] >= 0) engine_rows.push_back(size_t(choice_of[chunk[j]]));
                               masks->compute(engine_rows);
                             },
                             [&](size_t j) { return mask_of(chunk[j]); }};
        std::vector<int32_t> ids = model_.decode_select(slots, tokens, dec, masks ? &rows : nullptr);
        if (ids.size() != chunk.size()) fail("decode_select returned {} tokens for {} slots", ids.size(), chunk.size());
        for (size_t j = 0; j < chunk.size(); ++j)
          if (choice_of[chunk[j]] >= 0) out[size_t(choice_of[chunk[j]])] = ids[j];
      });
  return out;
}

int32_t SlotModel::prefill_select(int slot, std::span<const int32_t> tokens, const TokenChoice& choice,
                                  const uint32_t* mask) {
  std::vector<float> lg = prefill(slot, tokens);
  if (mask) apply_token_mask(std::span(mask, (lg.size() + 31) / 32), lg);
  return choose_token(lg, choice);
}

std::vector<int32_t> SlotModel::decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                              std::span<const TokenChoice> choices, const StepMasks* masks) {
  std::vector<std::vector<float>> lg = decode(slots, tokens);
  if (masks) {
    std::vector<size_t> all(slots.size());
    std::iota(all.begin(), all.end(), size_t(0));
    masks->compute(all);
  }
  std::vector<int32_t> ids(lg.size());
  for (size_t j = 0; j < lg.size(); ++j) {
    if (const uint32_t* m = masks ? masks->row(j) : nullptr) apply_token_mask(std::span(m, (lg[j].size() + 31) / 32), lg[j]);
    ids[j] = choose_token(lg[j], choices[j]);
  }
  return ids;
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
namespace {
GptOssCudaFp8::RowSampling row_sampling(const TokenChoice& c) {
  const SamplingParams& p = c.params;
  return {p.greedy() ? 0.0f : p.temperature, p.top_p, p.top_k, c.u};
}
}  // namespace

int32_t CudaSlotModel::prefill_select(int slot, std::span<const int32_t> tokens, const TokenChoice& choice,
                                      const uint32_t* mask) {
  return model_.prefill_select(slot, tokens, row_sampling(choice), mask);
}
std::vector<std::vector<float>> CudaSlotModel::decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
  return model_.decode_logits(slots, tokens);
}
std::vector<int32_t> CudaSlotModel::decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                                  std::span<const TokenChoice> choices, const StepMasks* masks) {
  if (masks) {
    std::vector<GptOssCudaFp8::RowSampling> rows(choices.size());
    std::transform(choices.begin(), choices.end(), rows.begin(), row_sampling);
    std::vector<size_t> all(slots.size());
    std::iota(all.begin(), all.end(), size_t(0));
    return model_.decode_masked(slots, tokens, rows, [&] { masks->compute(all); }, masks->row);
  }
  const bool greedy = std::all_of(choices.begin(), choices.end(), [](const TokenChoice& c) { return c.params.greedy(); });
  if (greedy) return model_.decode_argmax(slots, tokens);
  std::vector<GptOssCudaFp8::RowSampling> rows(choices.size());
  std::transform(choices.begin(), choices.end(), rows.begin(), row_sampling);
  return model_.decode_sample(slots, tokens, rows);
}

}  // namespace osprey
