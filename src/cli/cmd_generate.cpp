#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>

#include "cli/commands.h"
#include "core/log.h"
#include "core/error.h"
#include "engine/generate.h"
#include "model/gpt_oss_cuda.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey::cli {

void add_generate(CLI::App& app) {
  struct Args {
    std::string model, tokens, prompts, backend = "cpu", precision;
    int max_tokens = 16;
    bool greedy = false, ignore_eos = false;
    SamplingParams sampling;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate token ids; prints them as one comma-separated line");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  auto* one = cmd->add_option("--tokens", args->tokens, "comma-separated prompt token ids");
  auto* many = cmd->add_option("--prompts", args->prompts,
                               "a file of prompts, one comma-separated id list per line: one output line each, in order "
                               "(the model is loaded once)");
  one->excludes(many);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--greedy", args->greedy, "argmax decoding (same as --temperature 0)");
  cmd->add_option("--temperature", args->sampling.temperature, "sampling temperature");
  cmd->add_option("--top-p", args->sampling.top_p, "nucleus sampling mass");
  cmd->add_option("--top-k", args->sampling.top_k, "keep the k most likely tokens (0: all)");
  cmd->add_option("--seed", args->sampling.seed, "sampling seed");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--backend", args->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "cpu: fp32 (default), fp8 or bf16 (the emulations of the CUDA paths); cuda: fp8 (default), bf16 or fp32")
      ->check(CLI::IsMember({"fp32", "fp8", "bf16"}));
  cmd->callback([args] {
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
    opt.sampling = args->sampling;
    if (args->greedy) opt.sampling.temperature = 0;
    opt.sampling.validate();
    opt.stop_at_eos = !args->ignore_eos;
    GptOssWeights w = GptOssWeights::load(args->model);
    size_t longest = 0;
    for (auto& p : prompts) longest = std::max(longest, p.size());
    const int ctx = int(longest) + opt.max_tokens + 1;
    // One generator per backend; each prompt starts from an empty cache.
    std::unique_ptr<GptOssCudaFp8> fp8_model;
    std::unique_ptr<GptOssCudaModel> ref_model;
    std::unique_ptr<GptOssCpuModel> cpu_model;
    std::function<std::vector<int32_t>(const std::vector<int32_t>&, GenerateStats*)> run;
    if (args->backend == "cuda") {
      if (args->precision.empty() || args->precision == "fp8") {
        fp8_model = std::make_unique<GptOssCudaFp8>(
            w, GptOssCudaFp8::Options{.slots = 1, .max_context = ctx, .max_rows = 2048, .graphs = true,
                                      .kv_blocks = 2 * ((ctx + GptOssCudaFp8::kBlockPositions - 1) / GptOssCudaFp8::kBlockPositions) + 4});
        run = [&](const std::vector<int32_t>& p, GenerateStats* st) { return generate_cuda(*fp8_model, p, opt, st); };
      } else {
        if (!opt.sampling.greedy()) fail("--backend cuda --precision {} generates greedily; pass --greedy", args->precision);
        ref_model = std::make_unique<GptOssCudaModel>(
            w, ctx, args->precision == "fp32" ? GptOssCudaModel::Precision::FP32 : GptOssCudaModel::Precision::BF16);
        run = [&](const std::vector<int32_t>& p, GenerateStats* st) { return generate_greedy_cuda(*ref_model, p, opt, st); };
      }
    } else {
      cpu_model = std::make_unique<GptOssCpuModel>(w, cpu_precision(args->precision));
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
