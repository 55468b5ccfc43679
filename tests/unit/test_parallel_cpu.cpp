// Tensor and expert parallelism on the CPU (issue 17): every layout of a 1, 2 or 4 rank world
// (ranks as threads over LocalGroup) runs a prompt and greedy decode steps, and every rank's logits
// equal the unsharded CPU forward's up to the order of the all-reduced sums, with the same greedy
// tokens. That covers KV heads split and replicated (tp 4 over 2 KV heads), experts split and their
// intermediate range split (moe_tp), and an intermediate of 5 blocks that splits unevenly; and the
// ranks run together as one model (ShardedCpuGroup) behind `generate --tp N --ep M`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/npy.h"
#include "model/gpt_oss_forward.h"
#include "model/gpt_oss_weights.h"
#include "parallel/communicator.h"
#include "parallel/sharded_cpu.h"
#include "parallel/sharded_group.h"
#include "engine/generate.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

int argmax(const std::vector<float>& v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

TEST(LocalGroup, AllReduceAddsInRankOrderAndGathersInRankOrder) {
  LocalGroup g(3);
  std::vector<std::vector<float>> data = {{1.0f, 1e8f}, {2.0f, 1.0f}, {3.0f, -1e8f}}, gathered(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      Communicator& c = g.rank(r);
      const float mine = float(10 * r);
      gathered[size_t(r)].resize(3);
      c.all_gather(&mine, 1, gathered[size_t(r)].data());
      c.all_reduce_sum(data[size_t(r)].data(), 2);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[size_t(r)][0], 6.0f);
    EXPECT_EQ(data[size_t(r)][1], (1e8f + 1.0f) + -1e8f);  // rank order: 1e8 + 1 rounds to 1e8 first
    EXPECT_EQ(gathered[size_t(r)], (std::vector<float>{0.0f, 10.0f, 20.0f}));
  }
  EXPECT_THROW(g.rank(3), Error);
}

// Each rank of layout L over w: the prompt's logits at every position, then `steps` greedy tokens
// (with each step's logits), from every rank.
struct RankRun {
  std::vector<float> prompt_logits;
  std::vector<std::vector<float>> step_logits;
  std::vector<int32_t> tokens;
};
std::vector<RankRun> run_layout(const GptOssWeights& w, const ParallelLayout& L, const std::vector<int32_t>& prompt,
                                int steps) {
  LocalGroup g(L.world());
  std::vector<RankRun> out(size_t(L.world()));
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> failed(size_t(L.world()));
  for (int r = 0; r < L.world(); ++r)
    ts.emplace_back([&, r] {
     try {
      ShardedCpuRank rank(w, L, g.rank(r));
      RankRun& o = out[size_t(r)];
      o.prompt_logits = rank.forward(prompt, /*all_logits=*/true);
      const int V = w.config.vocab;
      int32_t next = int32_t(std::max_element(o.prompt_logits.end() - V, o.prompt_logits.end()) -
                             (o.prompt_logits.end() - V));
      for (int s = 0; s < steps; ++s) {
        o.tokens.push_back(next);
        o.step_logits.push_back(rank.forward(std::span(&next, 1), false));
        next = argmax(o.step_logits.back());
      }
     } catch (...) {
      failed[size_t(r)] = std::current_exception();
     }
    });
  for (auto& t : ts) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  return out;
}

