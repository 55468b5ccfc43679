// Speculative decoding on the CPU engine: the n-gram lookup, the flag's form, KV rollback, greedy
// outputs identical to decoding without speculation for every proposer (drafts all accepted, all
// rejected, and mixed), seeded sampling that keeps each request's exact token stream, and the
// target's distribution checked by chi-square on the first token and on a later one.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

TEST(Speculative, NgramLookupTakesTheLongestLatestMatch) {
  const std::vector<int32_t> t = {1, 2, 3, 9, 8, 2, 3, 7, 1, 2, 3};
  // "1 2 3" occurs at 0; "2 3" also at 5 (later), but the longer match wins.
  EXPECT_EQ(NgramProposer::lookup(t, 3, 1, 3, 100), (std::vector<int32_t>{9, 8, 2}));
  // With n at most 2, the latest "2 3" (at 5) is followed by 7 1 2.
  EXPECT_EQ(NgramProposer::lookup(t, 3, 1, 2, 100), (std::vector<int32_t>{7, 1, 2}));
  // The draft stops at the end of the sequence.
  EXPECT_EQ(NgramProposer::lookup(std::vector<int32_t>{4, 5, 4}, 5, 1, 3, 100), (std::vector<int32_t>{5, 4}));
  EXPECT_TRUE(NgramProposer::lookup(std::vector<int32_t>{1, 2, 3, 4}, 3, 1, 3, 100).empty());
  EXPECT_TRUE(NgramProposer::lookup(std::vector<int32_t>{7}, 3, 1, 3, 100).empty());
  // Outside the lookback window nothing is found.
  EXPECT_TRUE(NgramProposer::lookup(t, 3, 3, 3, 4).empty());
}

TEST(Speculative, FlagForms) {
  EXPECT_EQ(parse_speculative("ngram:4").kind, "ngram");
  EXPECT_EQ(parse_speculative("ngram:4").k, 4);
  const SpeculativeSpec d = parse_speculative("draft:/models/a:b:3");
  EXPECT_EQ(d.kind, "draft");
  EXPECT_EQ(d.draft, "/models/a:b");
  EXPECT_EQ(d.k, 3);
  for (const char* bad : {"ngram", "ngram:0", "ngram:17", "ngram:x", "draft:4", "draft::4", "eagle:3", ""})
    EXPECT_THROW(parse_speculative(bad), Error) << bad;
}

TEST(Speculative, PolicyTurnsSpeculationOffWhereItIsSlower) {
  SpecPolicy p(4, /*adaptive=*/true, /*explore=*/20);
  EXPECT_EQ(p.candidates(), (std::vector<int>{0, 2, 4}));
  // Batch 1: drafts pay (2.5 tokens per 1.2 ms step against 1 per 1 ms). Batch 64: they cost more
  // than they bring (1.3 tokens per 2 ms step against 1 per 1 ms).
  auto cost = [](int batch, int k) { return batch == 1 ? (k ? 1.2e-3 : 1e-3) : (k ? 2e-3 : 1e-3); };
  auto tokens = [](int batch, int k) { return k == 0 ? 1.0 : batch == 1 ? 1.0 + 0.4 * k : 1.0 + 0.08 * k; };
  std::map<int, int> chosen1, chosen64;
  for (int step = 0; step < 200; ++step)
    for (int batch : {1, 64}) {
      const int k = p.choose(batch);
      (batch == 1 ? chosen1 : chosen64)[k]++;
      p.record(batch, k, cost(batch, k), tokens(batch, k));
    }
  EXPECT_GT(chosen1[4], 170);   // the best, but for the re-measurements (one step in 20 each)
  EXPECT_GT(chosen64[0], 170);  // off
  EXPECT_GT(chosen64[2] + chosen64[4], 0);  // still measured now and then
  SpecPolicy fixed(3, /*adaptive=*/false);
  EXPECT_EQ(fixed.choose(64), 3);
}

class SpeculativeEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_dir_ = new test::TempDir();
    other_dir_ = new test::TempDir();
    // parity-b: a window of 8 that the sequences outrun, so rollbacks cross sliding blocks.
    synth_checkpoint(synth_preset("parity-b"), target_dir_->str(), {.seed = 9, .progress = false});
    synth_checkpoint(synth_preset("parity-b"), other_dir_->str(), {.seed = 10, .progress = false});
    weights_ = new GptOssWeights(GptOssWeights::load(target_dir_->str()));
    other_weights_ = new GptOssWeights(GptOssWeights::load(other_dir_->str()));
    model_ = new GptOssCpuModel(*weights_);
    other_model_ = new GptOssCpuModel(*other_weights_);
  }
  static void TearDownTestSuite() {
    delete model_, delete other_model_, delete weights_, delete other_weights_;
    delete target_dir_, delete other_dir_;
  }
  // Prompts that repeat themselves (n-gram drafts), and plain ones.
  static std::vector<int32_t> prompt(int i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 6 + 5 * i; ++j) p.push_back(int32_t((i % 2 ? j % 5 : j * 31 + i * 97) % 777));
    return p;
  }
  static std::shared_ptr<Proposer> draft_of(const GptOssCpuModel& m) {
    KvLayout L = kv_layout_of(m.config());
    L.block_size = 4, L.num_blocks = 2048;
    return std::make_shared<DraftModelProposer>(std::make_unique<CpuModelRunner>(m, /*selects=*/true), L, 64);
  }
  static EngineConfig config(std::shared_ptr<Proposer> p, int k, int kv_blocks = 0) {
    return {.max_batch = 8, .max_batched_tokens = 48, .max_queue = 4096, .max_seq_len = 256, .kv_block_size = 4,
            .kv_blocks = kv_blocks, .prefix_caching = true, .proposer = std::move(p), .spec_k = k,
            .spec_adaptive = false};
  }
  static std::vector<int32_t> drain(const std::shared_ptr<RequestHandle>& h) {
    std::vector<int32_t> got;
    TokenEvent ev;
    while (h->next(ev)) {
      if (ev.token >= 0) got.push_back(ev.token);
      EXPECT_NE(ev.finish, FinishReason::Error) << ev.error;
    }
    return got;
  }
  static test::TempDir *target_dir_, *other_dir_;
  static GptOssWeights *weights_, *other_weights_;
  static GptOssCpuModel *model_, *other_model_;
};
test::TempDir* SpeculativeEngineTest::target_dir_ = nullptr;
test::TempDir* SpeculativeEngineTest::other_dir_ = nullptr;
GptOssWeights* SpeculativeEngineTest::weights_ = nullptr;
GptOssWeights* SpeculativeEngineTest::other_weights_ = nullptr;
GptOssCpuModel* SpeculativeEngineTest::model_ = nullptr;
GptOssCpuModel* SpeculativeEngineTest::other_model_ = nullptr;

