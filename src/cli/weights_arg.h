// --weights auto|mxfp4|fp8|bf16, --dense fp8|bf16 and --kv-cache-dtype bf16|fp16|fp8: how the experts'
// and the dense layers' weights and the KV cache live on the GPU (the engine's CUDA path), shared
// by serve, generate, logits and bench.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "model/gpt_oss_cost.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "model/gpt_oss_weights.h"

namespace osprey::cli {

struct WeightsArg {
  std::string value;          // empty: auto
  std::string dense = "fp8";  // --dense
  std::string kv_cache = "auto";  // --kv-cache-dtype
  CLI::Option* dense_opt = nullptr;  // given or not (its default, fp8, is also a value)
  void add(CLI::App* cmd) {
    cmd->add_option("--kv-cache-dtype", kv_cache,
                    "cuda: the KV cache's values: bf16, fp16 (the same bytes, three more mantissa bits, clipped at "
                    "+-65504; the tensor-core attention then takes Q and P as FP16 too: the fidelity of the fp32-KV "
                    "reference path, about 1% slower; head_dim 64), fp8 (E4M3 with a power-of-two scale per position "
                    "and KV head: half the bytes a decode step reads, twice the positions; head_dim 64) or auto (the "
                    "default: fp16 with --dense bf16 on head_dim 64, whose BF16-path fidelity it keeps, else bf16); "
                    "with --backend cpu --precision fp8|mxfp4, the emulation of that cache (auto: bf16)")
        ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp8"}));
    dense_opt = cmd->add_option("--dense", dense,
                    "cuda: the dense layers (attention, unembedding) on the GPU: fp8 (128x128 blocks, FP8 activations, "
                    "the default: half the bytes) or bf16 (as the checkpoint ships them, BF16 activations: the BF16 "
                    "path's fidelity)")
        ->check(CLI::IsMember({"fp8", "bf16"}));
    cmd->add_option("--weights", value,
                    "cuda: the experts on the GPU: mxfp4 (as the checkpoint ships them, 4.25 bits a weight, exact, "
                    "BF16 activations; with --dense fp8 long prompt chunks run them W4A8, the weights converted "
                    "exactly to FP8 for the chunk and the activations FP8; the default), fp8 (converted to FP8 "
                    "128x128 blocks at load, FP8 activations: 1.7x the bytes), or auto (mxfp4, or fp8 for a "
                    "checkpoint `osprey convert` wrote); the dense layers are as --dense says")
        ->check(CLI::IsMember({"auto", "mxfp4", "fp8", "bf16"}));
  }
  // Refuses, before anything loads, --weights where the run has no engine path to apply it to (the
  // CPU, the CUDA bf16 and fp32 reference paths) or a format that is not built, --kv-cache-dtype and
  // --dense given where they would change nothing (auto excepted), and --precision mxfp4 on the GPU
  // (the engine's path is fp8 there).
  void check(const std::string& backend, const std::string& precision) const {
    const bool gpu_engine = backend == "cuda" && (precision.empty() || precision == "fp8");
    const bool emulation = backend == "cpu" && (precision == "fp8" || precision == "mxfp4");
    const std::string run = "--backend " + backend + (precision.empty() ? std::string() : " --precision " + precision);
    if (kv_cache != "auto" && !gpu_engine && !emulation)
      fail("--kv-cache-dtype {} chooses the engine's GPU KV cache (--backend cuda, --precision fp8) or its CPU "
           "emulation (--backend cpu --precision fp8 or mxfp4, on generate, logits and bench); this run is {}, "
           "whose cache it would not change",
           kv_cache, run);
    const bool dense_chosen = dense != "fp8" || (dense_opt && dense_opt->count());
    if (dense_chosen && !gpu_engine && !(emulation && dense == "fp8"))
      fail("--dense {} chooses the engine's GPU path (--backend cuda, --precision fp8){}; this run is {}", dense,
           dense == "fp8" ? std::string(" or the CPU's emulation of it (--precision fp8 or mxfp4)") : std::string(), run);
    if (backend == "cuda" && precision == "mxfp4")
      fail("--precision mxfp4 names the CPU emulation; on the GPU the engine's path is --precision fp8 (its experts "
           "as --weights says, mxfp4 by default)");
    if (value.empty() || value == "auto") return;
    if (backend != "cuda")
      fail("--weights {} chooses the GPU's expert format; with --backend {} use --precision (mxfp4 or fp8 emulate "
           "the GPU paths)",
           value, backend);
    if (!precision.empty() && precision != "fp8")
      fail("--weights {} applies to the engine's path (--precision fp8); --precision {} runs the CUDA reference path, "
           "whose experts are BF16",
           value, precision);
    if (value == "bf16")
      fail("--weights bf16 is not built: BF16 experts take 3.8x the bytes of MXFP4 and hold the same values; use "
           "mxfp4 (exact) or fp8");
  }
  // The cache for this checkpoint. auto: FP16 where the run keeps BF16 activations (--dense bf16),
  // which measures the BF16 reference path's mean KL with it and twice that with BF16 (docs/FIDELITY.md);
  // BF16 elsewhere: with FP8 dense layers the cache's rounding is lost in theirs, and FP16 costs about
  // 1% of the step (docs/PERF.md). The FP16 kernels are the tensor-core ones, head_dim 64.
  KvDtype kv_cache_dtype(const GptOssConfig& cfg) const {
    if (kv_cache == "auto") return dense == "bf16" && cfg.head_dim == 64 ? KvDtype::Fp16 : KvDtype::Bf16;
    return kv_cache == "fp8" ? KvDtype::Fp8 : kv_cache == "fp16" ? KvDtype::Fp16 : KvDtype::Bf16;
  }
  GptOssCudaFp8::DenseWeights dense_weights() const {
    return dense == "bf16" ? GptOssCudaFp8::DenseWeights::Bf16 : GptOssCudaFp8::DenseWeights::Fp8;
  }
  // The engine's choice for this checkpoint (check() has refused what cannot run).
  GptOssCudaFp8::ExpertWeights experts(const GptOssWeights& w) const {
    if (value == "fp8") return GptOssCudaFp8::ExpertWeights::Fp8;
    if (value == "mxfp4") return GptOssCudaFp8::ExpertWeights::Mxfp4;
    // auto: the experts as shipped (on the H200 the 20b decodes faster with them at every batch,
    // in 0.59x the bytes, and prefills at 0.9x the FP8 experts' speed: docs/PERF.md); a converted
    // checkpoint has no MXFP4.
    if (w.fp8) return GptOssCudaFp8::ExpertWeights::Fp8;
    return GptOssCudaFp8::ExpertWeights::Mxfp4;
  }
};

}  // namespace osprey::cli
