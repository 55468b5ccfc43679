// --speculative ngram:K | draft:DIR:K and --speculative-mode auto|always|off, shared by generate and
// serve: the engine's proposer (a draft model loaded on the target's backend) and settings.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine.h"

namespace osprey::cli {

struct SpeculativeArg {
  std::string spec, mode = "auto";
  CLI::Option* mode_opt = nullptr;
  void add(CLI::App* cmd);
  bool on() const { return !spec.empty(); }
  // Refuses --speculative-mode without --speculative (it would choose nothing).
  void check() const;
  // Sets ec's proposer, spec_k and spec_adaptive for a target model of config `target` on
  // `backend` ("cpu" | "cuda"); a draft checkpoint must share the target's vocabulary.
  void apply(EngineConfig& ec, const GptOssConfig& target, const std::string& backend) const;
};

// One line for stderr: drafts verified, accepted, and tokens per verify step.
std::string speculative_summary(const EngineMetrics& m, const std::string& spec);

}  // namespace osprey::cli
