// CPU benchmark: memory bandwidth of this machine, then prefill and decode speed of a checkpoint,
// with decode set against the bandwidth bound (weight bytes one decode step must read).
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <random>
#include <sys/resource.h>

#include "cli/bench_cuda.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generate.h"

namespace osprey::cli {

namespace {

// Multithreaded streaming read of a buffer much larger than the caches; best of several passes.
double measure_read_bandwidth_gbs(size_t bytes) {
  std::vector<uint64_t> buf(bytes / 8);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t acc = 0;
#pragma omp parallel for schedule(static) reduction(^ : acc)
    for (size_t i = 0; i < buf.size(); i += 4) acc ^= buf[i] + buf[i + 1] + buf[i + 2] + buf[i + 3];
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + acc;
    best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

// Weight bytes one decode token reads: everything dense, k experts per layer, the lm_head.
double decode_bytes_per_token(const GptOssConfig& c) {
  const double H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts;
  double attn = 2 * (H + (Q + 2 * KV) * H + (Q + 2 * KV) + c.num_heads + H * Q + H);
  double router = 2 * (H + E * H + E);
  double mlp1 = 2 * I * H / 2 + 2 * I * H / 32 + 2 * 2 * I;  // MXFP4 blocks + scales + BF16 bias
  double mlp2 = H * I / 2 + H * I / 32 + 2 * H;
  double per_layer = attn + router + c.experts_per_token * (mlp1 + mlp2);
  return c.num_layers * per_layer + 2 * double(c.vocab) * H + 2 * H /*embedding row*/ + 2 * H;
}

}  // namespace

void add_bench(CLI::App& app) {
  struct Args {
    std::string model, backend = "cpu";
    int prompt_len = 128, decode_tokens = 32;
    uint64_t seed = 1;
    size_t membw_mib = 2048;
  };
  auto args = std::make_shared<Args>();
  auto cu = std::make_shared<BenchCudaArgs>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode speed against the memory-bandwidth bound");
  cmd->add_option("--model", args->model, "checkpoint directory");
  add_bench_serve(cmd);
  add_bench_grammar(cmd);
  cmd->add_option("--prompt-len", args->prompt_len, "cpu: prompt tokens (random ids)")->check(CLI::PositiveNumber);
  cmd->add_option("--decode-tokens", args->decode_tokens, "cpu: tokens to decode")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "seed of the random prompt");
  cmd->add_option("--membw-mib", args->membw_mib, "cpu: buffer size for the bandwidth measurement")->check(CLI::PositiveNumber);
  cmd->add_option("--backend", args->backend, "cpu | cuda (the FP8 Hopper path)")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--prefill-lens", cu->prefill_lens, "cuda: prompt lengths to time (\"\": none)");
  cmd->add_option("--batches", cu->batches, "cuda: decode batch sizes (\"\": none)");
  cmd->add_option("--contexts", cu->contexts, "cuda: decode context lengths");
  cmd->add_option("--prefill-reps", cu->prefill_reps, "cuda: runs per prompt length (the best is kept)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", cu->steps, "cuda: timed decode steps per point")->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-chunk", cu->prefill_chunk, "cuda: tokens per prefill step")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-blocks", cu->kv_blocks,
                  "cuda: KV blocks of 64 positions in the pool (default: what the GPU's memory leaves); a small pool "
                  "keeps profiler replays cheap")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--usd-per-gpu-hour", cu->usd_per_gpu_hour, "cuda: price for the cost columns");
  cmd->add_flag("!--no-graphs", cu->graphs, "cuda: launch decode steps kernel by kernel (to measure what graphs save)");
  cmd->add_option("--temperature", cu->temperature, "cuda: decode steps sample on the GPU at this temperature (0: argmax)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", cu->top_p, "cuda: nucleus mass of the sampled decode steps")->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--top-k", cu->top_k, "cuda: top-k of the sampled decode steps (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", cu->json, "cuda: also write the results as JSON here");
  cmd->add_option("--verify-k", cu->verify_ks,
                  "cuda: draft lengths k whose speculative verify step (k + 1 tokens per sequence) is timed against the "
                  "decode step, e.g. 1,2,3,4,5,6,7,8");
  cmd->add_option("--verify-batches", cu->verify_batches, "cuda: batch sizes of the verify table");
  cmd->add_option("--attention-lens", cu->attention_lens,
                  "cuda: prompt lengths at which to time the prefill attention of one layer alone");
  cmd->add_option("--moe-batches", cu->moe_batches,
                  "cuda: decode batch sizes at which to time the MoE's two expert GEMMs of one layer alone (MXFP4 and "
                  "FP8 experts, random top-k routing), against the copy bandwidth");
  cu->decode_kernel.add(cmd);
  cmd->add_option("--timeline", cu->timeline,
                  "cuda: with --decode-kernel persistent, write its per-SM timeline of one step of the first decode "
                  "point here (JSON; bench/timeline_png.py draws it)");
  cu->weights.add(cmd);
  // `bench serve` and `bench grammar` take their own options (after their name); bench's own would
  // be dropped. Checked once parsing is done, before any subcommand runs.
  cmd->parse_complete_callback([cmd] {
    for (const char* sub : {"serve", "grammar"})
      if (cmd->got_subcommand(sub))
        for (const CLI::Option* o : cmd->get_options())
          if (o->count() > 0)
            fail("bench {0}: {1} is an option of `bench` itself, which `bench {0}` does not read", sub, o->get_name());
  });
  cmd->callback([args, cu, cmd] {
    if (cmd->got_subcommand("serve") || cmd->got_subcommand("grammar")) return;
    auto given = [&](const char* name) { return cmd->get_option(name)->count() > 0; };
    auto for_backend = [](const CLI::Option* o, const char* prefix) { return o->get_description().rfind(prefix, 0) == 0; };
    cu->weights.check(args->backend, "");
    cu->decode_kernel.check(args->backend, "");
    if (args->model.empty()) fail("bench: --model is required (or use `bench serve` or `bench grammar`)");
    // Each bench's options (their help begins "cuda:" or "cpu:") have no meaning on the other: refused.
    const bool cuda = args->backend == "cuda";
    for (const CLI::Option* o : cmd->get_options())
      if (o->count() > 0 && for_backend(o, cuda ? "cpu:" : "cuda:"))
        fail("bench: {} applies to --backend {}", o->get_name(), cuda ? "cpu" : "cuda");
    if (cuda) {
      if (cu->temperature == 0.0f)
        for (const char* o : {"--top-p", "--top-k"})
          if (given(o)) fail("bench: {} shapes sampled decode steps; give a --temperature above 0 (0 takes the argmax)", o);
      if (given("--verify-batches") && cu->verify_ks.empty())
        fail("bench: --verify-batches sizes the verify table of --verify-k, which is not given");
      // --prefill-lens "" --batches "": the MoE table alone, without the model; the model's options
      // would be dropped.
      if (cu->prefill_lens.empty() && cu->batches.empty())
        for (const CLI::Option* o : cmd->get_options())
          if (o->count() > 0) {
            const std::string n = o->get_name();
            if (n != "--model" && n != "--backend" && n != "--prefill-lens" && n != "--batches" && n != "--moe-batches" &&
                n != "--steps" && n != "--json")
              fail("bench: {} applies to the model's runs; with --prefill-lens \"\" --batches \"\" only the MoE table "
                   "(--moe-batches, --steps, --json) runs",
                   n);
          }
      if (!cu->attention_lens.empty() && cu->weights.kv_cache == "fp8")
        fail("bench: --attention-lens times the prefill attention over a 16-bit cache (--kv-cache-dtype bf16 or "
             "fp16); the FP8 cache's is timed end to end by --prefill-lens");
      cu->model = args->model;
      cu->seed = args->seed;
      run_bench_cuda(*cu);
      return;
    }
    // Bandwidth is measured before and after the run (shared machines drift); the higher is the bound.
    const double bw_before = measure_read_bandwidth_gbs(args->membw_mib << 20);
    log_info("memory read bandwidth {:.1f} GB/s ({} threads)", bw_before, omp_get_max_threads());
    auto t0 = std::chrono::steady_clock::now();
    GptOssWeights w = GptOssWeights::load(args->model);
    GptOssCpuModel model(w);
    double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::mt19937_64 rng(args->seed);
    std::vector<int32_t> prompt(args->prompt_len);
    for (auto& t : prompt) t = int32_t(rng() % uint64_t(std::min(w.config.vocab, 199998)));
    // Warm-up: touches the mapped weights (page cache) so that decode measures memory, not disk.
    GenerateOptions warm{.max_tokens = 2, .sampling = {.temperature = 0}, .stop_at_eos = false};
    generate(model, prompt, warm);
    GenerateOptions opt{.max_tokens = args->decode_tokens, .sampling = {.temperature = 0}, .stop_at_eos = false};
    GenerateStats st;
    generate(model, prompt, opt, &st);
    const double bw_after = measure_read_bandwidth_gbs(args->membw_mib << 20);
    const double bw = std::max(bw_before, bw_after);
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const double bytes_tok = decode_bytes_per_token(w.config);
    const double decode_tps = (st.generated_tokens - 1) / st.decode_seconds;  // first token comes from prefill
    const double bound_tps = bw * 1e9 / bytes_tok;
    nlohmann::json j = {
        {"model", args->model},
        {"threads", omp_get_max_threads()},
        {"load_seconds", load_s},
        {"prompt_tokens", st.prompt_tokens},
        {"prefill_seconds", st.prefill_seconds},
        {"prefill_tokens_per_s", st.prompt_tokens / st.prefill_seconds},
        {"decode_tokens", st.generated_tokens - 1},
        {"decode_tokens_per_s", decode_tps},
        {"memory_read_gb_per_s", bw},
        {"memory_read_gb_per_s_before_after", {bw_before, bw_after}},
        {"decode_weight_bytes_per_token", bytes_tok},
        {"decode_bound_tokens_per_s", bound_tps},
        {"decode_fraction_of_bound", decode_tps / bound_tps},
        {"peak_rss_gib", double(ru.ru_maxrss) / (1 << 20)},
    };
    fmt::print("{}\n", j.dump(2));
  });
}

}  // namespace osprey::cli
