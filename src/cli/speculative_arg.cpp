#include "cli/speculative_arg.h"
#include "cli/weights_arg.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/cuda_runner.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey::cli {

void SpeculativeArg::add(CLI::App* cmd) {
  cmd->add_option("--speculative", spec,
                  "speculative decoding: ngram:K (prompt lookup) or draft:DIR:K (a gpt-oss checkpoint with the same "
                  "tokenizer drafting greedily), K draft tokens per step (1-16); outputs are unchanged");
  mode_opt = cmd->add_option("--speculative-mode", mode,
                  "auto: per batch size, draft lengths 0, K/2 and K are measured and the fastest is used (off where "
                  "speculation does not pay); always: K drafts every step; off: the same engine without drafts (to "
                  "measure against)")
      ->check(CLI::IsMember({"auto", "always", "off"}));
}

void SpeculativeArg::check() const {
  if (!on() && mode_opt && mode_opt->count())
    fail("--speculative-mode {} needs --speculative ngram:K or draft:DIR:K (without it nothing is drafted)", mode);
}

namespace {
// A draft model with the runner that runs it (the runner borrows the model).
template <typename Model, typename Runner>
class OwningRunner final : public ModelRunner {
 public:
  OwningRunner(std::unique_ptr<GptOssWeights> w, std::unique_ptr<Model> m, std::unique_ptr<Runner> r)
      : w_(std::move(w)), m_(std::move(m)), r_(std::move(r)) {}
  std::vector<std::vector<float>> run(const StepPlan& p) override { return r_->run(p); }
  std::vector<int32_t> run_select(const StepPlan& p, std::span<const TokenChoice> c, const StepMasks* m) override {
    return r_->run_select(p, c, m);
  }
  bool selects_tokens() const override { return r_->selects_tokens(); }
  const GptOssConfig& config() const override { return r_->config(); }
  void release(int64_t id) override { r_->release(id); }
  bool uses_host_kv() const override { return r_->uses_host_kv(); }
  int kv_block_size() const override { return r_->kv_block_size(); }
  int kv_blocks() const override { return r_->kv_blocks(); }

 private:
  std::unique_ptr<GptOssWeights> w_;
  std::unique_ptr<Model> m_;
  std::unique_ptr<Runner> r_;
};

// KV blocks for the draft: every running sequence at full length, within a memory cap.
int64_t draft_blocks(const GptOssConfig& c, const EngineConfig& ec, int block, size_t bytes_per_value, double cap_bytes) {
  const double block_bytes = kv_block_bytes(c, block, bytes_per_value);
  const int64_t wanted = int64_t(ec.max_batch) * (2 * ((ec.max_seq_len + block - 1) / block) + 4);
  return std::max<int64_t>(8, std::min<int64_t>(wanted, int64_t(cap_bytes / block_bytes)));
}
}  // namespace

void SpeculativeArg::apply(EngineConfig& ec, const GptOssConfig& target, const std::string& backend) const {
  if (!on()) return;
  const SpeculativeSpec s = parse_speculative(spec);
  if (mode == "off") return;
  ec.spec_k = s.k;
  ec.spec_adaptive = mode == "auto";
  if (s.kind == "ngram") {
    ec.proposer = std::make_shared<NgramProposer>(1, 4, 8192);
    return;
  }
  auto w = std::make_unique<GptOssWeights>(GptOssWeights::load(s.draft));
  const GptOssConfig& dc = w->config;
  if (dc.vocab != target.vocab)
    fail("--speculative draft:{}: its vocabulary has {} tokens, the model's {}; a draft needs the same tokenizer", s.draft,
         dc.vocab, target.vocab);
  std::unique_ptr<ModelRunner> runner;
  KvLayout L = kv_layout_of(dc);
  if (backend == "cuda") {
    constexpr double kCap = 8.0 * (1ull << 30);  // GPU bytes of draft KV at most
    const int64_t blocks = draft_blocks(dc, ec, GptOssCudaFp8::kBlockPositions, 2, kCap);
    auto m = std::make_unique<GptOssCudaFp8>(
        *w, GptOssCudaFp8::Options{.slots = ec.max_batch, .max_context = ec.max_seq_len,
                                   .max_rows = ec.max_batched_tokens, .graphs = true, .kv_blocks = blocks,
                                   .experts = WeightsArg{}.experts(*w)});
    auto r = std::make_unique<CudaModelRunner>(*m);
    runner = std::make_unique<OwningRunner<GptOssCudaFp8, CudaModelRunner>>(std::move(w), std::move(m), std::move(r));
    L.block_size = GptOssCudaFp8::kBlockPositions;
    L.num_blocks = int(blocks);
    L.storage = false;
  } else {
    constexpr double kCap = 2.0 * (1ull << 30);
    L.block_size = 16;
    L.num_blocks = int(draft_blocks(dc, ec, L.block_size, sizeof(float), kCap));
    auto m = std::make_unique<GptOssCpuModel>(*w);
    auto r = std::make_unique<CpuModelRunner>(*m, /*selects=*/true);
    runner = std::make_unique<OwningRunner<GptOssCpuModel, CpuModelRunner>>(std::move(w), std::move(m), std::move(r));
  }
  log_info("speculative decoding: draft model {} ({} layers, hidden {}), {} drafts per step, KV {} blocks", s.draft,
           dc.num_layers, dc.hidden, s.k, L.num_blocks);
  ec.proposer = std::make_shared<DraftModelProposer>(std::move(runner), L, ec.max_batched_tokens);
}

std::string speculative_summary(const EngineMetrics& m, const std::string& spec) {
  const double rate = m.spec_draft_tokens ? double(m.spec_accepted_tokens) / double(m.spec_draft_tokens) : 0.0;
  const double per_step = m.spec_drafts ? double(m.spec_emitted) / double(m.spec_drafts) : 0.0;
  return fmt::format(
      "speculative {}: {} verify steps, {} of {} draft tokens accepted ({:.1f}%), {:.2f} tokens per verify step; "
      "{} of {} engine steps verified drafts; proposing took {:.3f} s",
      spec, m.spec_drafts, m.spec_accepted_tokens, m.spec_draft_tokens, 100.0 * rate, per_step, m.spec_steps, m.steps,
      m.spec_propose_seconds);
}

}  // namespace osprey::cli
