// Arguments of `osprey bench --backend cuda` (cmd_bench_cuda.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "cli/decode_kernel_arg.h"
#include "cli/weights_arg.h"

namespace osprey::cli {

struct BenchCudaArgs {
  std::string model, json;
  std::string prefill_lens = "1024,8192,32768", batches = "1,8,32,64,128", contexts = "8192,32768";
  int steps = 32, prefill_reps = 2, prefill_chunk = 8192;  // the model's default max_rows
  // KV blocks of the pool (0: what the GPU's memory leaves, the default). A small pool keeps a
  // profiler's kernel replays cheap: ncu saves and restores device memory on every pass.
  int64_t kv_blocks = 0;
  uint64_t seed = 1;
  WeightsArg weights;
  bool graphs = true;
  // Speculative verify steps: draft lengths and batch sizes to time (empty: none).
  std::string verify_ks, verify_batches = "1,8,32";
  // Prefill attention alone (one full and one sliding layer of the model's shape): prompt lengths
  // to time (empty: none).
  std::string attention_lens;
  // The MoE's two expert GEMMs of one layer alone, MXFP4 and FP8 experts side by side: decode
  // batch sizes to time (empty: none). Timed before the model loads (the KV pool takes the rest).
  std::string moe_batches;
  // Decode steps of up to 8 rows kernel by kernel or as the persistent kernel (--decode-kernel,
  // --persistent-blocks); a file for one persistent step's per-SM timeline (empty: none).
  DecodeKernelArg decode_kernel;
  std::string timeline;
  // Decode steps sample on the GPU with these (draws from a generator seeded with `seed`);
  // temperature 0 (the default) takes the argmax.
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  double usd_per_gpu_hour = 3.0, fp8_tflops = 1420.0;  // the FP8 ceiling measured on the H200 (cuBLASLt)
  double bf16_tflops = 778.0;                          // the BF16 dense ceiling of the H200
};

void run_bench_cuda(const BenchCudaArgs& a);

}  // namespace osprey::cli