void expect_layouts_match_unsharded(const std::string& preset, const std::vector<ParallelLayout>& layouts) {
  test::TempDir dir;
  synth_checkpoint(synth_preset(preset), dir.str(), {.seed = 3, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  std::mt19937 rng(11);
  std::vector<int32_t> prompt(9);
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(std::min(w.config.vocab, 1000)));
  constexpr int kSteps = 5;
  // The unsharded reference: the prompt, then the same greedy loop.
  GptOssCpuModel ref(w);
  KvCache kv = ref.new_cache();
  const std::vector<float> ref_prompt = ref.forward(prompt, kv, /*all_logits=*/true);
  std::vector<std::vector<float>> ref_steps;
  std::vector<int32_t> ref_tokens;
  const int V = w.config.vocab;
  int32_t next = int32_t(std::max_element(ref_prompt.end() - V, ref_prompt.end()) - (ref_prompt.end() - V));
  for (int s = 0; s < kSteps; ++s) {
    ref_tokens.push_back(next);
    ref_steps.push_back(ref.forward(std::span(&next, 1), kv, false));
    next = argmax(ref_steps.back());
  }
  for (const ParallelLayout& L : layouts) {
    const std::vector<RankRun> runs = run_layout(w, L, prompt, kSteps);
    for (size_t r = 0; r < runs.size(); ++r) {
      const RankRun& o = runs[r];
      EXPECT_EQ(o.prompt_logits, runs[0].prompt_logits) << L.name() << ": rank " << r << " differs from rank 0";
      EXPECT_LT(rel_diff(o.prompt_logits, ref_prompt), 1e-5) << preset << " " << L.name() << " prompt";
      EXPECT_EQ(o.tokens, ref_tokens) << preset << " " << L.name() << " greedy tokens";
      for (int s = 0; s < kSteps; ++s)
        EXPECT_LT(rel_diff(o.step_logits[size_t(s)], ref_steps[size_t(s)]), 1e-5) << L.name() << " step " << s;
    }
  }
}

// tiny: 4 query / 2 KV heads, 8 experts, intermediate 64 (2 blocks of 32, so moe_tp at most 2).
TEST(ShardedCpu, EveryLayoutOfFourRanksEqualsTheUnshardedForward) {
  expect_layouts_match_unsharded("tiny", {{1, 1, 1}, {2, 1, 1}, {2, 1, 2}, {4, 1, 2}, {4, 1, 4}});
}

// parity-a: 6 query / 2 KV heads, intermediate 160 (5 blocks: moe_tp 2 gets 3 and 2), 4 layers.
TEST(ShardedCpu, UnevenIntermediateSplitEqualsTheUnshardedForward) {
  expect_layouts_match_unsharded("parity-a", {{2, 1, 1}, {2, 1, 2}});
}

TEST(ShardedCpu, RefusesWhatItCannotRun) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("tiny"), dir.str(), {.seed = 3, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  LocalGroup two(2), one(1);
  EXPECT_THROW(ShardedCpuRank(w, {1, 2, 1}, two.rank(0)), Error);  // dp 2
  EXPECT_THROW(ShardedCpuRank(w, {2, 1, 1}, one.rank(0)), Error);  // a world of 2 on one rank
}

// The ranks run together by ShardedCpuGroup, through the host token loop (what `generate --tp N
// --ep M` runs): greedy and seeded sampled tokens equal the unsharded model's, over two prompts on
// one group (reset between them).
TEST(ShardedCpuGroup, GenerateEqualsTheUnshardedModel) {
  for (auto [preset, layouts] : {std::pair<std::string, std::vector<ParallelLayout>>{"tiny", {{2, 1, 2}, {4, 1, 4}}},
                                 {"parity-a", {{2, 1, 1}, {2, 1, 2}}}}) {
    test::TempDir dir;
    synth_checkpoint(synth_preset(preset), dir.str(), {.seed = 3, .progress = false});
    GptOssWeights w = GptOssWeights::load(dir.str());
    GptOssCpuModel ref(w);
    GenerateOptions greedy{.max_tokens = 10, .sampling = {.temperature = 0}, .stop_at_eos = false, .prefill_chunk = 3};
    GenerateOptions sampled = greedy;
    sampled.sampling = {.temperature = 0.8f, .top_p = 0.9f, .seed = 5};
    const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7, 8, 9, 10, 11}, {3, 1, 4}};
    for (const ParallelLayout& L : layouts) {
      ShardedCpuGroup g(w, L);
      for (const GenerateOptions& opt : {greedy, sampled})
        for (const auto& p : prompts) {
          g.reset();
          const auto got = generate_loop(w.config, p, opt, [&](std::span<const int32_t> t) { return g.forward(t, false); });
          EXPECT_EQ(got, generate(ref, p, opt)) << preset << " " << L.name() << " temperature " << opt.sampling.temperature;
          EXPECT_EQ(g.length(), int(p.size() + got.size()) - 1);
        }
    }
  }
}