TEST_F(SpeculativeEngineTest, GreedyWithEveryProposerEqualsDecodingWithout) {
  struct Case {
    const char* name;
    std::shared_ptr<Proposer> proposer;
    int k;
    bool selects;
  };
  const std::vector<Case> cases = {
      {"ngram", std::make_shared<NgramProposer>(1, 3, 1024), 4, false},
      {"ngram, runner selects", std::make_shared<NgramProposer>(1, 3, 1024), 4, true},
      {"draft: the target itself (all accepted)", draft_of(*model_), 3, false},
      {"draft: another model (mostly rejected)", draft_of(*other_model_), 5, true},
  };
  for (const Case& c : cases) {
    Engine engine(std::make_unique<CpuModelRunner>(*model_, c.selects), config(c.proposer, c.k));
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 6; ++i) {
      GenerationRequest r{.prompt = prompt(i), .max_tokens = 20 + 7 * i, .sampling = {.temperature = 0}};
      r.speculative = true;
      hs.push_back(engine.submit(r));
    }
    for (int i = 0; i < 6; ++i) {
      const auto want = generate(*model_, prompt(i), {.max_tokens = 20 + 7 * i, .sampling = {.temperature = 0}, .stop_at_eos = false});
      EXPECT_EQ(drain(hs[size_t(i)]), want) << c.name << ", request " << i;
    }
    const EngineMetrics m = engine.metrics();
    EXPECT_GT(m.spec_drafts, 0u) << c.name;
    EXPECT_GT(m.spec_draft_tokens, 0u) << c.name;
    if (std::string(c.name).find("itself") != std::string::npos) {
      EXPECT_EQ(m.spec_accepted_tokens, m.spec_draft_tokens);
    }
    if (std::string(c.name).find("another") != std::string::npos) {
      EXPECT_LT(m.spec_accepted_tokens * 4, m.spec_draft_tokens) << c.name;
    }
    EXPECT_LT(m.steps, m.generated_tokens) << c.name;  // fewer steps than tokens when drafts land
    for (int i = 0; i < 200 && engine.metrics().kv_blocks_used != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(engine.metrics().kv_blocks_used, 0) << c.name;  // rolled-back blocks went back too
  }
}

TEST_F(SpeculativeEngineTest, TightPoolStopAndMaxTokens) {
  // A pool that fits the sequences but not always their drafts, stop tokens inside accepted drafts,
  // and max_tokens that cut a verify step short.
  auto self = draft_of(*model_);
  Engine engine(std::make_unique<CpuModelRunner>(*model_), config(self, 6, /*kv_blocks=*/40));
  const auto full = generate(*model_, prompt(3), {.max_tokens = 30, .sampling = {.temperature = 0}, .stop_at_eos = false});
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r{.prompt = prompt(3), .max_tokens = 30 - 3 * i, .sampling = {.temperature = 0}};
    if (i == 3) r.stop_tokens = {full[10]};
    hs.push_back(engine.submit(r));
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(drain(hs[size_t(i)]), std::vector<int32_t>(full.begin(), full.begin() + 30 - 3 * i)) << i;
  const auto stopped = drain(hs[3]);
  const size_t first_stop = size_t(std::find(full.begin(), full.end(), full[10]) - full.begin());
  EXPECT_EQ(stopped, std::vector<int32_t>(full.begin(), full.begin() + long(first_stop) + 1));
}

TEST_F(SpeculativeEngineTest, DraftsNeverPreempt) {
  // Two decoding sequences fill the pool but for a few blocks; the first gets more drafts than those
  // blocks hold. It decodes without them, and the second keeps its place.
  KvLayout L = kv_layout_of(model_->config());
  L.block_size = 4, L.num_blocks = 24, L.prefix_caching = false;
  KvBlockManager pool(L);
  Scheduler sched(pool, {.max_batch = 4, .max_batched_tokens = 256});
  for (int id : {1, 2}) {
    auto q = std::make_unique<Sequence>();
    q->id = id, q->tokens = prompt(3), q->prompt_len = int(q->tokens.size());
    sched.add(std::move(q));
  }
  sched.commit(sched.schedule());
  Sequence *a = sched.find(1), *b = sched.find(2);
  a->tokens.push_back(5), b->tokens.push_back(6);  // both decode next
  const int room = pool.available_blocks() * L.block_size;
  a->draft.assign(size_t(room + 2 * L.block_size), 7);
  const StepPlan p = sched.schedule();
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[0].count, 1);
  EXPECT_EQ(p.chunks[0].draft, 0);
  EXPECT_EQ(p.chunks[1].seq, b);
  // With room, the same drafts are verified.
  sched.commit(p);
  a->tokens.push_back(5), b->tokens.push_back(6);
  a->draft.assign(2, 7);
  const StepPlan q = sched.schedule();
  EXPECT_EQ(q.chunks[0].draft, 2);
  EXPECT_EQ(q.chunks[0].count, 3);
}

