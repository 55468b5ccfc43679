#include "engine/cuda_runner.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace osprey {

GptOssCudaFp8::RowSampling row_sampling(const TokenChoice& c) {
  const SamplingParams& p = c.params;
  return {p.greedy() ? 0.0f : p.temperature, p.top_p, p.top_k, c.u};
}

int CudaModelRunner::slot_for(int64_t seq_id) {
  if (!initialized_) {
    for (int s = model_.options().slots - 1; s >= 0; --s) free_.push_back(s);
    initialized_ = true;
  }
  if (auto it = slot_of_.find(seq_id); it != slot_of_.end()) return it->second;
  if (free_.empty()) fail("all {} model slots are in use (--max-batch must not exceed them)", model_.options().slots);
  const int s = free_.back();
  free_.pop_back();
  slot_of_[seq_id] = s;
  return s;
}

void CudaModelRunner::release(int64_t seq_id) {
  auto it = slot_of_.find(seq_id);
  if (it == slot_of_.end()) return;
  free_.push_back(it->second);
  slot_of_.erase(it);
}

std::vector<GptOssCudaFp8::Chunk> CudaModelRunner::chunks_of(const StepPlan& plan) {
  std::vector<GptOssCudaFp8::Chunk> out;
  for (const ScheduledChunk& c : plan.chunks) {
    const int slot = slot_for(c.seq->id);
    const SeqKv& kv = *c.seq->kv;
    model_.set_blocks(slot, kv.table(kFullGroup), kv.table(kSlidingGroup));
    out.push_back({slot, c.start, std::span(c.seq->tokens).subspan(size_t(c.start), size_t(c.count)), c.sample,
                   /*verify=*/c.draft > 0});
  }
  return out;
}

std::vector<std::vector<float>> CudaModelRunner::run(const StepPlan& plan) {
  const std::vector<GptOssCudaFp8::Chunk> chunks = chunks_of(plan);
  return model_.forward_logits(chunks);
}

std::vector<int32_t> CudaModelRunner::run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                                 const StepMasks* masks) {
  const std::vector<GptOssCudaFp8::Chunk> chunks = chunks_of(plan);
  std::vector<GptOssCudaFp8::RowSampling> rows(choices.size());
  std::transform(choices.begin(), choices.end(), rows.begin(), row_sampling);
  if (!masks) return model_.forward_select(chunks, rows);
  std::vector<size_t> all(choices.size());
  std::iota(all.begin(), all.end(), size_t(0));
  const GptOssCudaFp8::Masks m{[&] { masks->compute(all); }, masks->row};
  return model_.forward_select(chunks, rows, &m);
}

namespace {
KvLayout slots_layout(const GptOssCudaFp8& m) {
  KvLayout L = kv_layout_of(m.config());
  L.block_size = GptOssCudaFp8::kBlockPositions;
  L.num_blocks = m.kv_blocks();
  L.storage = false;
  L.prefix_caching = false;
  return L;
}
}  // namespace

CudaSlots::CudaSlots(GptOssCudaFp8& model) : model_(model), kv_(slots_layout(model)) {
  for (int s = 0; s < model.options().slots; ++s) seq_.push_back(std::make_unique<SeqKv>(kv_));
}

CudaSlots::~CudaSlots() { seq_.clear(); }

int CudaSlots::length(int slot) const { return seq_.at(size_t(slot))->length(); }

void CudaSlots::release(int slot) { kv_.release_all(*seq_.at(size_t(slot))); }

GptOssCudaFp8::Chunk CudaSlots::place(int slot, int start, std::span<const int32_t> tokens, bool sample) {
  SeqKv& s = *seq_.at(size_t(slot));
  kv_.release_window(s, start);
  if (!kv_.reserve(s, start + int(tokens.size())))
    fail("KV cache out of blocks: slot {} needs {} positions ({} blocks free)", slot, start + tokens.size(),
         kv_.available_blocks());
  model_.set_blocks(slot, s.table(kFullGroup), s.table(kSlidingGroup));
  return {slot, start, tokens, sample};
}

void CudaSlots::advance(std::span<const GptOssCudaFp8::Chunk> chunks) {
  for (const GptOssCudaFp8::Chunk& c : chunks) seq_[size_t(c.slot)]->set_length(c.start + int(c.tokens.size()));
}

// Appends tokens to the slot in forwards of at most max_rows: fn(chunk, last) runs each one
// (sample_all: every piece samples, else only the last).
template <typename Fn>
void CudaSlots::pieces(int slot, std::span<const int32_t> tokens, bool sample_all, Fn&& fn) {
  if (tokens.empty()) fail("prefill: no tokens");
  const size_t piece = size_t(model_.options().max_rows);
  for (size_t i0 = 0; i0 < tokens.size(); i0 += piece) {
    const auto part = tokens.subspan(i0, std::min(piece, tokens.size() - i0));
    const bool last = i0 + part.size() == tokens.size();
    const GptOssCudaFp8::Chunk c = place(slot, length(slot), part, sample_all || last);
    fn(c, last);
    advance(std::span(&c, 1));
  }
}

