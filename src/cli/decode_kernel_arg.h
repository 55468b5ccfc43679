// --decode-kernel per-op|persistent and --persistent-blocks 1|2: how the GPU engine runs decode
// steps of up to 8 rows (kernel by kernel, or as the persistent decode kernel), shared by bench and
// generate.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey::cli {

struct DecodeKernelArg {
  std::string kernel = "per-op";
  // The persistent grid's blocks per SM: 2 by default, measured faster than 1 at batches 1 and 8
  // in every call so far (docs/PERF.md, sessions 31 and 32: 3.61-3.77 against 3.96-4.19 ms a 20b
  // step at batch 1, H100).
  int blocks = 2;
  CLI::Option* blocks_opt = nullptr;
  void add(CLI::App* cmd) {
    cmd->add_option("--decode-kernel", kernel,
                    "cuda: decode steps of up to 8 rows kernel by kernel (per-op, the default) or as one persistent "
                    "kernel (where the model allows it: MXFP4 experts, FP8 dense layers, a BF16 KV cache, head_dim 64)")
        ->check(CLI::IsMember({"persistent", "per-op"}));
    blocks_opt = cmd->add_option("--persistent-blocks", blocks, "cuda: the persistent kernel's blocks per SM (1 or 2, default 2)")
                     ->check(CLI::Range(1, 2));
  }
  bool persistent() const { return kernel == "persistent"; }
  // Refuses, before anything loads, what has no engine decode step to apply to.
  void check(const std::string& backend, const std::string& precision) const {
    if (!persistent() && blocks_opt && blocks_opt->count() > 0)
      fail("--persistent-blocks applies to the persistent decode kernel (--decode-kernel persistent)");
    if (persistent() && (backend != "cuda" || (!precision.empty() && precision != "fp8")))
      fail("--decode-kernel persistent runs the GPU engine's decode steps (--backend cuda, --precision fp8); this run "
           "is --backend {}{}",
           backend, precision.empty() ? std::string() : " --precision " + precision);
  }
  void apply(GptOssCudaFp8::Options& o) const {
    o.persistent_decode = persistent();
    o.persistent_blocks_per_sm = blocks;
  }
  // After the model loads: refuses a persistent kernel that would run none of the decode steps of
  // these batch sizes (the model's shapes are not the kernel's), rather than run the per-op path
  // under its name.
  void require(const GptOssCudaFp8& model, const std::vector<int32_t>& batches, const char* who) const {
    if (!persistent()) return;
    for (int32_t b : batches)
      if (model.persistent_decode(b)) return;
    fail("{}: --decode-kernel persistent: no decode step runs as the persistent kernel (it takes batches of up to 8 "
         "rows, MXFP4 experts, FP8 dense layers, a BF16 KV cache, head_dim 64, a KV head's queries in whole "
         "128-column blocks, and batches whose per-op attention runs 8 warps a KV split)",
         who);
  }
};

}  // namespace osprey::cli
