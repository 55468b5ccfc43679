#include "engine/speculative.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "engine/engine.h"

namespace osprey {

SpeculativeSpec parse_speculative(const std::string& s) {
  auto parse_k = [&](std::string_view v) {
    int k = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), k);
    if (ec != std::errc() || p != v.data() + v.size() || k < 1 || k > 16)
      fail("--speculative {}: K must be a whole number from 1 to 16", s);
    return k;
  };
  SpeculativeSpec spec;
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  if (kind == "ngram" && colon != std::string::npos) {
    spec.kind = kind, spec.k = parse_k(std::string_view(s).substr(colon + 1));
  } else if (kind == "draft" && colon != std::string::npos && s.rfind(':') > colon) {
    const size_t last = s.rfind(':');
    spec.kind = kind, spec.draft = s.substr(colon + 1, last - colon - 1);
    spec.k = parse_k(std::string_view(s).substr(last + 1));
    if (spec.draft.empty()) fail("--speculative {}: the draft checkpoint directory is empty", s);
  } else {
    fail("--speculative {}: expected ngram:K or draft:DIR:K", s);
  }
  return spec;
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> t, int k, int min_n, int max_n, int lookback) {
  const int L = int(t.size());
  for (int n = std::min(max_n, L - 1); n >= min_n && n >= 1; --n) {
    const int32_t* suffix = t.data() + (L - n);
    const int lo = std::max(0, L - n - lookback);
    for (int i = L - n - 1; i >= lo; --i) {  // latest earlier occurrence first; t[i + n] exists
      if (t[size_t(i)] != suffix[0] || !std::equal(suffix, suffix + n, t.data() + i)) continue;
      const int from = i + n, to = std::min(L, from + k);
      return std::vector<int32_t>(t.begin() + from, t.begin() + to);
    }
  }
  return {};
}

std::vector<std::vector<int32_t>> NgramProposer::propose(std::span<const DraftRequest> reqs) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].k > 0) out[i] = lookup(reqs[i].tokens, reqs[i].k, min_n_, max_n_, lookback_);
  return out;
}

// The draft model's copy of one target sequence: its tokens (the target's, then its drafts) and
// KV; tokens [0, base) are known to equal the target's.
struct DraftModelProposer::Shadow {
  Sequence seq;
  size_t base = 0;
};

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelRunner> runner, KvLayout layout, int max_chunk)
    : runner_(std::move(runner)), kv_([&] {
        layout.prefix_caching = false;
        return layout;
      }()),
      max_chunk_(std::max(1, max_chunk)) {}

DraftModelProposer::~DraftModelProposer() {
  for (auto& [id, s] : seqs_) runner_->release(id);
  seqs_.clear();
}

DraftModelProposer::Shadow& DraftModelProposer::shadow(int64_t id) {
  auto& p = seqs_[id];
  if (!p) {
    p = std::make_unique<Shadow>();
    p->seq.id = id;
    p->seq.kv = std::make_unique<SeqKv>(kv_);
  }
  return *p;
}

void DraftModelProposer::release(int64_t id) {
  if (seqs_.erase(id)) runner_->release(id);
}