// A layout the model cannot take is refused before any rank runs; a bad token is refused before
// the ranks start (none is left waiting in a collective), and the group still works afterwards.
TEST(ShardedCpuGroup, RefusesBadLayoutsAndTokensWithoutHanging) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-a"), dir.str(), {.seed = 3, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  EXPECT_THROW(ShardedCpuGroup(w, {4, 1, 2}), Error);  // 6 heads over tp 4
  EXPECT_THROW(ShardedCpuGroup(w, {2, 1, 3}), Error);  // ep 3 does not divide the world
  ShardedCpuGroup g(w, {2, 1, 2});
  const std::vector<int32_t> bad = {1, w.config.vocab};
  EXPECT_THROW(g.forward(bad, false), Error);
  EXPECT_THROW(g.forward({}, false), Error);
  EXPECT_EQ(g.length(), 0);
  const std::vector<int32_t> ok = {1, 2, 3};
  GptOssCpuModel ref(w);
  KvCache kv = ref.new_cache();
  EXPECT_LT(rel_diff(g.forward(ok, false), ref.forward(ok, kv, false)), 1e-5);
}

// The command line: `generate --tp 2 --ep 2` prints the unsharded model's tokens; the GPU and the
// other precisions are refused with the reason.
TEST(ShardedCpuGroup, GenerateCli) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-a --seed 3 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string m = "generate --model " + (d / "m") + " --tokens 5,6,7,8 --max-tokens 8 --greedy --ignore-eos";
  auto plain = test::run_cli(m), sharded = test::run_cli(m + " --tp 2 --ep 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_EQ(sharded.out, plain.out);
  EXPECT_NE(sharded.err.find("sharded: tp2 dp1 ep2 (2 ranks as threads)"), std::string::npos) << sharded.err;
  test::expect_refused(m + " --tp 2 --backend cuda", "the GPU layouts (NCCL, one process per GPU) are not built yet");
  test::expect_refused(m + " --tp 2 --precision bf16", "the sharded CPU forward is fp32");
  test::expect_refused(m + " --tp 4", "6 attention heads do not split over tp 4");
  // `logits --tp 2 --ep 2`: every position's logits, the unsharded ones up to the order of the
  // all-reduced sums.
  auto l = test::run_cli("logits --model " + (d / "m") + " --tokens 5,6,7,8 --tp 2 --ep 2 --out " + (d / "l.npy"));
  ASSERT_EQ(l.exit_code, 0) << l.err;
  const NpyF32 npy = read_npy_f32(d / "l.npy");
  GptOssWeights w = GptOssWeights::load(d / "m");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{4, w.config.vocab}));
  GptOssCpuModel ref(w);
  KvCache kv = ref.new_cache();
  const std::vector<int32_t> toks = {5, 6, 7, 8};
  EXPECT_LT(rel_diff(npy.data, ref.forward(toks, kv, true)), 1e-5);
  test::expect_refused("logits --model " + (d / "m") + " --tokens 5 --tp 2 --backend cuda --out " + (d / "x.npy"),
                       "the GPU layouts (NCCL, one process per GPU) are not built yet");
}

// logits --no-cublaslt is the GPU fp8 path's switch: refused anywhere else.
TEST(LogitsCli, NoCublasltRefusedOffTheGpuFp8Path) {
  test::expect_refused("logits --model /nonexistent --tokens 1 --out /tmp/x.npy --no-cublaslt",
                       "--no-cublaslt applies to the GPU's fp8 path");
}

}  // namespace
}  // namespace osprey
