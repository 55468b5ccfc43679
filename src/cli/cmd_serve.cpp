#include <atomic>
#include <csignal>
#include <filesystem>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "cli/commands.h"
#include "cli/speculative_arg.h"
#include "cli/weights_arg.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/cuda_runner.h"
#include "formats/kv_dtype.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "harmony/tokenizer.h"
#include "server/openai_server.h"

namespace osprey::cli {

namespace {
std::atomic<server::OpenAiServer*> g_server{nullptr};
std::atomic<int> g_signals{0};
// SIGTERM or SIGINT: the first drains (the requests in flight finish, new ones get 503), a second
// stops (the responses in flight are cut).
void on_signal(int) {
  server::OpenAiServer* s = g_server.load();
  if (!s) return;
  if (g_signals.fetch_add(1) == 0) s->drain();
  else s->stop();
}
}  // namespace

void add_serve(CLI::App& app) {
  struct Args {
    std::string model, host = "127.0.0.1", backend = "cpu", name;
    int port = 8000, max_batch = 64, max_seq_len = 0, max_queue = 256, kv_blocks = 0, max_batched_tokens = 0;
    int reasoning_budget = 1024;
    int drain_timeout = 25;
    double kv_cache_gib = 4.0, gpu_memory_utilization = 0.90;
    bool no_prefix_caching = false;
    SpeculativeArg spec;
    WeightsArg weights;
    std::string spec_default = "on";
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  cmd->add_option("--model", args->model, "checkpoint directory (with its tokenizer); default: the embedded osprey-mini");
  cmd->add_option("--host", args->host, "address to bind");
  cmd->add_option("--port", args->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--backend", args->backend, "cpu | cuda (the FP8 path; decode steps batched as CUDA graphs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--max-batch", args->max_batch, "sequences decoded together")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  "context per request (prompt + output); 0: the model's (131,072 for gpt-oss)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--max-queue", args->max_queue, "waiting requests before 429")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens,
                  "tokens per engine step: every decode token and the prompt chunks that fit (0: 8192 on cuda, 512 on cpu)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--kv-blocks", args->kv_blocks,
                  "KV-cache blocks (16 positions on cpu, 64 on cuda); 0: from --kv-cache-gib (cpu) or "
                  "--gpu-memory-utilization (cuda)")
      ->check(CLI::NonNegativeNumber);
  auto* kv_gib = cmd->add_option("--kv-cache-gib", args->kv_cache_gib, "cpu: KV-cache memory when --kv-blocks is 0")
                     ->check(CLI::PositiveNumber);
  auto* gpu_util = cmd->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                  "cuda: fraction of the GPU's memory for the weights, scratch and KV cache together (the KV cache "
                  "takes what the rest leaves)")
      ->check(CLI::Range(0.05, 1.0));
  cmd->add_flag("--no-prefix-caching", args->no_prefix_caching,
                "compute every prompt in full (default: KV blocks of a shared token prefix are reused)");
  cmd->add_option("--drain-timeout", args->drain_timeout,
                  "seconds the generations in flight may take to finish after SIGTERM or SIGINT, while new requests get "
                  "503 (a second signal cuts them)")
      ->check(CLI::Range(0, 86400));
  cmd->add_option("--reasoning-budget", args->reasoning_budget,
                  "analysis tokens a constrained request (response_format, strict or forced tool calls) may spend "
                  "before its answer is forced; a request's reasoning_budget overrides it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--served-model-name", args->name, "model id for /v1/models (default: the directory's name)");
  args->spec.add(cmd);
  args->weights.add(cmd);
  auto* spec_default = cmd->add_option("--speculative-default", args->spec_default,
                  "with --speculative: whether requests that do not set the 'speculative' field get it (a request's "
                  "field overrides)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->callback([args, kv_gib, gpu_util, spec_default] {
    args->weights.check(args->backend, "");
    args->spec.check();
    if (spec_default->count() && !args->spec.on())
      fail("--speculative-default {} needs --speculative (without it no request is drafted for)", args->spec_default);
    // The KV pool's size comes from one option; the others would be dropped.
    const bool cuda_backend = args->backend == "cuda";
    if (kv_gib->count() && cuda_backend)
      fail("--kv-cache-gib sizes the CPU's KV cache; on --backend cuda the pool is what --gpu-memory-utilization "
           "leaves, or --kv-blocks");
    if (gpu_util->count() && !cuda_backend)
      fail("--gpu-memory-utilization applies to --backend cuda; the CPU's KV cache is --kv-cache-gib or --kv-blocks");
    if (args->kv_blocks > 0)
      for (const CLI::Option* o : {kv_gib, gpu_util})
        if (o->count()) fail("--kv-blocks {} sets the KV pool's size; {} would change nothing", args->kv_blocks, o->get_name());
    args->model = model_or_default(args->model);
    log_info("loading {}", args->model);
    GptOssWeights w = GptOssWeights::load(args->model);
    harmony::Tokenizer tok = harmony::Tokenizer::for_model_dir(args->model);
    const GptOssConfig& mc = w.config;
    if (args->max_seq_len > mc.max_position_embeddings)
      fail("--max-seq-len {} is past the model's context of {} positions", args->max_seq_len, mc.max_position_embeddings);
    const bool cuda = args->backend == "cuda";
    EngineConfig ec{.max_batch = args->max_batch,
                    .max_batched_tokens = args->max_batched_tokens > 0 ? args->max_batched_tokens
                                          : cuda              ? GptOssCudaFp8::Options::kDefaultMaxRows
                                                              : 512,
                    .max_queue = args->max_queue,
                    .max_seq_len = args->max_seq_len > 0 ? args->max_seq_len : mc.max_position_embeddings,
                    .kv_block_size = 16,
                    .kv_blocks = args->kv_blocks,
                    .prefix_caching = !args->no_prefix_caching};
    // A draft model on the GPU loads first: the target's KV pool is sized from what is left.
    args->spec.apply(ec, mc, args->backend);
    ec.spec_default = args->spec_default == "on";
    // The model and its runner: the CPU engine over KV the engine stores, or the GPU, whose KV
    // memory the model holds and the engine's block manager places (sized from what is left).
    std::unique_ptr<GptOssCpuModel> cpu_model;
    std::unique_ptr<GptOssCudaFp8> gpu_model;
    std::unique_ptr<ModelRunner> runner;
    double block_bytes = 0;
    if (cuda) {
      gpu_model = std::make_unique<GptOssCudaFp8>(
          w, GptOssCudaFp8::Options{.slots = ec.max_batch, .max_context = ec.max_seq_len,
                                    .max_rows = ec.max_batched_tokens, .graphs = true, .kv_blocks = ec.kv_blocks,
                                    .max_draft = ec.spec_k, .gpu_memory_utilization = args->gpu_memory_utilization,
                                    .experts = args->weights.experts(w), .dense = args->weights.dense_weights(),
                                    .kv = args->weights.kv_cache_dtype(w.config)});
      block_bytes = gpu_model->kv_block_bytes();
      runner = std::make_unique<CudaModelRunner>(*gpu_model);
    } else {
      cpu_model = std::make_unique<GptOssCpuModel>(w);
      runner = std::make_unique<CpuModelRunner>(*cpu_model);
      block_bytes = kv_block_bytes(mc, ec.kv_block_size, sizeof(float));
      if (ec.kv_blocks == 0) {
        const long wanted = long(ec.max_batch) * ((ec.max_seq_len + ec.kv_block_size - 1) / ec.kv_block_size);
        ec.kv_blocks = int(std::max(1L, std::min(wanted, long(args->kv_cache_gib * double(1ull << 30) / block_bytes))));
      }
    }
    Engine engine(std::move(runner), ec);
    const long kv_tokens = long(engine.kv_blocks()) * engine.kv_block_size();
    log_info("KV cache: {} blocks of {} positions ({:.2f} GiB, {}), {} tokens of full-attention KV; prefix caching {}",
             engine.kv_blocks(), engine.kv_block_size(), engine.kv_blocks() * block_bytes / double(1ull << 30),
             gpu_model ? kv_dtype_name(gpu_model->options().kv) : "fp32", kv_tokens, ec.prefix_caching ? "on" : "off");
    if (kv_tokens < ec.max_seq_len)
      log_info("the KV cache holds fewer positions than the context ({}): longer requests get a 400", ec.max_seq_len);
    std::string name = args->name.empty() ? std::filesystem::path(args->model).filename().string() : args->name;
    if (name.empty()) name = std::filesystem::path(args->model).parent_path().filename().string();
    server::OpenAiServer srv(engine, tok, {.host = args->host, .port = args->port, .model_id = name,
                                              .drain_timeout_s = args->drain_timeout,
                                              .reasoning_budget = args->reasoning_budget});
    g_server = &srv;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    if (!srv.bind())
      fail("cannot listen on {}:{}: {}", args->host, args->port,
           errno == EADDRINUSE ? "address in use (is another server on that port?)" : std::strerror(errno));
    log_info("serving '{}' on http://{}:{} (backend {}, max batch {}, context {})", name, args->host, srv.bound_port(),
             args->backend, ec.max_batch, ec.max_seq_len);
    if (!srv.listen()) fail("the server on {}:{} stopped with an error", args->host, srv.bound_port());
    g_server = nullptr;
    log_info("stopped");
  });
}

}  // namespace osprey::cli