std::vector<std::vector<int32_t>> DraftModelProposer::propose(std::span<const DraftRequest> reqs) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  std::vector<size_t> live;  // requests still drafting
  for (size_t i = 0; i < reqs.size(); ++i) {
    const DraftRequest& r = reqs[i];
    if (r.k <= 0 || r.tokens.empty()) continue;
    Shadow& sh = shadow(r.id);
    Sequence& s = sh.seq;
    // Roll back to what the target kept: past `base` only the draft's own guesses can differ.
    size_t p = std::min({sh.base, s.tokens.size(), r.tokens.size()});
    while (p < s.tokens.size() && p < r.tokens.size() && s.tokens[p] == r.tokens[p]) ++p;
    s.tokens.resize(p);
    s.tokens.insert(s.tokens.end(), r.tokens.begin() + long(p), r.tokens.end());
    sh.base = r.tokens.size();
    if (s.num_computed > int(p)) {
      s.num_computed = int(p);
      kv_.truncate(*s.kv, s.num_computed);
    }
    live.push_back(i);
  }
  // Long catch-ups (a new sequence's prompt) first, in pieces, without sampling.
  auto run_plan = [&](StepPlan& plan) -> std::vector<int32_t> {
    std::vector<TokenChoice> greedy;
    for (const ScheduledChunk& c : plan.chunks)
      if (c.sample) greedy.push_back({SamplingParams{.temperature = 0}, 0.0});
    std::vector<int32_t> ids = runner_->run_select(plan, greedy);
    for (const ScheduledChunk& c : plan.chunks) {
      c.seq->num_computed = c.start + c.count;
      c.seq->kv->set_length(c.seq->num_computed);
    }
    return ids;
  };
  auto placed = [&](Sequence& s, int positions) {
    kv_.release_window(*s.kv, s.num_computed);
    return kv_.reserve(*s.kv, positions);
  };
  auto drop = [&](size_t i) {  // no room for this one: it gets no drafts
    release(reqs[i].id);
    out[i].clear();
  };
  for (size_t i : live) {
    Sequence& s = shadow(reqs[i].id).seq;
    while (int(s.tokens.size()) - s.num_computed > max_chunk_) {
      if (!placed(s, s.num_computed + max_chunk_)) break;
      StepPlan plan;
      plan.chunks.push_back({&s, s.num_computed, max_chunk_, false});
      run_plan(plan);
    }
  }
  // Draft j of every live request: the first also computes the new tokens. The chunks go in as
  // few forwards as the runner's rows allow (max_chunk rows each).
  while (!live.empty()) {
    std::vector<size_t> rows;
    std::vector<ScheduledChunk> chunks;
    for (size_t i : live) {
      Sequence& s = shadow(reqs[i].id).seq;
      const int n = int(s.tokens.size()) - s.num_computed;
      if (n < 1 || n > max_chunk_ || !placed(s, int(s.tokens.size()))) {
        drop(i);
        continue;
      }
      chunks.push_back({&s, s.num_computed, n, true});
      rows.push_back(i);
    }
    live.clear();
    for (size_t c0 = 0; c0 < chunks.size();) {
      StepPlan plan;
      int total = 0;
      size_t c1 = c0;
      while (c1 < chunks.size() && (c1 == c0 || total + chunks[c1].count <= max_chunk_)) total += chunks[c1++].count;
      plan.chunks.assign(chunks.begin() + long(c0), chunks.begin() + long(c1));
      const std::vector<int32_t> ids = run_plan(plan);
      for (size_t r = c0; r < c1; ++r) {
        const size_t i = rows[r];
        out[i].push_back(ids[r - c0]);
        shadow(reqs[i].id).seq.tokens.push_back(ids[r - c0]);
        if (int(out[i].size()) < reqs[i].k) live.push_back(i);
      }
      c0 = c1;
    }
  }
  return out;
}

SpecPolicy::SpecPolicy(int k, bool adaptive, int explore) : adaptive_(adaptive), explore_(std::max(2, explore)) {
  ks_ = adaptive ? std::vector<int>{0, (k + 1) / 2, k} : std::vector<int>{k};
  ks_.erase(std::unique(ks_.begin(), ks_.end()), ks_.end());
}

namespace {
int bucket_of(int batch) {
  int b = 1;
  while (b < batch) b *= 2;
  return b;
}
}  // namespace

int SpecPolicy::choose(int batch) {
  if (!adaptive_ || ks_.size() == 1) return ks_.back();
  const int b = bucket_of(batch);
  const int64_t step = steps_[b]++;
  std::vector<Arm>& arms = buckets_[b];
  arms.resize(ks_.size());
  for (size_t a = 0; a < arms.size(); ++a)  // unmeasured, or not for a while: measure it
    if (arms[a].n == 0 || step - arms[a].last >= std::max<int64_t>(explore_, arms[a].interval)) {
      arms[a].last = step;  // counts as tried even if the step turns out not to be decode-only
      return ks_[a];
    }
  return ks_[best_arm(arms)];
}

void SpecPolicy::record(int batch, int k, double seconds, double tokens_per_seq) {
  if (!adaptive_) return;
  const int b = bucket_of(batch);
  std::vector<Arm>& arms = buckets_[b];
  arms.resize(ks_.size());
  const auto it = std::find(ks_.begin(), ks_.end(), k);
  if (it == ks_.end()) return;
  Arm& a = arms[size_t(it - ks_.begin())];
  constexpr double w = 0.2;  // recent steps weigh most: acceptance changes as requests come and go
  a.seconds = a.n ? (1 - w) * a.seconds + w * seconds : seconds;
  a.tokens = a.n ? (1 - w) * a.tokens + w * tokens_per_seq : tokens_per_seq;
  ++a.n;
  a.last = steps_[b];
  const Arm& best = arms[best_arm(arms)];
  a.interval = a.rate() < 0.9 * best.rate() ? std::min<int64_t>(std::max<int64_t>(explore_, a.interval) * 2, 32 * explore_)
                                            : explore_;
}

size_t SpecPolicy::best_arm(const std::vector<Arm>& arms) const {
  size_t best = 0;
  for (size_t a = 1; a < arms.size(); ++a)
    if (arms[a].n > 0 && (arms[best].n == 0 || arms[a].rate() > arms[best].rate())) best = a;
  return best;
}

}  // namespace osprey
