#include <fmt/format.h>
#include <fmt/ranges.h>
#include <chrono>
#include <functional>

#include "cli/commands.h"
#include "cli/decode_kernel_arg.h"
#include "cli/parallel_arg.h"
#include "cli/sampling_arg.h"
#include "cli/speculative_arg.h"
#include "cli/weights_arg.h"
#include "core/log.h"
#include "core/error.h"
#include "engine/cuda_runner.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/gpt_oss_cuda.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "parallel/sharded_group.h"

namespace osprey::cli {

namespace {
// KV blocks of the GPU pool for one sequence of ctx positions (both layer groups, with slack).
int64_t one_sequence_blocks(int ctx) {
  return 2 * ((ctx + GptOssCudaFp8::kBlockPositions - 1) / GptOssCudaFp8::kBlockPositions) + 4;
}

struct Args {
  std::string model, tokens, prompts, backend = "cpu", precision;
  int max_tokens = 16;
  bool ignore_eos = false;
  SamplingArg sampling;
  SpeculativeArg spec;
  WeightsArg weights;
  DecodeKernelArg decode_kernel;
  ParallelArg parallel;  // --tp/--ep: the CPU's sharded layout; 1, 1: the ordinary model
};

// --speculative: the prompts one after another through the serving engine (one sequence), whose
// steps verify the proposer's drafts; the same ids lines, and the acceptance on stderr.
void generate_speculative(const Args& a, const GptOssWeights& w, const std::vector<std::vector<int32_t>>& prompts,
                          const GenerateOptions& opt, int ctx) {
  const bool cuda = a.backend == "cuda";
  if (cuda && !a.precision.empty() && a.precision != "fp8")
    fail("--speculative runs on the engine's FP8 path with --backend cuda; --precision {} has no engine", a.precision);
  EngineConfig ec{.max_batch = 1, .max_batched_tokens = cuda ? GptOssCudaFp8::Options::kDefaultMaxRows : 512, .max_queue = 1, .max_seq_len = ctx,
                  .kv_block_size = 16, .prefix_caching = false};
  a.spec.apply(ec, w.config, a.backend);  // a draft model on the GPU goes first: the target takes what is left
  std::unique_ptr<GptOssCudaFp8> gpu;
  std::unique_ptr<GptOssCpuModel> cpu;
  std::unique_ptr<ModelRunner> runner;
  if (cuda) {
    gpu = std::make_unique<GptOssCudaFp8>(
        w, GptOssCudaFp8::Options{.slots = 1, .max_context = ctx, .max_rows = ec.max_batched_tokens, .graphs = true,
                                  .kv_blocks = one_sequence_blocks(ctx),
                                  .max_draft = ec.spec_k, .experts = a.weights.experts(w), .dense = a.weights.dense_weights(),
                                  .kv = a.weights.kv_cache_dtype(w.config)});
    runner = std::make_unique<CudaModelRunner>(*gpu);
  } else {
    cpu = std::make_unique<GptOssCpuModel>(w, cpu_precision(a.precision), a.weights.kv_cache_dtype(w.config));
    runner = std::make_unique<CpuModelRunner>(*cpu);
    ec.kv_blocks = 2 * ((ctx + ec.kv_block_size - 1) / ec.kv_block_size) + 8;
  }
  Engine engine(std::move(runner), ec);
  double seconds = 0;
  size_t generated = 0, prompt_tokens = 0;
  for (const auto& p : prompts) {
    GenerationRequest req{.prompt = p, .max_tokens = opt.max_tokens, .sampling = opt.sampling};
    if (opt.stop_at_eos) req.stop_tokens = w.config.eos_token_ids;
    if (a.spec.mode != "off") req.speculative = true;
    const auto t0 = std::chrono::steady_clock::now();
    auto h = engine.submit(req);
    std::vector<int32_t> out;
    TokenEvent ev;
    std::string error;
    while (h->next(ev)) {
      if (ev.token >= 0) out.push_back(ev.token);
      if (ev.finish == FinishReason::Error) error = ev.error;
    }
    if (!error.empty()) fail("generation failed: {}", error);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    generated += out.size(), prompt_tokens += p.size();
    fmt::print("{}\n", fmt::join(out, ","));
    std::fflush(stdout);
  }
  log_info("{} prompt tokens, generated {} tokens in {:.3f}s (prefill included)", prompt_tokens, generated, seconds);
  if (a.spec.mode != "off") log_info("{}", speculative_summary(engine.metrics(), a.spec.spec));
}
}  // namespace

void add_generate(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate token ids; prints them as one comma-separated line");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  auto* one = cmd->add_option("--tokens", args->tokens, "comma-separated prompt token ids");
  auto* many = cmd->add_option("--prompts", args->prompts,
                               "a file of prompts, one comma-separated id list per line: one output line each, in order "
                               "(the model is loaded once)");
  one->excludes(many);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  args->sampling.add(cmd, /*with_greedy=*/true);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--backend", args->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "cpu: fp32 (default), mxfp4, fp8 or bf16 (the emulations of the CUDA paths: mxfp4 of --weights "
                  "mxfp4, fp8 of --weights fp8); cuda: fp8 (default: the engine's path, experts as --weights says), "
                  "bf16 or fp32")
      ->check(CLI::IsMember({"fp32", "fp8", "bf16", "mxfp4"}));
  args->parallel.add(cmd);
  args->spec.add(cmd);
  args->weights.add(cmd);
  args->decode_kernel.add(cmd);
  cmd->callback([args] {
    args->weights.check(args->backend, args->precision);
    args->decode_kernel.check(args->backend, args->precision);
    args->parallel.check(args->backend, args->precision);
    args->spec.check();
    const bool sharded = args->parallel.sharded();
    if (sharded && args->spec.on()) fail("--tp/--ep: --speculative runs on the serving engine, which is not sharded");
    if (args->decode_kernel.persistent() && args->spec.on())
      fail("--decode-kernel persistent with --speculative: the verify steps run kernel by kernel, and the persistent "
           "kernel's sums (its own K-splits) would not give them the plain steps' logits, which speculation's "
           "unchanged outputs rest on");
    if (args->tokens.empty() == args->prompts.empty()) fail("generate: give --tokens IDS or --prompts FILE");
    std::vector<std::vector<int32_t>> prompts;
    if (!args->tokens.empty()) {
      prompts.push_back(parse_token_list(args->tokens));
    } else {
      for_each_line(args->prompts, [&](const std::string& line) { prompts.push_back(parse_token_list(line)); });
      if (prompts.empty()) fail("{}: no prompts", args->prompts);
    }
    GenerateOptions opt;
    opt.max_tokens = args->max_tokens;
    opt.sampling = args->sampling.checked();
    opt.stop_at_eos = !args->ignore_eos;
    GptOssWeights w = GptOssWeights::load(args->model);
    size_t longest = 0;
    for (auto& p : prompts) longest = std::max(longest, p.size());
    const int ctx = int(longest) + opt.max_tokens + 1;
    if (args->spec.on()) {
      generate_speculative(*args, w, prompts, opt, ctx);
      return;
    }
    // One generator per backend; each prompt starts from an empty cache.
    std::unique_ptr<GptOssCudaFp8> fp8_model;
    std::unique_ptr<GptOssCudaModel> ref_model;
    std::unique_ptr<GptOssCpuModel> cpu_model;
    std::unique_ptr<ShardedCpuGroup> sharded_model;
    std::function<std::vector<int32_t>(const std::vector<int32_t>&, GenerateStats*)> run;
    if (args->backend == "cuda") {
      if (args->precision.empty() || args->precision == "fp8") {
        GptOssCudaFp8::Options mo{.slots = 1, .max_context = ctx, .graphs = true, .kv_blocks = one_sequence_blocks(ctx),
                                  .experts = args->weights.experts(w), .dense = args->weights.dense_weights(),
                                  .kv = args->weights.kv_cache_dtype(w.config)};
        args->decode_kernel.apply(mo);
        fp8_model = std::make_unique<GptOssCudaFp8>(w, mo);
        args->decode_kernel.require(*fp8_model, {1}, "generate");
        run = [&](const std::vector<int32_t>& p, GenerateStats* st) { return generate_cuda(*fp8_model, p, opt, st); };
      } else {
        if (!opt.sampling.greedy()) fail("--backend cuda --precision {} generates greedily; pass --greedy", args->precision);
        ref_model = std::make_unique<GptOssCudaModel>(
            w, ctx, args->precision == "fp32" ? GptOssCudaModel::Precision::FP32 : GptOssCudaModel::Precision::BF16);
        run = [&](const std::vector<int32_t>& p, GenerateStats* st) { return generate_greedy_cuda(*ref_model, p, opt, st); };
      }
    } else if (sharded) {
      sharded_model = std::make_unique<ShardedCpuGroup>(w, args->parallel.layout());
      log_info("sharded: {} ({} ranks as threads)", sharded_model->layout().name(), sharded_model->layout().world());
      run = [&](const std::vector<int32_t>& p, GenerateStats* st) {
        sharded_model->reset();
        return generate_loop(
            w.config, p, opt,
            [&](std::span<const int32_t> t) { return sharded_model->forward(t, /*all_logits=*/false); }, st);
      };
    } else {
      cpu_model = std::make_unique<GptOssCpuModel>(w, cpu_precision(args->precision), args->weights.kv_cache_dtype(w.config));
      run = [&](const std::vector<int32_t>& p, GenerateStats* st) { return generate(*cpu_model, p, opt, st); };
    }
    GenerateStats total;
    for (const auto& p : prompts) {
      GenerateStats st;
      std::vector<int32_t> out = run(p, &st);
      fmt::print("{}\n", fmt::join(out, ","));
      std::fflush(stdout);
      total.prompt_tokens += st.prompt_tokens, total.generated_tokens += st.generated_tokens;
      total.prefill_seconds += st.prefill_seconds, total.decode_seconds += st.decode_seconds;
    }
    log_info("prefill {} tokens in {:.3f}s, decoded {} tokens in {:.3f}s", total.prompt_tokens, total.prefill_seconds,
             total.generated_tokens, total.decode_seconds);
  });
}

}  // namespace osprey::cli