int32_t CudaSlots::prefill_select(int slot, std::span<const int32_t> tokens, const GptOssCudaFp8::RowSampling& row,
                                  const uint32_t* mask) {
  int32_t id = -1;
  pieces(slot, tokens, false, [&](const GptOssCudaFp8::Chunk& c, bool last) {
    if (last) {
      const GptOssCudaFp8::Masks m{[] {}, [mask](size_t) { return mask; }};
      id = model_.forward_select(std::span(&c, 1), std::span(&row, 1), mask ? &m : nullptr)[0];
    } else {
      model_.forward_logits(std::span(&c, 1));
    }
  });
  return id;
}

std::vector<float> CudaSlots::prefill_logits(int slot, std::span<const int32_t> tokens, bool all) {
  std::vector<float> out;
  pieces(slot, tokens, all, [&](const GptOssCudaFp8::Chunk& c, bool last) {
    if (all) {  // every position's logits (forward_all_logits runs its own pieces of the chunk)
      std::vector<float> lg = model_.forward_all_logits(c);
      out.insert(out.end(), lg.begin(), lg.end());
    } else {
      std::vector<std::vector<float>> lg = model_.forward_logits(std::span(&c, 1));
      if (last) out = std::move(lg.at(0));
    }
  });
  return out;
}

std::vector<int32_t> CudaSlots::decode_select(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                              std::span<const GptOssCudaFp8::RowSampling> rows,
                                              const GptOssCudaFp8::Masks* masks) {
  if (slots.size() != tokens.size()) fail("decode: one token per slot");
  std::vector<GptOssCudaFp8::Chunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i) chunks.push_back(place(slots[i], length(slots[i]), tokens.subspan(i, 1), true));
  std::vector<int32_t> ids = model_.forward_select(chunks, rows, masks);
  advance(chunks);
  return ids;
}

std::vector<std::vector<float>> CudaSlots::decode_logits(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
  if (slots.size() != tokens.size()) fail("decode: one token per slot");
  std::vector<GptOssCudaFp8::Chunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i) chunks.push_back(place(slots[i], length(slots[i]), tokens.subspan(i, 1), true));
  std::vector<std::vector<float>> lg = model_.forward_logits(chunks);
  advance(chunks);
  return lg;
}

std::vector<GptOssCudaFp8::Chunk> CudaSlots::verify_chunks(std::span<const int32_t> slots,
                                                           const std::vector<std::vector<int32_t>>& tokens) {
  if (slots.size() != tokens.size()) fail("verify: one token list per slot");
  std::vector<GptOssCudaFp8::Chunk> chunks;
  for (size_t i = 0; i < slots.size(); ++i) {
    chunks.push_back(place(slots[i], length(slots[i]), tokens[i], true));
    chunks.back().verify = true;
  }
  return chunks;
}

std::vector<int32_t> CudaSlots::verify_select(std::span<const int32_t> slots, const std::vector<std::vector<int32_t>>& tokens,
                                              std::span<const GptOssCudaFp8::RowSampling> rows) {
  const std::vector<GptOssCudaFp8::Chunk> chunks = verify_chunks(slots, tokens);
  std::vector<int32_t> ids = model_.forward_select(chunks, rows);
  advance(chunks);
  return ids;
}

std::vector<std::vector<float>> CudaSlots::verify_logits(std::span<const int32_t> slots,
                                                         const std::vector<std::vector<int32_t>>& tokens) {
  const std::vector<GptOssCudaFp8::Chunk> chunks = verify_chunks(slots, tokens);
  std::vector<std::vector<float>> lg = model_.forward_logits(chunks);
  advance(chunks);
  return lg;
}

void CudaSlots::truncate(int slot, int n) {
  SeqKv& s = *seq_.at(size_t(slot));
  kv_.truncate(s, n);
  s.set_length(std::min(n, s.length()));
  model_.set_blocks(slot, s.table(kFullGroup), s.table(kSlidingGroup));
}

std::vector<std::vector<float>> CudaSlots::ragged_logits(const std::vector<Part>& parts) {
  std::vector<GptOssCudaFp8::Chunk> chunks;
  for (const Part& p : parts) chunks.push_back(place(p.slot, length(p.slot), p.tokens, p.sample));
  std::vector<std::vector<float>> lg = model_.forward_logits(chunks);
  advance(chunks);
  return lg;
}

void CudaSlots::fill_random(int slot, int n) {
  if (!randomized_) model_.randomize_kv(), randomized_ = true;
  release(slot);
  SeqKv& s = *seq_.at(size_t(slot));
  s.set_length(n);  // the sliding layers then hold only the blocks position n's window reads
  if (!kv_.reserve(s, n)) fail("KV cache out of blocks for {} random positions in slot {}", n, slot);
  model_.set_blocks(slot, s.table(kFullGroup), s.table(kSlidingGroup));
}

}  // namespace osprey