TEST_F(SpeculativeEngineTest, RequestFieldIsRefusedWhereItCannotRun) {
  Engine plain(std::make_unique<CpuModelRunner>(*model_), config(nullptr, 0));
  GenerationRequest r{.prompt = prompt(0), .max_tokens = 4};
  r.speculative = true;
  EXPECT_THROW(plain.submit(r), Error);  // no proposer
  Engine spec(std::make_unique<CpuModelRunner>(*model_), config(std::make_shared<NgramProposer>(), 4));
  r.logprobs = 2;
  EXPECT_THROW(spec.submit(r), Error);  // logits on the host
  r.logprobs = -1;
  r.speculative = false;  // off for this request: no drafts
  drain(spec.submit(r));
  EXPECT_EQ(spec.metrics().spec_drafts, 0u);
}

// The chi-square statistic's upper critical value for df degrees of freedom at a tail of about
// 1e-4 (Wilson-Hilferty).
double chi2_critical(int df) {
  const double z = 3.719, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson's statistic of the counts against probabilities p, with the tokens expected fewer than
// 5 times pooled into one bin; df: bins - 1.
std::pair<double, int> chi_square(const std::map<int32_t, int>& counts, const std::vector<double>& p, int n) {
  double stat = 0, pool_e = 0, pool_o = 0;
  int bins = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    const double e = p[t] * n;
    const auto it = counts.find(int32_t(t));
    const double o = it == counts.end() ? 0 : it->second;
    if (e < 5) {
      pool_e += e, pool_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e, ++bins;
  }
  if (pool_e > 0) stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, ++bins;
  return {stat, bins - 1};
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) s += p[i] = std::exp(double(logits[i] - m) / temperature);
  for (double& v : p) v /= s;
  return p;
}

TEST_F(SpeculativeEngineTest, SeededSamplingKeepsTheTargetDistribution) {
  constexpr int kDraws = 3000, kTokens = 3;
  const SamplingParams base{.temperature = 0.6f};
  const std::vector<int32_t> p = {5, 17, 300, 42, 9};
  auto sample_all = [&](std::shared_ptr<Proposer> proposer, int k) {
    EngineConfig ec = config(proposer, k);
    ec.max_batch = 64, ec.max_batched_tokens = 512;
    Engine engine(std::make_unique<CpuModelRunner>(*model_, /*selects=*/true), ec);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    std::vector<std::vector<int32_t>> out;
    for (int s = 0; s < kDraws; ++s) {
      GenerationRequest r{.prompt = p, .max_tokens = kTokens, .sampling = base};
      r.sampling.seed = uint64_t(1000 + s);
      hs.push_back(engine.submit(r));
      if (hs.size() == 64 || s + 1 == kDraws) {
        for (auto& h : hs) out.push_back(drain(h));
        hs.clear();
      }
    }
    return std::make_pair(out, engine.metrics());
  };
  const auto [plain, plain_m] = sample_all(nullptr, 0);
  const auto [spec, spec_m] = sample_all(draft_of(*model_), 3);
  EXPECT_GT(spec_m.spec_accepted_tokens, 100u);  // greedy drafts of the target: accepted when the draw agrees
  EXPECT_LT(spec_m.spec_accepted_tokens, spec_m.spec_draft_tokens);
  // Each request's tokens are the ones it gets without speculation (same seed, same logits).
  EXPECT_EQ(spec, plain);
  // And the first token follows the target's distribution ...
  std::map<int32_t, int> first;
  for (const auto& o : spec) ++first[o[0]];
  KvCache c = model_->new_cache();
  const std::vector<double> p1 = softmax(model_->forward(p, c, false), base.temperature);
  const auto [x1, df1] = chi_square(first, p1, kDraws);
  EXPECT_GT(df1, 5);
  EXPECT_LT(x1, chi2_critical(df1)) << "first token: chi-square " << x1 << " with " << df1 << " degrees of freedom";
  // (The test has the power to see a wrong distribution: the same draws against temperature 1.)
  KvCache cw = model_->new_cache();
  const auto [xw, dfw] = chi_square(first, softmax(model_->forward(p, cw, false), 1.0), kDraws);
  EXPECT_GT(xw, chi2_critical(dfw));
  // ... and so does the third, given the most frequent first two (drafts verified at both).
  std::map<std::pair<int32_t, int32_t>, int> prefixes;
  for (const auto& o : spec) ++prefixes[{o[0], o[1]}];
  const auto top = std::max_element(prefixes.begin(), prefixes.end(), [](auto& a, auto& b) { return a.second < b.second; });
  std::map<int32_t, int> third;
  int n3 = 0;
  for (const auto& o : spec)
    if (std::make_pair(o[0], o[1]) == top->first) ++third[o[2]], ++n3;
  std::vector<int32_t> ctx = p;
  ctx.push_back(top->first.first), ctx.push_back(top->first.second);
  KvCache c3 = model_->new_cache();
  const std::vector<double> p3 = softmax(model_->forward(ctx, c3, false), base.temperature);
  const auto [x3, df3] = chi_square(third, p3, n3);
  EXPECT_GT(n3, 200);
  EXPECT_GT(df3, 3);
  EXPECT_LT(x3, chi2_critical(df3)) << "third token: chi-square " << x3 << " with " << df3 << " degrees of freedom";
}


