#include <cmath>
// Paged KV and batched forward (bitwise equal to one sequence at a time), the block manager
// (groups, windows, prefix caching), the scheduler's plans (chunked prefill, decode-first,
// preemption when blocks run out), and the engine end to end (prefix hits bit-identical to cold).
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    synth_checkpoint(synth_preset("parity-b"), dir_->str(), {.seed = 9, .progress = false});
    weights_ = new GptOssWeights(GptOssWeights::load(dir_->str()));
    model_ = new GptOssCpuModel(*weights_);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete weights_;
    delete dir_;
  }
  static std::vector<int32_t> prompt(int n, int seed) {
    std::vector<int32_t> p(n);
    for (int i = 0; i < n; ++i) p[i] = (seed * 97 + i * 31) % 777;
    return p;
  }
  // Six concurrent greedy requests: each gets exactly generate()'s tokens and ends by length.
  static void expect_greedy_matches_generate(Engine& engine, int max_tokens) {
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 6; ++i)
      handles.push_back(engine.submit({.prompt = prompt(5 + 3 * i, i), .max_tokens = max_tokens, .sampling = {.temperature = 0}}));
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> got;
      TokenEvent ev;
      FinishReason fr = FinishReason::None;
      while (handles[i]->next(ev)) {
        if (ev.token >= 0) got.push_back(ev.token);
        if (ev.finish != FinishReason::None) fr = ev.finish;
      }
      EXPECT_EQ(fr, FinishReason::Length);
      auto want = generate(*model_, prompt(5 + 3 * i, i),
                           {.max_tokens = max_tokens, .sampling = {.temperature = 0}, .stop_at_eos = false});
      EXPECT_EQ(got, want) << "request " << i;
    }
  }
  // A request cancelled after its first token ends Cancelled, and every KV block goes back.
  static void expect_cancel_frees_blocks(Engine& engine, int max_tokens) {
    auto h = engine.submit({.prompt = prompt(4, 50), .max_tokens = max_tokens, .sampling = {.temperature = 0}});
    TokenEvent ev;
    ASSERT_TRUE(h->next(ev));
    h->cancel();
    while (h->next(ev)) {
    }
    EXPECT_EQ(ev.finish, FinishReason::Cancelled);
    for (int i = 0; i < 100 && engine.metrics().kv_blocks_used != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
  }
  static KvLayout layout(int block_size, int num_blocks, bool prefix_caching = true) {
    KvLayout L = kv_layout_of(model_->config());
    L.block_size = block_size, L.num_blocks = num_blocks, L.prefix_caching = prefix_caching;
    return L;
  }
  static std::vector<int32_t> tokens_of(const std::shared_ptr<RequestHandle>& h) {
    std::vector<int32_t> got;
    TokenEvent ev;
    while (h->next(ev))
      if (ev.token >= 0) got.push_back(ev.token);
    return got;
  }
  static test::TempDir* dir_;
  static GptOssWeights* weights_;
  static GptOssCpuModel* model_;
};
test::TempDir* EngineTest::dir_ = nullptr;
GptOssWeights* EngineTest::weights_ = nullptr;
GptOssCpuModel* EngineTest::model_ = nullptr;

