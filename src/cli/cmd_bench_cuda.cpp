// `osprey bench --backend cuda`: the FP8 Hopper path on one GPU. Prefill latency per prompt
// length; decode tokens/s per (context, batch) with each slot's KV holding `context` positions of
// random keys and values (a decode step reads the same bytes as after a real prefill); every
// figure against its ceiling (decode: measured device copy bandwidth; prefill: FP8 tensor rate)
// and as dollars per million tokens at a nominal price per GPU-hour.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench_cuda.h"
#include "cli/commands.h"
#include "engine/cuda_runner.h"
#include "core/error.h"
#include "core/log.h"
#include "model/attention_timing.h"
#include "model/moe_timing.h"
#include "model/gpt_oss_cost.h"
#include "model/gpt_oss_cuda_fp8.h"

namespace osprey::cli {

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// One persistent step's timeline as JSON: the grid, the phases' names and the stamps
// [phases][grid][sm, start, first wait returned (null: no work), end (before the arrival)] in ns,
// relative to the step's earliest start.
void write_timeline(const std::string& path, const GptOssCudaFp8::Timeline& t, int context, int batch) {
  uint64_t t0 = UINT64_MAX;
  for (size_t i = 0; i < t.stamps.size(); i += 4) t0 = std::min(t0, t.stamps[i + 1]);
  nlohmann::json stamps = nlohmann::json::array();
  for (size_t i = 0; i < t.stamps.size(); i += 4)
    stamps.push_back({t.stamps[i], t.stamps[i + 1] - t0,
                      t.stamps[i + 2] ? nlohmann::json(t.stamps[i + 2] - t0) : nlohmann::json(nullptr),
                      t.stamps[i + 3] - t0});
  const nlohmann::json j = {{"context", context}, {"batch", batch}, {"grid", t.grid}, {"phases", t.phases},
                            {"stamps", stamps}};
  std::ofstream f(path);
  if (!f) fail("bench: cannot write the timeline to {}", path);
  f << j.dump() << "\n";
  log_info("timeline of one decode step (context {}, batch {}) written to {}", context, batch, path);
}

// --json: the results, where asked for.
void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) fail("cannot write {}", path);
  std::fputs(j.dump(2).c_str(), f);
  std::fclose(f);
}

// The MoE's expert GEMMs of one layer alone at the model's shape: the weight bytes the touched
// experts hold over the time of both GEMMs, against the copy bandwidth (read + write; a read-only
// stream can pass it), MXFP4 and FP8 experts in the same run.
nlohmann::json bench_moe_gemms(const BenchCudaArgs& a, const std::vector<int32_t>& batches, double copy_bw) {
  nlohmann::json out = nlohmann::json::array();
  const GptOssConfig c = GptOssConfig::load((std::filesystem::path(a.model) / "config.json").string());
  fmt::print("\nMoE expert GEMMs of one layer (gate-up and down; {} experts, top-{}), weight bytes over time\n\n",
             c.num_experts, c.experts_per_token);
  fmt::print("| batch | experts touched | format | weight MB | us | TB/s | of copy bandwidth | mxfp4 / fp8 speed |\n");
  fmt::print("|---:|---:|---|---:|---:|---:|---:|---:|\n");
  for (int b : batches) {
    const MoeGemmShape shape{.batch = b, .experts = c.num_experts, .top_k = c.experts_per_token, .hidden = c.hidden,
                             .intermediate = c.intermediate};
    const int reps = std::max(4, a.steps / 4);
    const MoeGemmTiming mx = time_moe_gemm_mxfp4(shape, reps), f8 = time_moe_gemm_fp8(shape, reps);
    std::vector<std::pair<const char*, MoeGemmTiming>> rows{{"mxfp4", mx}, {"fp8", f8}};
    // Prompt chunks (32 rows an expert on average and more): also the wgmma path the model takes for
    // them below the long chunks (kernels/cuda/moe_gemm_mxfp4.cuh), its row gather included.
    if (size_t(b) * c.experts_per_token >= size_t(32) * c.num_experts)
      rows.emplace_back("mxfp4-wgmma", time_moe_gemm_mxfp4_wgmma(shape, reps));
    for (const auto& [name, t] : rows) {
      const double tbs = t.weight_bytes / t.seconds / 1e12;
      out.push_back({{"batch", b}, {"format", name}, {"experts_touched", t.experts_touched}, {"weight_bytes", t.weight_bytes},
                     {"seconds", t.seconds}, {"fraction_of_copy_bandwidth", tbs * 1e12 / copy_bw}});
      fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.3f} | {} |\n", b, t.experts_touched, name,
                 t.weight_bytes / 1e6, t.seconds * 1e6, tbs, tbs * 1e12 / copy_bw,
                 name == std::string("fp8") ? std::string() : fmt::format("{:.2f}", f8.seconds / t.seconds));
    }
  }
  fmt::print("\n");
  return out;
}

}  // namespace

