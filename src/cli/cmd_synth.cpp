#include <fmt/format.h>

#include "cli/commands.h"
#include "core/log.h"
#include "synth/synth.h"

namespace osprey::cli {

void add_synth(CLI::App& app) {
  struct Args {
    std::string preset, out;
    uint64_t seed = 0;
    float branch_scale = 1.0f;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("synth", "Write a synthetic gpt-oss checkpoint in the published HF layout");
  cmd->add_option("--preset", args->preset, "tiny | 20b | 120b | parity-a | parity-b")->required();
  cmd->add_option("--seed", args->seed, "random seed (same seed, same bytes)");
  cmd->add_option("--out", args->out, "output directory")->required();
  cmd->add_option("--branch-scale", args->branch_scale,
                  "scale of each layer's attention and MoE outputs against the residual stream: 1 (default) "
                  "stresses every path, 0.25 behaves like a trained model under rounding (the expert down "
                  "projection's MXFP4 scale takes the nearest power of two)")
      ->check(CLI::Range(1.0f / 64, 4.0f));
  cmd->add_flag("--quiet", args->quiet, "no progress output");
  cmd->callback([args] {
    const SynthPreset& p = synth_preset(args->preset);
    uint64_t bytes = synth_checkpoint(p, args->out, {.seed = args->seed, .progress = !args->quiet, .branch_scale = args->branch_scale});
    log_info("wrote {} ({:.2f} GiB of tensors) to {}", p.name, bytes / double(1ull << 30), args->out);
  });
}

}  // namespace osprey::cli