TEST_F(EngineTest, BatchedPagedForwardIsBitwiseEqualToSingle) {
  KvBlockManager pool(layout(/*block_size=*/4, /*num_blocks=*/64));
  std::vector<std::vector<int32_t>> prompts = {prompt(13, 1), prompt(1, 2), prompt(22, 3)};
  std::vector<std::unique_ptr<SeqKv>> kvs;
  std::vector<SequenceChunk> chunks;
  for (auto& p : prompts) {
    kvs.push_back(std::make_unique<SeqKv>(pool));
    ASSERT_TRUE(pool.reserve(*kvs.back(), int(p.size()) + 1));
    chunks.push_back({p, kvs.back().get(), /*all_logits=*/true});
  }
  auto batched = model_->forward_batch(chunks);
  for (size_t i = 0; i < prompts.size(); ++i) {
    KvCache alone = model_->new_cache();
    EXPECT_EQ(batched[i], model_->forward(prompts[i], alone, true)) << "sequence " << i;
  }
  // Next step: one decode token each, batched, against the paged caches.
  std::vector<int32_t> next = {5, 6, 7};
  chunks.clear();
  for (size_t i = 0; i < prompts.size(); ++i) chunks.push_back({std::span(&next[i], 1), kvs[i].get(), false});
  auto step = model_->forward_batch(chunks);
  for (size_t i = 0; i < prompts.size(); ++i) {
    KvCache alone = model_->new_cache();
    std::vector<int32_t> all = prompts[i];
    all.push_back(next[i]);
    auto ref = model_->forward(all, alone, false);
    EXPECT_EQ(step[i], ref) << "sequence " << i;
  }
  for (auto& kv : kvs) pool.release_all(*kv);
  EXPECT_EQ(pool.available_blocks(), 64);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST_F(EngineTest, LongPromptChunksShrinkWhileOthersDecode) {
  // A 60,000-token prompt beside a decoding stream: deep in the prompt a chunk's tokens times its
  // positions stay within 2048 x 8192 (the stream's steps stay short); alone, it takes the budget.
  KvBlockManager pool(layout(64, /*num_blocks=*/2000, /*prefix_caching=*/false));
  Scheduler s(pool, {.max_batch = 4, .max_batched_tokens = 2048});
  auto stream = std::make_unique<Sequence>();
  stream->id = 1, stream->tokens = prompt(3, 1), stream->prompt_len = 3;
  s.add(std::move(stream));
  s.commit(s.schedule());
  Sequence* st = s.find(1);
  auto big = std::make_unique<Sequence>();
  big->id = 2, big->tokens = std::vector<int32_t>(60000, 5), big->prompt_len = 60000;
  s.add(std::move(big));
  Sequence* b = s.find(2);
  int steps = 0, capped = 0;
  while (b->num_computed < 60000 && steps < 2000) {
    st->tokens.push_back(7);  // the stream decodes every step
    StepPlan p = s.schedule();
    for (const ScheduledChunk& c : p.chunks)
      if (c.seq == b) {
        EXPECT_LE(double(c.count) * (c.start + c.count), 2048.0 * 8192 + 16.0 * 60016) << "at " << c.start;
        capped += c.count < 2047;
      }
    s.commit(p);
    ++steps;
  }
  EXPECT_EQ(b->num_computed, 60000);
  EXPECT_GT(capped, 100);
  s.remove(1);  // alone, the prompt's chunks take the whole budget again
  b->tokens.resize(70000, 5);
  StepPlan alone = s.schedule();
  ASSERT_EQ(alone.chunks.size(), 1u);
  EXPECT_EQ(alone.chunks[0].count, 2048);
}

TEST_F(EngineTest, SchedulerChunksPrefillAndPreempts) {
  // 10 blocks of 4 positions shared by both layer groups; no prefix caching here.
  KvBlockManager pool(layout(4, /*num_blocks=*/10, /*prefix_caching=*/false));
  Scheduler s(pool, {.max_batch = 4, .max_batched_tokens = 8});
  auto seq = [&](int id, int n) {
    auto q = std::make_unique<Sequence>();
    q->id = id;
    q->tokens = prompt(n, id);
    q->prompt_len = n;
    return q;
  };
  s.add(seq(1, 10));
  s.add(seq(2, 3));
  StepPlan p1 = s.schedule();  // 8 of seq 1's 10 prompt tokens fill the budget
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].count, 8);
  EXPECT_FALSE(p1.chunks[0].sample);
  s.commit(p1);
  EXPECT_EQ(p1.chunks[0].seq->num_computed, 8);
  StepPlan p2 = s.schedule();  // the rest of seq 1, then seq 2's prompt
  ASSERT_EQ(p2.chunks.size(), 2u);
  EXPECT_EQ(p2.chunks[0].count, 2);
  EXPECT_TRUE(p2.chunks[0].sample);
  EXPECT_EQ(p2.chunks[1].seq->id, 2);
  s.commit(p2);
  // Grow seq 1 until the pool is exhausted: seq 2 (admitted last) is preempted. Seq 1 at 18
  // positions holds 5 full blocks and the sliding blocks its window (and chunk) still reads.
  Sequence* s1 = s.find(1);
  for (int i = 0; i < 11; ++i) s1->tokens.push_back(1);
  StepPlan p3 = s.schedule();
  EXPECT_EQ(p3.preempted, std::vector<int64_t>{2});
  EXPECT_EQ(s.waiting(), 1);
  EXPECT_EQ(s.remove(1)->id, 1);
  EXPECT_EQ(pool.available_blocks(), 10);
}

