#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/gpt_oss_weights.h"

namespace osprey::cli {

void add_inspect(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("inspect", "Validate a checkpoint and print its configuration as JSON");
  cmd->add_option("--model", *model, "checkpoint directory")->required();
  cmd->callback([model] {
    GptOssWeights w = GptOssWeights::load(*model);
    nlohmann::json j = w.config.to_hf_json();
    j["osprey_layout"] = w.layout == GptOssWeights::Layout::Original ? "original" : "huggingface";
    j["osprey_tensors"] = w.store.size();
    fmt::print("{}\n", j.dump(2));
  });
}

}  // namespace osprey::cli
