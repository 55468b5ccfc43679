#include "cli/commands.h"
#include "core/npy.h"
#include "model/gpt_oss_cuda.h"
#include "model/gpt_oss_forward.h"

namespace osprey::cli {

void add_logits(CLI::App& app) {
  struct Args {
    std::string model, tokens, out, backend = "cpu", precision = "bf16";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("logits", "Write the logits at every position as a float32 .npy [T, vocab]");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--tokens", args->tokens, "comma-separated token ids")->required();
  cmd->add_option("--out", args->out, "output .npy path")->required();
  cmd->add_option("--backend", args->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision, "cuda: bf16 (default) or fp32 (a check of the math)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->callback([args] {
    std::vector<int32_t> tokens = parse_token_list(args->tokens);
    GptOssWeights w = GptOssWeights::load(args->model);
    std::vector<float> logits;
    if (args->backend == "cuda") {
      GptOssCudaModel model(w, int(tokens.size()), args->precision == "fp32" ? GptOssCudaModel::Precision::FP32
                                                                             : GptOssCudaModel::Precision::BF16);
      logits = model.forward(tokens, /*all_logits=*/true);
    } else {
      GptOssCpuModel model(w);
      KvCache cache = model.new_cache();
      logits = model.forward(tokens, cache, /*all_logits=*/true);
    }
    write_npy_f32(args->out, logits.data(), {int64_t(tokens.size()), int64_t(w.config.vocab)});
  });
}

}  // namespace osprey::cli
