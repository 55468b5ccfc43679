// Speculative decoding: proposers guess the next tokens of a sequence; the engine verifies k of
// them in one forward of the target model (k + 1 positions of the sequence beside the rest of the
// step) and keeps the longest prefix the target agrees with, plus the target's own next token.
//
// Exactness. Every proposer here is deterministic (a draft model proposes its greedy tokens), so
// its proposal distribution q is a point mass on the draft x. The standard rejection rule (accept
// x with probability min(1, p(x) / q(x)); on rejection draw from max(0, p - q) renormalized) then
// accepts x with probability p(x) and, on rejection, draws from p without x: exactly what drawing
// y ~ p with the request's own generator and accepting iff y == x gives, the first mismatching y
// being the emitted token. The engine does the latter, one draw per verified position, taking only
// the draws of the tokens it emits, so a request's tokens are the ones it would get without
// speculation from the same logits: identical for greedy, the same seeded stream for sampling.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_blocks.h"

namespace osprey {

class ModelRunner;
struct Sequence;

// What `--speculative` names: "ngram:K" or "draft:DIR:K" (K draft tokens per step, 1-16).
struct SpeculativeSpec {
  std::string kind;   // "ngram" | "draft"
  std::string draft;  // checkpoint directory of the draft model
  int k = 0;
};
SpeculativeSpec parse_speculative(const std::string& s);  // throws Error naming the problem

struct DraftRequest {
  int64_t id = 0;                   // the engine's sequence id (a proposer may keep state per id)
  std::span<const int32_t> tokens;  // the sequence so far: prompt and output
  int k = 0;                        // drafts wanted at most
  // For proposers that want them (MTP and EAGLE-style heads): the target's last-layer hidden
  // state (the final norm's input) at the position before the last token, the one whose logits
  // chose it: with the last token's embedding, what such a head drafts the next token from.
  std::span<const float> hidden;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // Up to reqs[i].k tokens to follow reqs[i].tokens, for every request (none: no guess).
  virtual std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> reqs) = 0;
  // The sequence finished or was preempted: whatever is kept for it goes.
  virtual void release(int64_t id) {}
  // The interface an MTP or EAGLE-style head plugs into: true, and every request carries the
  // target's hidden state (DraftRequest::hidden; the engine refuses a runner that cannot give it).
  virtual bool wants_hidden() const { return false; }
};

// Prompt lookup: the last n tokens (n from max_n down to min_n) found earlier in the sequence, at
// their latest earlier occurrence; the draft is what followed them there. No model.
class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(int min_n = 1, int max_n = 4, int lookback = 1 << 16)
      : min_n_(min_n), max_n_(max_n), lookback_(lookback) {}
  std::string name() const override { return "ngram"; }
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> reqs) override;
  static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int k, int min_n, int max_n, int lookback);

 private:
  int min_n_, max_n_, lookback_;
};

// A draft model: any gpt-oss checkpoint with the target's tokenizer, run by a model runner of its
// own (CPU or GPU) on KV placed by its own block manager. It follows each target sequence: its
// copy of the tokens is rolled back to what the target kept, the new tokens are computed in one
// batched forward with the first draft, then one batched forward per further draft (greedy).
class DraftModelProposer final : public Proposer {
 public:
  // layout: the draft runner's KV pool (kv_layout_of its config; block size and count set).
  DraftModelProposer(std::unique_ptr<ModelRunner> runner, KvLayout layout, int max_chunk);
  ~DraftModelProposer() override;
  std::string name() const override { return "draft"; }
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> reqs) override;
  void release(int64_t id) override;

 private:
  struct Shadow;
  Shadow& shadow(int64_t id);
  std::unique_ptr<ModelRunner> runner_;
  KvBlockManager kv_;
  int max_chunk_;
  std::unordered_map<int64_t, std::unique_ptr<Shadow>> seqs_;
};

// Whether speculation pays, decided from measurements. Per decode batch size (power-of-two
// buckets) it keeps, for each candidate draft length (0, K/2, K), the mean time of a decode step
// (proposing included) and the mean tokens a sequence got from it, and uses the length with the
// most tokens per second. A candidate is measured again once `explore` steps of that bucket have
// passed since its last measurement, so a change in acceptance or cost is seen; each time it
// measures more than 10% below the best its interval doubles (up to 32 x explore), so a losing
// candidate costs ever fewer steps. Draft length 0 is plain decoding: speculation is off wherever
// its measured rate is below it.
class SpecPolicy {
 public:
  SpecPolicy(int k, bool adaptive, int explore = 50);
  int choose(int batch);  // the draft length for a decode step of `batch` sequences
  // A decode-only step that ran with draft length k: its seconds and tokens emitted per sequence.
  void record(int batch, int k, double seconds, double tokens_per_seq);
  const std::vector<int>& candidates() const { return ks_; }

 private:
  struct Arm {
    double seconds = 0, tokens = 0;
    int n = 0;
    int64_t last = -1;  // bucket step of the last measurement
    int64_t interval = 0;  // steps between measurements (explore, doubled while it loses)
    double rate() const { return seconds > 0 ? tokens / seconds : 0; }
  };
  size_t best_arm(const std::vector<Arm>& arms) const;
  std::vector<int> ks_;
  bool adaptive_;
  int explore_;
  std::unordered_map<int, std::vector<Arm>> buckets_;
  std::unordered_map<int, int64_t> steps_;
};

}  // namespace osprey
