#include <cmath>
// Paged KV and batched forward (bitwise equal to one sequence at a time), the scheduler's plans
// (chunked prefill, decode-first, preemption when blocks run out), and the engine end to end.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/slot_runner.h"
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
  static test::TempDir* dir_;
  static GptOssWeights* weights_;
  static GptOssCpuModel* model_;
};
test::TempDir* EngineTest::dir_ = nullptr;
GptOssWeights* EngineTest::weights_ = nullptr;
GptOssCpuModel* EngineTest::model_ = nullptr;

TEST_F(EngineTest, BatchedPagedForwardIsBitwiseEqualToSingle) {
  const GptOssConfig& c = model_->config();
  KvBlockPool pool(c.num_layers, c.num_kv_heads, c.head_dim, /*block_size=*/4, /*num_blocks=*/64);
  std::vector<std::vector<int32_t>> prompts = {prompt(13, 1), prompt(1, 2), prompt(22, 3)};
  std::vector<std::unique_ptr<PagedKv>> kvs;
  std::vector<SequenceChunk> chunks;
  for (auto& p : prompts) {
    kvs.push_back(std::make_unique<PagedKv>(pool));
    ASSERT_TRUE(kvs.back()->reserve(int(p.size()) + 1));
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
  for (auto& kv : kvs) kv->release_all();
  EXPECT_EQ(pool.free_blocks(), 64);
}

TEST_F(EngineTest, SchedulerChunksPrefillAndPreempts) {
  const GptOssConfig& c = model_->config();
  KvBlockPool pool(c.num_layers, c.num_kv_heads, c.head_dim, 4, /*num_blocks=*/5);  // 20 positions
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
  p1.chunks[0].seq->num_computed = 8;
  StepPlan p2 = s.schedule();  // the rest of seq 1, then seq 2's prompt
  ASSERT_EQ(p2.chunks.size(), 2u);
  EXPECT_EQ(p2.chunks[0].count, 2);
  EXPECT_TRUE(p2.chunks[0].sample);
  EXPECT_EQ(p2.chunks[1].seq->id, 2);
  // Grow seq 1 until the pool is exhausted: seq 2 (admitted last) is preempted.
  Sequence* s1 = s.find(1);
  s1->num_computed = 10;
  s.find(2)->num_computed = 3;
  for (int i = 0; i < 11; ++i) s1->tokens.push_back(1);  // 8 more positions: 18 need all 5 blocks
  StepPlan p3 = s.schedule();
  EXPECT_EQ(p3.preempted, std::vector<int64_t>{2});
  EXPECT_EQ(s.waiting(), 1);
  EXPECT_EQ(s.remove(1)->id, 1);
  EXPECT_EQ(pool.free_blocks(), 5);
}

TEST_F(EngineTest, EngineMatchesGenerateAndCancels) {
  EngineConfig ec{.max_batch = 8, .max_batched_tokens = 16, .max_queue = 64, .max_seq_len = 96, .kv_block_size = 4, .kv_blocks = 64};
  Engine engine(std::make_unique<CpuModelRunner>(*model_), ec);
  expect_greedy_matches_generate(engine, 7);
  expect_cancel_frees_blocks(engine, 80);
  EXPECT_THROW(engine.submit({.prompt = prompt(96, 1), .max_tokens = 1}), Error);  // longer than the context
  EXPECT_THROW(engine.submit({.prompt = {1, 100000}, .max_tokens = 1}), Error);
}

// The slot runner (the GPU path's engine integration) over the CPU engine: the same tokens as
// generate(), decode steps batched, slots returned on finish, cancel and preemption.
TEST_F(EngineTest, SlotRunnerMatchesGenerateAndFreesSlots) {
  CpuSlotModel slots(*model_, 4);
  auto runner = std::make_unique<SlotModelRunner>(slots);
  SlotModelRunner* r = runner.get();
  // A small pool forces preemptions (recompute from the start in a fresh slot).
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 16, .max_queue = 64, .max_seq_len = 64, .kv_block_size = 4, .kv_blocks = 12};
  Engine engine(std::move(runner), ec);
  expect_greedy_matches_generate(engine, 9);
  expect_cancel_frees_blocks(engine, 40);
  EXPECT_EQ(r->slots_in_use(), 0);
  EXPECT_GT(engine.metrics().preemptions, 0u);  // the small pool did force recomputes
}

// The slot runner selects tokens itself (run_select, as a GPU model does on the device): seeded
// sampling gives exactly the tokens of the same engine fed logits (the draws are taken in the same
// order), and a request with a logit constraint still goes through the logits (its tokens obey it).
TEST_F(EngineTest, SlotRunnerSelectionEqualsSamplingFromLogits) {
  // The same runner with run_select hidden: the engine samples from run()'s logits.
  class LogitsOnly final : public ModelRunner {
   public:
    explicit LogitsOnly(std::unique_ptr<SlotModelRunner> r) : r_(std::move(r)) {}
    std::vector<std::vector<float>> run(const StepPlan& plan) override { return r_->run(plan); }
    const GptOssConfig& config() const override { return r_->config(); }
    void release(int64_t id) override { r_->release(id); }
    bool uses_host_kv() const override { return false; }

   private:
    std::unique_ptr<SlotModelRunner> r_;
  };
  // Only even token ids.
  class EvenOnly final : public TokenConstraint {
   public:
    bool fill_mask(std::span<const int32_t>, std::span<uint32_t> mask) override {
      std::fill(mask.begin(), mask.end(), 0x55555555u);  // bits 0, 2, 4, ...
      return true;
    }
  };
  CpuSlotModel slots_a(*model_, 4), slots_b(*model_, 4);
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 16, .max_queue = 64, .max_seq_len = 64, .kv_block_size = 4, .kv_blocks = 64};
  Engine selecting(std::make_unique<SlotModelRunner>(slots_a), ec);
  Engine from_logits(std::make_unique<LogitsOnly>(std::make_unique<SlotModelRunner>(slots_b)), ec);
  const std::vector<SamplingParams> params = {
      {.temperature = 0}, {.temperature = 0.8f, .seed = 5}, {.temperature = 1.2f, .top_k = 7, .seed = 6},
      {.temperature = 0.9f, .top_p = 0.6f, .seed = 7}};
  auto tokens_of = [](const std::shared_ptr<RequestHandle>& h) {
    std::vector<int32_t> got;
    TokenEvent ev;
    while (h->next(ev))
      if (ev.token >= 0) got.push_back(ev.token);
    return got;
  };
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

}  // namespace
}  // namespace osprey