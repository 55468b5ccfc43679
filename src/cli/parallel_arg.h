// --tp N --ep M: the CPU's tensor- and expert-parallel layout (ranks as threads of this process,
// parallel/sharded_group.h), shared by generate and logits.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/error.h"
#include "parallel/sharding.h"

namespace osprey::cli {

struct ParallelArg {
  int tp = 1, ep = 1;
  void add(CLI::App* cmd) {
    cmd->add_option("--tp", tp,
                    "cpu: tensor-parallel ranks (heads, dense layers, the experts' intermediate), run as threads of "
                    "this process with fp32 weights")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--ep", ep, "cpu: expert-parallel ranks (they must divide the tp ranks)")->check(CLI::PositiveNumber);
  }
  bool sharded() const { return tp != 1 || ep != 1; }
  ParallelLayout layout() const { return {.tp = tp, .dp = 1, .ep = ep}; }
  // Refuses, before anything loads, a layout where the run has no sharded path: the GPU (its
  // layouts are not built) and the CPU's emulated precisions (the sharded forward is fp32).
  void check(const std::string& backend, const std::string& precision) const {
    if (!sharded()) return;
    if (backend != "cpu")
      fail("--tp/--ep: the GPU layouts (NCCL, one process per GPU) are not built yet; --backend cpu runs them as "
           "threads of one process");
    if (!precision.empty() && precision != "fp32")
      fail("--tp/--ep: the sharded CPU forward is fp32; --precision {} has no sharded path", precision);
  }
};

}  // namespace osprey::cli