TEST_F(EngineTest, EngineMatchesGenerateAndCancels) {
  EngineConfig ec{.max_batch = 8, .max_batched_tokens = 16, .max_queue = 64, .max_seq_len = 96, .kv_block_size = 4, .kv_blocks = 64};
  Engine engine(std::make_unique<CpuModelRunner>(*model_), ec);
  expect_greedy_matches_generate(engine, 7);
  expect_cancel_frees_blocks(engine, 80);
  // A small pool forces preemptions (recompute, from the prefix cache where blocks survived):
  // still generate()'s tokens, every block back at the end.
  EngineConfig small = ec;
  small.max_batch = 4, small.kv_blocks = 24;
  Engine tight(std::make_unique<CpuModelRunner>(*model_), small);
  expect_greedy_matches_generate(tight, 9);
  expect_cancel_frees_blocks(tight, 40);
  EXPECT_GT(tight.metrics().preemptions, 0u);
  EXPECT_THROW(engine.submit({.prompt = prompt(96, 1), .max_tokens = 1}), Error);  // longer than the context
  EXPECT_THROW(engine.submit({.prompt = {1, 100000}, .max_tokens = 1}), Error);
}

// A runner that selects tokens itself (run_select, as the GPU runner does on the device): seeded
// sampling gives exactly the tokens of the same engine fed logits (the draws are taken in the same
// order), and a request with a logit constraint goes through masks (its tokens obey them).
TEST_F(EngineTest, RunnerSelectionEqualsSamplingFromLogits) {
  // Only even token ids.
  class EvenOnly final : public TokenConstraint {
   public:
    bool fill_mask(std::span<const int32_t>, std::span<uint32_t> mask) override {
      std::fill(mask.begin(), mask.end(), 0x55555555u);  // bits 0, 2, 4, ...
      return true;
    }
  };
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 16, .max_queue = 64, .max_seq_len = 64, .kv_block_size = 4, .kv_blocks = 64};
  Engine selecting(std::make_unique<CpuModelRunner>(*model_, /*selects=*/true), ec);
  Engine from_logits(std::make_unique<CpuModelRunner>(*model_), ec);
  const std::vector<SamplingParams> params = {
      {.temperature = 0}, {.temperature = 0.8f, .seed = 5}, {.temperature = 1.2f, .top_k = 7, .seed = 6},
      {.temperature = 0.9f, .top_p = 0.6f, .seed = 7}};
  std::vector<std::shared_ptr<RequestHandle>> a, b;
  for (size_t i = 0; i < params.size(); ++i) {
    a.push_back(selecting.submit({.prompt = prompt(6 + int(i), int(i)), .max_tokens = 12, .sampling = params[i]}));
    b.push_back(from_logits.submit({.prompt = prompt(6 + int(i), int(i)), .max_tokens = 12, .sampling = params[i]}));
  }
  // Constrained requests: token masks through run_select on one engine, masked logits on the host
  // on the other; the same tokens.
  auto constrained = selecting.submit({.prompt = prompt(5, 9), .constraint = std::make_shared<EvenOnly>(),
                                       .max_tokens = 12, .sampling = {.temperature = 1.0f, .seed = 8}});
  auto constrained_host = from_logits.submit({.prompt = prompt(5, 9), .constraint = std::make_shared<EvenOnly>(),
                                              .max_tokens = 12, .sampling = {.temperature = 1.0f, .seed = 8}});
  for (size_t i = 0; i < params.size(); ++i) {
    const std::vector<int32_t> ta = tokens_of(a[i]), tb = tokens_of(b[i]);
    EXPECT_EQ(ta.size(), 12u);
    EXPECT_EQ(ta, tb) << "request " << i;
  }
  const std::vector<int32_t> tc = tokens_of(constrained);
  ASSERT_EQ(tc.size(), 12u);
  for (int32_t t : tc) EXPECT_EQ(t % 2, 0);
  EXPECT_EQ(tc, tokens_of(constrained_host));
}


