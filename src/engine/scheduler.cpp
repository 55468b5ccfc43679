#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

namespace osprey {

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  if (!seq->kv) seq->kv = std::make_unique<SeqKv>(kv_);
  waiting_.push_back(std::move(seq));
}

Sequence* Scheduler::find(int64_t id) {
  for (auto& s : running_)
    if (s->id == id) return s.get();
  for (auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

std::unique_ptr<Sequence> Scheduler::remove(int64_t id) {
  auto take = [&](auto& list) -> std::unique_ptr<Sequence> {
    for (auto it = list.begin(); it != list.end(); ++it)
      if ((*it)->id == id) {
        std::unique_ptr<Sequence> s = std::move(*it);
        list.erase(it);
        kv_.release_all(*s->kv);
        s->num_computed = 0;
        return s;
      }
    return nullptr;
  };
  if (auto s = take(running_)) return s;
  return take(waiting_);
}

void Scheduler::preempt(Sequence& s) {
  s.draft.clear();
  kv_.release_all(*s.kv);  // its registered blocks stay cached: the recompute will likely hit them
  s.num_computed = 0;
}

// Reserves blocks for `positions`, preempting the most recently admitted other sequences
// (recompute preemption: their KV is dropped and they wait again) until it fits.
bool Scheduler::ensure_blocks(Sequence& s, int positions, StepPlan& plan) {
  while (!kv_.reserve(*s.kv, positions)) {
    auto victim = std::find_if(running_.rbegin(), running_.rend(), [&](auto& r) { return r.get() != &s; });
    if (victim == running_.rend()) return false;
    preempt(**victim);
    plan.preempted.push_back((*victim)->id);
    std::erase_if(plan.chunks, [&](const ScheduledChunk& c) { return c.seq == victim->get(); });
    waiting_.push_front(std::move(*victim));
    running_.erase(std::next(victim).base());
  }
  return true;
}

// While sequences decode, a prompt chunk deep in a long prompt is cut so that its attention (its
// tokens times the positions they read) costs no more than a full budget of tokens at
// kCapPositions: at 100k positions about 168 tokens a step instead of 2,048, whose ~400 ms steps
// stalled the streams beside it. At least 16 tokens, so the prompt always advances.
int Scheduler::attention_cap(int start, int n, bool others_decode) const {
  if (!others_decode) return n;
  const double limit = double(cfg_.max_batched_tokens) * kCapPositions;  // c * (start + c) <= limit
  const int c = int((std::sqrt(double(start) * start + 4 * limit) - start) / 2);
  return std::min(n, std::max(16, c));
}

// A waiting sequence joins if its next chunk's blocks fit without preempting anyone. A sequence
// that holds nothing first takes the longest cached prefix of its tokens.
bool Scheduler::admit(Sequence& s, int budget, bool others_decode, StepPlan& plan) {
  if (s.num_computed == 0 && s.kv->length() == 0) s.num_computed = kv_.match_prefix(*s.kv, s.tokens);
  const int known = int(s.tokens.size());
  const int n = attention_cap(s.num_computed, std::min(known - s.num_computed, budget), others_decode);
  if (!kv_.reserve(*s.kv, s.num_computed + n)) {
    preempt(s);  // gives back what the match took; it is looked up again next time
    return false;
  }
  plan.chunks.push_back({&s, s.num_computed, n, s.num_computed + n == known});
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int budget = cfg_.max_batched_tokens;
  // Running sequences first, decode tokens before prompt chunks, so that a long prompt never
  // delays a running stream's next token. While requests wait, a prompt chunk of a running
  // sequence takes at most half the budget, so a long prompt does not hold newcomers back either.
  const int chunk_cap = waiting_.empty() ? budget : std::max(1, budget / 2);
  // Drafts take only what the decode tokens leave of the budget.
  int decoding = 0;
  for_each_decoding([&](Sequence&) { ++decoding; });
  int spare = std::max(0, budget - decoding);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
      Sequence& s = *running_[i];
      const int known = int(s.tokens.size());
      const int left = known - s.num_computed;
      if (left <= 0 || (pass == 0) != (left == 1 && s.num_computed > 0)) continue;
      kv_.release_window(*s.kv, s.num_computed);
      // A decode verifies its drafts as far as the spare budget goes (each one more position) and
      // the pool has room for them: drafts never preempt anyone.
      int drafts = pass == 0 ? std::min(int(s.draft.size()), spare) : 0;
      if (drafts > 0 && !kv_.reserve(*s.kv, s.num_computed + left + drafts)) drafts = 0;
      spare -= drafts;
      const int n = pass == 0 ? std::min(left + drafts, budget)
                              : attention_cap(s.num_computed, std::min({left, budget, chunk_cap}), decoding > 0);
      if (!ensure_blocks(s, s.num_computed + n, plan)) {
        pass = 2;  // nothing more fits
        break;
      }
      plan.chunks.push_back({&s, s.num_computed, n, s.num_computed + n >= known, std::max(0, n - left)});
      budget -= n;
    }
  // Then admit waiting sequences while the batch, the budget and the KV pool allow.
  while (!waiting_.empty() && budget > 0 && int(running_.size()) < cfg_.max_batch) {
    Sequence& s = *waiting_.front();
    if (!admit(s, budget, decoding > 0, plan)) break;  // no preemption to admit newcomers
    budget -= plan.chunks.back().count;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  // The verified drafts join the sequences' tokens (the engine takes back the rejected ones); the
  // rest are dropped (every drafting sequence is running: preemption clears its drafts).
  for (auto& c : plan.chunks) {
    if (c.draft > 0) c.seq->tokens.insert(c.seq->tokens.end(), c.seq->draft.begin(), c.seq->draft.begin() + c.draft);
    plan.num_tokens += c.count;
  }
  for (auto& s : running_) s->draft.clear();
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    s.num_computed = c.start + c.count - c.draft + c.accepted;
    if (c.draft > 0) kv_.truncate(*s.kv, s.num_computed);
    s.kv->set_length(s.num_computed);
    kv_.commit(*s.kv, s.tokens, s.num_computed);
  }
}

}  // namespace osprey