// The interface a draft head (MTP, EAGLE) plugs into: a proposer that wants hidden states gets, with
// each sequence, the target's last-layer hidden state at the position that chose its last token,
// equal to what a fresh forward of the same tokens computes there. This head checks that and drafts
// the known greedy continuation with every third token wrong; the outputs stay exact.
class CheckingHead final : public Proposer {
 public:
  CheckingHead(const GptOssCpuModel& m, std::vector<int32_t> prompt, std::vector<int32_t> answer)
      : m_(m), prompt_(std::move(prompt)), answer_(std::move(answer)) {}
  std::string name() const override { return "checking-head"; }
  bool wants_hidden() const override { return true; }
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> reqs) override {
    std::vector<std::vector<int32_t>> out(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto t = reqs[i].tokens;
      KvCache c = m_.new_cache();
      const SequenceChunk ch{t.first(t.size() - 1), &c, false};
      std::vector<float> want;
      m_.forward_batch(std::span(&ch, 1), &want);
      ++checked;
      if (!std::equal(want.begin(), want.end(), reqs[i].hidden.begin(), reqs[i].hidden.end())) ++wrong;
      for (size_t j = t.size() - prompt_.size(); j < answer_.size() && int(out[i].size()) < reqs[i].k; ++j)
        out[i].push_back(++n_ % 3 == 0 ? (answer_[j] + 1) % 777 : answer_[j]);
    }
    return out;
  }
  int checked = 0, wrong = 0;

 private:
  const GptOssCpuModel& m_;
  std::vector<int32_t> prompt_, answer_;
  uint64_t n_ = 0;
};

TEST_F(SpeculativeEngineTest, DraftHeadsGetTheTargetsHiddenStates) {
  const std::vector<int32_t> p = prompt(2);
  const auto want = generate(*model_, p, {.max_tokens = 30, .sampling = {.temperature = 0}, .stop_at_eos = false});
  auto head = std::make_shared<CheckingHead>(*model_, p, want);
  Engine engine(std::make_unique<CpuModelRunner>(*model_, /*selects=*/true), config(head, 4));
  GenerationRequest r{.prompt = p, .max_tokens = 30, .sampling = {.temperature = 0}};
  EXPECT_EQ(drain(engine.submit(r)), want);
  EXPECT_GT(head->checked, 5);
  EXPECT_EQ(head->wrong, 0);
  EXPECT_GT(engine.metrics().spec_accepted_tokens, 0u);
}

}  // namespace
}  // namespace osprey