// The block manager: the longest cached prefix (whole blocks, never the last token), shared by
// reference, kept after its holder ends and evicted least recently used; a sliding block leaves
// with the window and a hit needs the sliding blocks the next position's window reads.
TEST_F(EngineTest, BlockManagerPrefixCache) {
  const GptOssConfig& c = model_->config();
  ASSERT_EQ(c.sliding_window, 8);  // parity-b: blocks of 4 -> the window reads 2-3 blocks back
  ASSERT_TRUE(std::count(c.layer_is_sliding.begin(), c.layer_is_sliding.end(), true) > 0);
  KvBlockManager m(layout(4, 40));
  const std::vector<int32_t> p = prompt(30, 1);
  SeqKv a(m);
  EXPECT_EQ(m.match_prefix(a, p), 0);  // empty cache
  for (int start = 0; start < 30; start += 6) {  // chunks of 6, committed as computed
    m.release_window(a, start);
    ASSERT_TRUE(m.reserve(a, start + 6));
    a.set_length(start + 6);
    m.commit(a, p, start + 6);
  }
  EXPECT_EQ(a.table(kFullGroup).size(), 8u);
  // Sliding blocks before the window of position 24 (keys 17..) are no longer held.
  int held = 0;
  for (int32_t b : a.table(kSlidingGroup)) held += b >= 0;
  EXPECT_LE(held, 4);
  EXPECT_EQ(a.table(kSlidingGroup)[0], -1);
  // A second sequence with the same 30 tokens and 5 more: blocks 0..6 (28 positions) are
  // full-layer hits, and so are the sliding blocks position 28's window reads (blocks 5, 6)...
  std::vector<int32_t> q = p;
  for (int i = 0; i < 5; ++i) q.push_back(900 + i);
  SeqKv b(m);
  EXPECT_EQ(m.match_prefix(b, q), 28);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b.table(kFullGroup)[i], a.table(kFullGroup)[i]) << "shared block " << i;
  EXPECT_EQ(b.table(kSlidingGroup)[6], a.table(kSlidingGroup)[6]);
  EXPECT_EQ(b.table(kSlidingGroup)[0], -1);
  // ... and a sequence diverging at token 14 gets 3 blocks (the 4th differs). Their sliding
  // blocks left a's window, but they stay cached, so the window of position 12 is a hit too.
  std::vector<int32_t> r(p.begin(), p.begin() + 14);
  r.push_back(5);
  r.insert(r.end(), p.begin() + 15, p.end());
  SeqKv d(m);
  EXPECT_EQ(m.match_prefix(d, r), 12);
  const PrefixCacheStats st = m.stats();
  EXPECT_EQ(st.queries, uint64_t(30 + 35 + 30));
  EXPECT_EQ(st.hits, uint64_t(28 + 12));
  // The last token is always computed: the same 28-token prompt hits 24 positions (6 blocks).
  SeqKv e(m);
  EXPECT_EQ(m.match_prefix(e, std::span(p).first(28)), 24);
  m.release_all(e);
  m.release_all(d);
  m.release_all(b);
  m.release_all(a);
  EXPECT_EQ(m.used_blocks(), 0);
  EXPECT_GT(m.cached_blocks(), 0);
  // Memory pressure evicts cached blocks, least recently used first: a sequence that needs every
  // block evicts them all, and the prefix is gone.
  SeqKv big(m);
  ASSERT_TRUE(m.reserve(big, 40 * 4 / 2));  // 20 full blocks + their sliding blocks from 0
  m.release_all(big);
  EXPECT_GT(m.stats().evictions, 0u);
  SeqKv again(m);
  EXPECT_LT(m.match_prefix(again, q), 28);
  m.release_all(again);
  EXPECT_EQ(m.used_blocks(), 0);
}

