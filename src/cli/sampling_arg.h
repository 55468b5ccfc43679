// --greedy, --temperature, --top-p, --top-k and --seed: how generate and chat choose tokens. The
// options greedy decoding has no use for are refused, not dropped.
#pragma once
#include <CLI/CLI.hpp>

#include "core/error.h"
#include "engine/sampler.h"

namespace osprey::cli {

struct SamplingArg {
  SamplingParams params;  // as given (SamplingParams' defaults otherwise)
  bool greedy = false;
  CLI::Option *greedy_opt = nullptr, *temperature_opt = nullptr, *top_p_opt = nullptr, *top_k_opt = nullptr,
              *seed_opt = nullptr;

  // `with_greedy`: also the --greedy flag (generate's).
  void add(CLI::App* cmd, bool with_greedy) {
    if (with_greedy) greedy_opt = cmd->add_flag("--greedy", greedy, "argmax decoding (same as --temperature 0)");
    temperature_opt = cmd->add_option("--temperature", params.temperature, "sampling temperature (0: argmax decoding)");
    top_p_opt = cmd->add_option("--top-p", params.top_p, "nucleus sampling mass, (0, 1]");
    top_k_opt = cmd->add_option("--top-k", params.top_k, "keep the k most likely tokens (0: all)");
    seed_opt = cmd->add_option("--seed", params.seed, "sampling seed");
  }

  // The parameters to decode with, before anything loads: refuses --greedy beside --temperature,
  // --top-p, --top-k and --seed where decoding is greedy (each would change nothing), and values out
  // of range.
  SamplingParams checked() const {
    if (greedy && temperature_opt->count())
      fail("--greedy and --temperature both choose the temperature; give one (--greedy is --temperature 0)");
    SamplingParams p = params;
    if (greedy) p.temperature = 0;
    if (p.greedy())
      for (const CLI::Option* o : {top_p_opt, top_k_opt, seed_opt})
        if (o->count())
          fail("{} has no effect on argmax decoding ({}); drop it, or sample with a --temperature above 0",
               o->get_name(), greedy ? "--greedy" : "--temperature 0");
    p.validate();
    return p;
  }
};

}  // namespace osprey::cli
