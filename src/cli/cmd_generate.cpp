#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "core/log.h"
#include "core/error.h"
#include "engine/generate.h"
#include "model/gpt_oss_cuda.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey::cli {

void add_generate(CLI::App& app) {
  struct Args {
    std::string model, tokens, backend = "cpu", precision;
    int max_tokens = 16;
    bool greedy = false, ignore_eos = false;
    SamplingParams sampling;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "Generate token ids; prints them as one comma-separated line");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--tokens", args->tokens, "comma-separated prompt token ids")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--greedy", args->greedy, "argmax decoding (same as --temperature 0)");
  cmd->add_option("--temperature", args->sampling.temperature, "sampling temperature");
  cmd->add_option("--top-p", args->sampling.top_p, "nucleus sampling mass");
  cmd->add_option("--top-k", args->sampling.top_k, "keep the k most likely tokens (0: all)");
  cmd->add_option("--seed", args->sampling.seed, "sampling seed");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--backend", args->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "cpu: fp32 (default), fp8 or bf16 (the emulations of the CUDA paths); cuda: fp8 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "fp8", "bf16"}));
  cmd->callback([args] {
    std::vector<int32_t> prompt = parse_token_list(args->tokens);
    GenerateOptions opt;
    opt.max_tokens = args->max_tokens;
    opt.sampling = args->sampling;
    if (args->greedy) opt.sampling.temperature = 0;
    opt.sampling.validate();
    opt.stop_at_eos = !args->ignore_eos;
    GptOssWeights w = GptOssWeights::load(args->model);
    GenerateStats st;
    std::vector<int32_t> out;
    if (args->backend == "cuda") {
      const int ctx = int(prompt.size()) + opt.max_tokens + 1;
      if (args->precision.empty() || args->precision == "fp8") {
        GptOssCudaFp8 model(w, {.slots = 1, .max_context = ctx, .prefill_chunk = 2048, .graphs = true});
        out = generate_cuda(model, prompt, opt, &st);
      } else if (args->precision == "bf16") {
        if (!opt.sampling.greedy()) fail("--backend cuda --precision bf16 generates greedily; pass --greedy");
        GptOssCudaModel model(w, ctx);
        out = generate_greedy_cuda(model, prompt, opt, &st);
      } else {
        fail("--backend cuda generates with --precision fp8 or bf16");
      }
    } else {
      GptOssCpuModel model(w, cpu_precision(args->precision));
      out = generate(model, prompt, opt, &st);
    }
    fmt::print("{}\n", fmt::join(out, ","));
    log_info("prefill {} tokens in {:.3f}s, decoded {} tokens in {:.3f}s", st.prompt_tokens, st.prefill_seconds,
             st.generated_tokens, st.decode_seconds);
  });
}

}  // namespace osprey::cli