// Without its sliding blocks a full-layer prefix is no hit: evict exactly the sliding block the
// window needs and the hit falls back to the longest prefix whose window is still cached.
TEST_F(EngineTest, BlockManagerHitNeedsTheWindow) {
  KvBlockManager m(layout(4, 64));
  const std::vector<int32_t> p = prompt(17, 2);
  SeqKv a(m);
  ASSERT_TRUE(m.reserve(a, 17));  // one chunk: every block of both groups held
  a.set_length(17);
  m.commit(a, p, 17);
  SeqKv b(m);
  EXPECT_EQ(m.match_prefix(b, p), 16);  // 4 blocks, and the window of position 16
  m.release_all(b);
  m.release_all(a);
  EXPECT_EQ(m.cached_blocks(), 8);  // 4 full + 4 sliding blocks, all registered
}

// Prefix caching in the engine: a request whose prompt shares a cached prefix gives the logits
// of a cold prefill bit for bit (the log probabilities of every token it picks, and the top 5
// alternatives), the same tokens, and the hits are counted; the cold engine never hits.
TEST_F(EngineTest, PrefixCacheIsBitIdenticalToColdPrefill) {
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 12, .max_queue = 64, .max_seq_len = 128, .kv_block_size = 4, .kv_blocks = 200};
  Engine warm(std::make_unique<CpuModelRunner>(*model_), ec);
  EngineConfig off = ec;
  off.prefix_caching = false;
  Engine cold(std::make_unique<CpuModelRunner>(*model_), off);
  const std::vector<int32_t> system = prompt(45, 7);
  auto run = [](Engine& e, const std::vector<int32_t>& p) {
    auto h = e.submit({.prompt = p, .max_tokens = 6, .sampling = {.temperature = 0.8f, .seed = 3}, .logprobs = 5});
    std::vector<std::pair<int32_t, TokenLogprobs>> out;
    TokenEvent ev;
    while (h->next(ev))
      if (ev.token >= 0) out.push_back({ev.token, *ev.logprobs});
    return out;
  };
  for (int q = 0; q < 4; ++q) {
    std::vector<int32_t> p = system;
    for (int i = 0; i < 3 + 5 * q; ++i) p.push_back(int32_t(100 + 13 * q + i));
    const auto hot = run(warm, p), ref = run(cold, p);
    ASSERT_EQ(hot.size(), ref.size());
    for (size_t i = 0; i < hot.size(); ++i) {
      EXPECT_EQ(hot[i].first, ref[i].first) << "question " << q << " token " << i;
      EXPECT_EQ(hot[i].second.logprob, ref[i].second.logprob) << "question " << q << " token " << i;
      EXPECT_EQ(hot[i].second.top, ref[i].second.top) << "question " << q << " token " << i;
    }
  }
  // Questions 1-3 reuse the system prompt's 11 whole blocks (44 positions) at least.
  EXPECT_GE(warm.metrics().prefix.hits, uint64_t(3 * 44));
  EXPECT_EQ(cold.metrics().prefix.hits, 0u);
  EXPECT_GT(warm.metrics().prefix.queries, 0u);
}

}  // namespace
}  // namespace osprey