// `osprey convert`: the GEMM weights converted once to FP8 e4m3 with 128x128 block scales and
// stored, so that --precision fp8 (CPU) and the CUDA FP8 path start without converting.
#include <chrono>

#include "cli/commands.h"
#include "core/log.h"
#include "model/gpt_oss_fp8.h"

namespace osprey::cli {

void add_convert(CLI::App& app) {
  struct Args {
    std::string model, out;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("convert", "Store a checkpoint's GEMM weights as FP8 e4m3 with 128x128 block scales");
  cmd->add_option("--model", args->model, "source checkpoint directory (MXFP4 experts, BF16 dense)")->required();
  cmd->add_option("--out", args->out, "directory to write the FP8 checkpoint to")->required();
  cmd->callback([args] {
    auto t0 = std::chrono::steady_clock::now();
    GptOssWeights w = GptOssWeights::load(args->model);
    GptOssFp8Weights f = GptOssFp8Weights::convert(w);
    const uint64_t bytes = write_fp8_checkpoint(w, f, args->out);
    log_info("wrote {} ({:.2f} GiB of tensors) in {:.1f} s", args->out, double(bytes) / (1ull << 30),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  });
}

}  // namespace osprey::cli
