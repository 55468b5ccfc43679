#include "cli/commands.h"
#include "cli/parallel_arg.h"
#include "cli/weights_arg.h"
#include "core/error.h"
#include "core/npy.h"
#include "model/gpt_oss_cuda.h"
#include "engine/cuda_runner.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "model/gpt_oss_forward.h"
#include "parallel/sharded_group.h"

namespace osprey::cli {

void add_logits(CLI::App& app) {
  struct Args {
    std::string model, tokens, out, backend = "cpu", precision;
    bool no_cublaslt = false;
    WeightsArg weights;
    ParallelArg parallel;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("logits", "Write the logits at every position as a float32 .npy [T, vocab]");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--tokens", args->tokens, "comma-separated token ids")->required();
  cmd->add_option("--out", args->out, "output .npy path")->required();
  cmd->add_option("--backend", args->backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", args->precision,
                  "cpu: fp32 (default: weights as stored, fp32 math), mxfp4, fp8 or bf16 (the emulations of the CUDA "
                  "paths: mxfp4 of the engine's default, --weights mxfp4; fp8 of --weights fp8; bf16); "
                  "cuda: fp8 (default: the engine's path, experts as --weights says), bf16, or fp32 (a check of the math)")
      ->check(CLI::IsMember({"fp32", "fp8", "bf16", "mxfp4"}));
  args->weights.add(cmd);
  args->parallel.add(cmd);
  cmd->add_flag("--no-cublaslt", args->no_cublaslt,
                "cuda fp8: the skinny kernel for every GEMM (exact fp32 sums; the cross-check against --backend cpu --precision fp8)");
  cmd->callback([args] {
    std::vector<int32_t> tokens = parse_token_list(args->tokens);
    args->weights.check(args->backend, args->precision);
    args->parallel.check(args->backend, args->precision);
    const std::string prec = args->precision.empty() ? (args->backend == "cuda" ? "fp8" : "fp32") : args->precision;
    if (args->no_cublaslt && !(args->backend == "cuda" && prec == "fp8"))
      fail("--no-cublaslt applies to the GPU's fp8 path (--backend cuda, --precision fp8)");
    GptOssWeights w = GptOssWeights::load(args->model);
    std::vector<float> logits;
    if (args->backend == "cuda" && prec == "fp8") {
      const int ctx = int(tokens.size());
      GptOssCudaFp8 model(w, {.slots = 1, .max_context = ctx, .max_rows = 2048, .graphs = false,
                              .kv_blocks = 2 * ((ctx + GptOssCudaFp8::kBlockPositions - 1) / GptOssCudaFp8::kBlockPositions) + 4,
                              .cublaslt = !args->no_cublaslt, .experts = args->weights.experts(w), .dense = args->weights.dense_weights(),
                              .kv = args->weights.kv_cache_dtype()});
      CudaSlots seqs(model);
      logits = seqs.prefill_logits(0, tokens, /*all=*/true);
    } else if (args->backend == "cuda") {
      GptOssCudaModel model(w, int(tokens.size()), prec == "fp32" ? GptOssCudaModel::Precision::FP32
                                                                  : GptOssCudaModel::Precision::BF16);
      logits = model.forward(tokens, /*all_logits=*/true);
    } else if (args->parallel.sharded()) {
      ShardedCpuGroup model(w, args->parallel.layout());
      logits = model.forward(tokens, /*all_logits=*/true);
    } else {
      GptOssCpuModel model(w, cpu_precision(prec), args->weights.kv_cache_dtype());
      KvCache cache = model.new_cache();
      logits = model.forward(tokens, cache, /*all_logits=*/true);
    }
    write_npy_f32(args->out, logits.data(), {int64_t(tokens.size()), int64_t(w.config.vocab)});
  });
}

}  // namespace osprey::cli