void run_bench_cuda(const BenchCudaArgs& a) {
  if (!a.decode_kernel.persistent() && !a.timeline.empty())
    fail("bench: --timeline applies to the persistent decode kernel (--decode-kernel persistent)");
  auto positive = [](const std::string& s, const char* option) {
    return parse_int_list(s, option, "a positive integer", /*positive=*/true);
  };
  // --prefill-lens "" --batches "" with --moe-batches: the MoE table alone, without the model.
  if (a.prefill_lens.empty() && a.batches.empty()) {
    if (a.moe_batches.empty()) fail("bench: nothing to time (--prefill-lens and --batches are empty, no --moe-batches)");
    const std::vector<int32_t> moe_batches = positive(a.moe_batches, "--moe-batches");  // checked before the GPU
    const nlohmann::json moe = bench_moe_gemms(a, moe_batches, GptOssCudaFp8::measure_copy_bandwidth());
    write_json(a.json, {{"moe_gemms", moe}});
    return;
  }
  // An empty --prefill-lens times decode steps alone, an empty --batches prompts alone.
  auto list = [&](const std::string& s, const char* option) {
    return s.empty() ? std::vector<int32_t>{} : positive(s, option);
  };
  const std::vector<int32_t> prefill_lens = list(a.prefill_lens, "--prefill-lens"), batches = list(a.batches, "--batches"),
                             contexts = positive(a.contexts, "--contexts");
  const std::vector<int32_t> verify_ks = list(a.verify_ks, "--verify-k");
  const std::vector<int32_t> verify_batches = positive(a.verify_batches, "--verify-batches");
  const int max_draft = verify_ks.empty() ? 0 : *std::max_element(verify_ks.begin(), verify_ks.end());
  int max_batch = batches.empty() ? 1 : *std::max_element(batches.begin(), batches.end());
  if (max_draft > 0) max_batch = std::max(max_batch, *std::max_element(verify_batches.begin(), verify_batches.end()));
  int max_ctx = 2;
  if (!batches.empty() || max_draft > 0)
    max_ctx = std::max(max_ctx, *std::max_element(contexts.begin(), contexts.end()) + a.steps + 2);
  if (!prefill_lens.empty()) max_ctx = std::max(max_ctx, *std::max_element(prefill_lens.begin(), prefill_lens.end()) + 2);
  const double bw = GptOssCudaFp8::measure_copy_bandwidth();
  log_info("device copy bandwidth {:.0f} GB/s (read + write)", bw / 1e9);
  const nlohmann::json moe = a.moe_batches.empty() ? nlohmann::json() : bench_moe_gemms(a, positive(a.moe_batches, "--moe-batches"), bw);
  auto t0 = clock_type::now();
  GptOssWeights w = GptOssWeights::load(a.model);
  GptOssCudaFp8::Options mo{.slots = max_batch, .max_context = max_ctx, .max_rows = a.prefill_chunk, .graphs = a.graphs,
                            .kv_blocks = a.kv_blocks, .max_draft = max_draft, .experts = a.weights.experts(w),
                            .dense = a.weights.dense_weights(), .kv = a.weights.kv_cache_dtype(w.config)};
  a.decode_kernel.apply(mo);
  GptOssCudaFp8 model(w, mo);
  CudaSlots seqs(model);
  const double load_s = seconds_since(t0);
  const GptOssConfig& c = w.config;
  const bool mxfp4 = model.options().experts == GptOssCudaFp8::ExpertWeights::Mxfp4;
  const bool dense16 = model.options().dense == GptOssCudaFp8::DenseWeights::Bf16;
  const bool fp8_kv = model.options().kv == KvDtype::Fp8;
  const char* kv_name = kv_dtype_name(model.options().kv);
  log_info("loaded in {:.1f} s: {:.2f} GB of weights on the GPU (experts {}, dense {}), {} KV blocks of {} positions "
           "({:.1f} GB, {})",
           load_s, model.weight_bytes() / 1e9, mxfp4 ? "mxfp4" : "fp8", dense16 ? "bf16" : "fp8", model.kv_blocks(),
           GptOssCudaFp8::kBlockPositions, model.kv_blocks() * model.kv_block_bytes() / 1e9, kv_name);
  const double usd_per_s = a.usd_per_gpu_hour / 3600.0;
  std::mt19937_64 rng(a.seed);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % uint64_t(std::min(c.vocab, 199998)));
    return t;
  };
  const std::string device = GptOssCudaFp8::device_name();
  log_info("device: {}", device);
  nlohmann::json out = {{"model", a.model},
                        {"device", device},
                        {"weights_gb", model.weight_bytes() / 1e9},
                        {"experts", mxfp4 ? "mxfp4" : "fp8"},
                        {"dense", dense16 ? "bf16" : "fp8"},
                        {"kv_blocks", model.kv_blocks()},
                        {"kv_cache_dtype", kv_name},
                        {"load_seconds", load_s},
                        {"copy_bandwidth_gbs", bw / 1e9},
                        {"fp8_tflops_ceiling", a.fp8_tflops},
                        {"usd_per_gpu_hour", a.usd_per_gpu_hour},
                        {"cuda_graphs", a.graphs},
                        {"decode_kernel", a.decode_kernel.kernel},
                        {"persistent_blocks_per_sm", a.decode_kernel.blocks},
                        {"sampling", {{"temperature", a.temperature}, {"top_p", a.top_p}, {"top_k", a.top_k}}}};
  if (!moe.is_null()) out["moe_gemms"] = moe;
  if (!prefill_lens.empty()) {
    fmt::print("| prefill tokens | latency (ms) | tokens/s | TFLOP/s | of FP8 ceiling | $ per M input tokens |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int n : prefill_lens) {
    std::vector<int32_t> prompt = random_tokens(n);
    double best = 1e30;
    for (int rep = 0; rep < a.prefill_reps; ++rep) {
      seqs.release(0);
      auto t = clock_type::now();
      seqs.prefill_select(0, prompt);
      best = std::min(best, seconds_since(t));
    }
    seqs.release(0);
    const double flops = prefill_flops(c, n), tflops = flops / best / 1e12;
    const double usd = usd_per_s * best / n * 1e6;
    out["prefill"].push_back({{"tokens", n}, {"seconds", best}, {"tokens_per_s", n / best}, {"tflops", tflops},
                              {"fraction_of_ceiling", tflops / a.fp8_tflops}, {"usd_per_million_input", usd}});
    fmt::print("| {} | {:.1f} | {:.0f} | {:.1f} | {:.3f} | {:.4f} |\n", n, best * 1e3, n / best, tflops,
               tflops / a.fp8_tflops, usd);
  }
  if (!batches.empty()) {
    fmt::print("\ndecode steps select tokens on the GPU: {}\n",
               a.temperature > 0.0f
                   ? fmt::format("sampled (temperature {}, top-p {}, top-k {})", a.temperature, a.top_p, a.top_k)
                   : std::string("argmax"));
    a.decode_kernel.require(model, batches, "bench");
    fmt::print("\n| context | batch | step (ms) | tokens/s | GB/s moved | of copy bandwidth | $ per M output tokens |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  bool timeline_written = false;
  for (int ctx : contexts)
    for (int b : batches) {
      nlohmann::json row = {{"context", ctx}, {"batch", b}};
      try {
        std::vector<int32_t> slots(b), toks = random_tokens(b);
        for (int i = 0; i < b; ++i) slots[i] = i, seqs.fill_random(i, ctx);
        std::mt19937_64 draws(a.seed);
        std::vector<GptOssCudaFp8::RowSampling> rows(b);
        auto step_tokens = [&](std::span<const int32_t> in) {
          if (a.temperature > 0.0f)
            for (auto& r : rows) r = {a.temperature, a.top_p, a.top_k, std::uniform_real_distribution<double>(0.0, 1.0)(draws)};
          return seqs.decode_select(slots, in, rows);
        };
        std::vector<int32_t> next = step_tokens(toks);  // warm-up: captures the bucket's graph
        model.synchronize();
        auto t = clock_type::now();
        for (int s = 0; s < a.steps; ++s) next = step_tokens(next);
        const double step = seconds_since(t) / a.steps;
        const bool persistent = model.persistent_decode(b);
        row["persistent"] = persistent;
        if (!a.timeline.empty() && !timeline_written && persistent) {
          model.record_timeline();
          next = step_tokens(next);
          write_timeline(a.timeline, model.decode_timeline(), ctx, b);
          timeline_written = true;
        }
        const double tps = b / step, bytes = decode_step_bytes(c, b, ctx + 1 + a.steps / 2, mxfp4, fp8_kv);
        const double usd = usd_per_s / tps * 1e6;
        row.update({{"step_seconds", step}, {"tokens_per_s", tps}, {"bytes_per_step", bytes},
                    {"gb_per_s", bytes / step / 1e9}, {"fraction_of_bandwidth", bytes / step / bw},
                    {"usd_per_million_output", usd}});
        fmt::print("| {} | {} | {:.2f} | {:.0f} | {:.0f} | {:.3f} | {:.4f} |\n", ctx, b, step * 1e3, tps,
                   bytes / step / 1e9, bytes / step / bw, usd);
      } catch (const std::exception& e) {
        row["error"] = e.what();
        fmt::print("| {} | {} | — | does not fit: {} | | | |\n", ctx, b, e.what());
      }
      for (int i = 0; i < b; ++i) seqs.release(i);
      out["decode"].push_back(row);
    }
  if (!verify_ks.empty()) {
    // A verify step of k drafts: k + 1 tokens of each sequence in one forward (a decode step's
    // graph over (k + 1) b rows), the slots rolled back after each so the context stays put.
    // Speedup at per-token acceptance a: E(k) = (1 - a^(k+1)) / (1 - a) tokens per step, over
    // the step's cost relative to a decode step.
    fmt::print("\nspeculative verify steps (k drafts: k + 1 tokens per sequence; speedup = expected tokens per verify "
               "step x decode step / verify step)\n");
    fmt::print("\n| context | batch | k | verify step (ms) | decode step (ms) | cost vs decode | speedup at acceptance "
               "0.5 | 0.7 | 0.9 |\n");
    fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    auto expected = [](double acc, int k) { return (1 - std::pow(acc, k + 1)) / (1 - acc); };
    for (int ctx : contexts)
      for (int b : verify_batches) {
        std::vector<int32_t> slots(b);
        for (int i = 0; i < b; ++i) slots[i] = i, seqs.fill_random(i, ctx);
        auto time_step = [&](int k) {
          std::vector<std::vector<int32_t>> toks(static_cast<size_t>(b));
          for (auto& t : toks) t = random_tokens(k + 1);
          std::vector<GptOssCudaFp8::RowSampling> rows(size_t(b) * (k + 1));
          auto once = [&] {
            if (k == 0) {
              std::vector<int32_t> one(static_cast<size_t>(b));
              for (int i = 0; i < b; ++i) one[size_t(i)] = toks[size_t(i)][0];
              seqs.decode_select(slots, one, rows);
            } else {
              seqs.verify_select(slots, toks, rows);
            }
            for (int i = 0; i < b; ++i) seqs.truncate(i, ctx);
          };
          once();  // warm-up: the bucket's graph
          model.synchronize();
          auto t = clock_type::now();
          for (int s = 0; s < a.steps; ++s) once();
          return seconds_since(t) / a.steps;
        };
        try {
          const double dec = time_step(0);
          for (int k : verify_ks) {
            const double ver = time_step(k), rel = ver / dec;
            out["verify"].push_back({{"context", ctx}, {"batch", b}, {"k", k}, {"verify_seconds", ver},
                                     {"decode_seconds", dec}, {"cost_vs_decode", rel}});
            fmt::print("| {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {:.2f} |\n", ctx, b, k, ver * 1e3,
                       dec * 1e3, rel, expected(0.5, k) / rel, expected(0.7, k) / rel, expected(0.9, k) / rel);
          }
        } catch (const std::exception& e) {
          fmt::print("| {} | {} | — | does not fit: {} | | | | | |\n", ctx, b, e.what());
        }
        for (int i = 0; i < b; ++i) seqs.release(i);
      }
  }
  if (!a.attention_lens.empty()) {
    // The prefill attention of one layer alone, in the model's prompt chunks: a full layer and,
    // when the model has them, a sliding one; FLOPs of QK^T and PV over the keys each query sees.
    // The 16-bit caches only: --kv-cache-dtype fp8's tiles are not timed here (refused in check).
    fmt::print("\nprefill attention of one layer (chunks of {} tokens, {} cache), against the BF16 ceiling of {:.0f} "
               "TFLOP/s (FP16's is the same)\n",
               a.prefill_chunk, kv_name, a.bf16_tflops);
    fmt::print("\n| prompt tokens | layer | ms | TFLOP/s | of BF16 ceiling |\n|---:|---|---:|---:|---:|\n");
    std::vector<int> windows = {0};
    if (c.sliding_window > 0) windows.push_back(c.sliding_window);
    for (int n : positive(a.attention_lens, "--attention-lens"))
      for (int win : windows) {
        const PrefillAttentionTiming t = time_prefill_attention(
            {.tokens = n, .chunk = a.prefill_chunk, .heads = c.num_heads, .kv_heads = c.num_kv_heads,
             .head_dim = c.head_dim, .window = win, .f16 = model.options().kv == KvDtype::Fp16},
            std::max(2, a.prefill_reps));
        const double tf = t.flops / t.seconds / 1e12;
        const std::string layer = win ? fmt::format("window {}", win) : std::string("full");
        out["prefill_attention"].push_back({{"tokens", n}, {"window", win}, {"kv_cache_dtype", kv_name},
                                            {"seconds", t.seconds}, {"tflops", tf},
                                            {"fraction_of_bf16_ceiling", tf / a.bf16_tflops}});
        fmt::print("| {} | {} | {:.3f} | {:.1f} | {:.3f} |\n", n, layer, t.seconds * 1e3, tf, tf / a.bf16_tflops);
      }
  }
  write_json(a.json, out);
}

}  // namespace osprey::cli
