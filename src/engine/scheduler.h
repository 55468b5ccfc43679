// Iteration-level scheduler for continuous batching. Each step it returns a plain plan: which
// token ranges of which sequences the runner computes (decodes first, then chunked prefill up
// to a token budget), which sequences were preempted (their blocks freed, to be recomputed).
// It places every sequence's KV through the block manager: a newcomer first takes the longest
// cached prefix of its tokens, a running sequence lets go of the sliding blocks its window has
// left, and blocks are reserved before the step that writes them. It knows nothing of text or HTTP.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/kv_blocks.h"
#include "engine/sampler.h"

namespace osprey {

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int prompt_len = 0;
  int num_computed = 0;         // positions whose KV is in the cache
  std::unique_ptr<SeqKv> kv;
  // Generation settings and state (read by the engine, not the scheduler).
  int max_tokens = 16;
  std::vector<int32_t> stop_tokens;
  std::unique_ptr<Sampler> sampler;
  std::shared_ptr<class TokenConstraint> constraint;
  LogitAdjust adjust;
  int logprobs = -1;  // -1: none; k >= 0: the chosen token's log probability and the top k
  // Speculative decoding: whether this request may be sped up by it, and the draft tokens
  // proposed for its next decode step (the scheduler verifies as many as the step has room for).
  bool speculate = false;
  std::vector<int32_t> draft;
  std::vector<float> hidden;  // for draft heads: the target's hidden state that chose the last token
  // Whether the logits must come to the host (constraints go to a selecting runner as masks).
  bool needs_host_logits() const { return !adjust.empty() || logprobs >= 0; }
  int generated() const { return int(tokens.size()) - prompt_len; }
};

struct ScheduledChunk {
  Sequence* seq;
  int start, count;  // tokens [start, start + count) of seq->tokens, at those positions
  bool sample;       // the chunk ends at the last known token: sample the next one
  // A verify chunk: the last `draft` tokens are proposed, not known; every one of its count
  // positions samples (the token after each). The engine sets `accepted`, the drafts kept,
  // before commit; the rest are rolled back.
  int draft = 0, accepted = 0;
  int sampled_rows() const { return sample ? 1 + draft : 0; }
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<int64_t> preempted;
  int num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

struct SchedulerConfig {
  int max_batch = 64;            // sequences running at once
  int max_batched_tokens = 512;  // tokens per step (chunked prefill budget)
};

class Scheduler {
 public:
  Scheduler(KvBlockManager& kv, SchedulerConfig cfg) : kv_(kv), cfg_(cfg) {}

  void add(std::unique_ptr<Sequence> seq);    // joins the waiting queue
  std::unique_ptr<Sequence> remove(int64_t id);  // finished or cancelled: frees its blocks at once
  StepPlan schedule();
  // After the runner computed the plan: each chunk's positions count as computed (a verify
  // chunk's up to its accepted drafts; the KV blocks past them go back), and the blocks they
  // completed enter the prefix cache.
  void commit(const StepPlan& plan);

  int waiting() const { return int(waiting_.size()); }
  int running() const { return int(running_.size()); }
  Sequence* find(int64_t id);
  // Running sequences whose next step is a decode (all their tokens computed but the last).
  template <typename Fn>
  void for_each_decoding(Fn&& fn) {
    for (auto& s : running_)
      if (s->num_computed > 0 && s->num_computed + 1 == int(s->tokens.size())) fn(*s);
  }

 private:
  static constexpr int kCapPositions = 8192;
  int attention_cap(int start, int n, bool others_decode) const;
  bool ensure_blocks(Sequence& s, int positions, StepPlan& plan);
  bool admit(Sequence& s, int budget, bool others_decode, StepPlan& plan);
  void preempt(Sequence& s);
  KvBlockManager& kv_;
  SchedulerConfig cfg_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
};

}  // namespace osprey
