#include <algorithm>
#include <filesystem>
#include <system_error>

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
    std::string model, tokens, tokens_file, out, backend = "cpu", precision;
    bool no_cublaslt = false;
    WeightsArg weights;
    ParallelArg parallel;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("logits", "Write the logits at every position as a float32 .npy [T, vocab]");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  auto* one = cmd->add_option("--tokens", args->tokens, "comma-separated token ids");
  auto* many = cmd->add_option("--tokens-file", args->tokens_file,
                               "a file of sequences, one comma-separated id list per line, each run from an empty "
                               "cache (the model is loaded once): --out is then a directory that receives 0.npy, "
                               "1.npy, ... in line order");
  one->excludes(many);
  cmd->add_option("--out", args->out, "output .npy path (with --tokens-file: a directory)")->required();
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
    std::vector<std::vector<int32_t>> seqs;
    if (!args->tokens.empty()) seqs.push_back(parse_token_list(args->tokens));
    else if (!args->tokens_file.empty())
      for_each_line(args->tokens_file, [&](const std::string& line) { seqs.push_back(parse_token_list(line)); });
    else
      fail("logits: --tokens or --tokens-file is required");
    if (seqs.empty()) fail("logits: {} holds no sequence", args->tokens_file);
    for (const auto& t : seqs)
      if (t.empty()) fail("logits: an empty sequence has no logits");
    args->weights.check(args->backend, args->precision);
    args->parallel.check(args->backend, args->precision);
    const std::string prec = args->precision.empty() ? (args->backend == "cuda" ? "fp8" : "fp32") : args->precision;
    if (args->no_cublaslt && !(args->backend == "cuda" && prec == "fp8"))
      fail("--no-cublaslt applies to the GPU's fp8 path (--backend cuda, --precision fp8)");
    const bool to_dir = !args->tokens_file.empty();
    if (to_dir) {
      std::error_code ec;
      std::filesystem::create_directories(args->out, ec);
      if (ec || !std::filesystem::is_directory(args->out))
        fail("logits: cannot make the output directory {}: {}", args->out, ec ? ec.message() : "not a directory");
    }
    GptOssWeights w = GptOssWeights::load(args->model);
    int longest = 0;
    for (const auto& t : seqs) longest = std::max(longest, int(t.size()));
    // Each sequence from an empty cache, in order; its logits [T][vocab] written as it finishes.
    auto write = [&](size_t i, const std::vector<float>& logits) {
      const std::string path = to_dir ? (std::filesystem::path(args->out) / (std::to_string(i) + ".npy")).string() : args->out;
      write_npy_f32(path, logits.data(), {int64_t(seqs[i].size()), int64_t(w.config.vocab)});
    };
    if (args->backend == "cuda" && prec == "fp8") {
      GptOssCudaFp8 model(w, {.slots = 1, .max_context = longest, .max_rows = 2048, .graphs = false,
                              .kv_blocks = 2 * ((longest + GptOssCudaFp8::kBlockPositions - 1) / GptOssCudaFp8::kBlockPositions) + 4,
                              .cublaslt = !args->no_cublaslt, .experts = args->weights.experts(w), .dense = args->weights.dense_weights(),
                              .kv = args->weights.kv_cache_dtype(w.config)});
      CudaSlots slots(model);
      for (size_t i = 0; i < seqs.size(); ++i) {
        write(i, slots.prefill_logits(0, seqs[i], /*all=*/true));
        slots.release(0);
      }
    } else if (args->backend == "cuda") {
      GptOssCudaModel model(w, longest, prec == "fp32" ? GptOssCudaModel::Precision::FP32
                                                       : GptOssCudaModel::Precision::BF16);
      for (size_t i = 0; i < seqs.size(); ++i) {
        model.reset();
        write(i, model.forward(seqs[i], /*all_logits=*/true));
      }
    } else if (args->parallel.sharded()) {
      ShardedCpuGroup model(w, args->parallel.layout());
      for (size_t i = 0; i < seqs.size(); ++i) {
        model.reset();
        write(i, model.forward(seqs[i], /*all_logits=*/true));
      }
    } else {
      GptOssCpuModel model(w, cpu_precision(prec), args->weights.kv_cache_dtype(w.config));
      for (size_t i = 0; i < seqs.size(); ++i) {
        KvCache cache = model.new_cache();
        write(i, model.forward(seqs[i], cache, /*all_logits=*/true));
      }
    }
  });
}

}  // namespace osprey::cli
