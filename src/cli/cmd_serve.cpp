#include <csignal>
#include <filesystem>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/slot_runner.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "harmony/tokenizer.h"
#include "server/openai_server.h"

namespace osprey::cli {

namespace {
server::OpenAiServer* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}
}  // namespace

void add_serve(CLI::App& app) {
  struct Args {
    std::string model, host = "127.0.0.1", backend = "cpu", name;
    int port = 8000, max_batch = 64, max_seq_len = 4096, max_queue = 256, kv_blocks = 0, max_batched_tokens = 512;
    int reasoning_budget = 1024;
    double kv_cache_gib = 4.0;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  cmd->add_option("--model", args->model, "checkpoint directory (with its tokenizer); default: the embedded osprey-mini");
  cmd->add_option("--host", args->host, "address to bind");
  cmd->add_option("--port", args->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--backend", args->backend, "cpu | cuda (the FP8 path; decode steps batched as CUDA graphs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--max-batch", args->max_batch, "sequences decoded together")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-seq-len", args->max_seq_len, "context per request (prompt + output)")->check(CLI::Range(16, 131072));
  cmd->add_option("--max-queue", args->max_queue, "waiting requests before 429")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-batched-tokens", args->max_batched_tokens, "tokens per engine step")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-blocks", args->kv_blocks, "KV-cache blocks of 16 tokens (0: from --kv-cache-gib)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-cache-gib", args->kv_cache_gib, "KV-cache memory when --kv-blocks is 0")->check(CLI::PositiveNumber);
  cmd->add_option("--reasoning-budget", args->reasoning_budget,
                  "analysis tokens a constrained request (response_format, strict or forced tool calls) may spend "
                  "before its answer is forced; a request's reasoning_budget overrides it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--served-model-name", args->name, "model id for /v1/models (default: the directory's name)");
  cmd->callback([args] {
    args->model = model_or_default(args->model);
    log_info("loading {}", args->model);
    GptOssWeights w = GptOssWeights::load(args->model);
    harmony::Tokenizer tok = harmony::Tokenizer::for_model_dir(args->model);
    EngineConfig ec{.max_batch = args->max_batch, .max_batched_tokens = args->max_batched_tokens,
                    .max_queue = args->max_queue, .max_seq_len = std::min(args->max_seq_len, w.config.max_position_embeddings),
                    .kv_block_size = 16, .kv_blocks = args->kv_blocks};
    // The model and its runner: the CPU engine over the engine's paged KV, or the GPU with its own
    // KV in one slot per running sequence (the engine's pool then only counts blocks).
    std::unique_ptr<GptOssCpuModel> cpu_model;
    std::unique_ptr<GptOssCudaFp8> gpu_model;
    std::unique_ptr<CudaSlotModel> gpu_slots;
    std::unique_ptr<ModelRunner> runner;
    if (args->backend == "cuda") {
      gpu_model = std::make_unique<GptOssCudaFp8>(
          w, GptOssCudaFp8::Options{.slots = ec.max_batch, .max_context = ec.max_seq_len, .prefill_chunk = 2048, .graphs = true});
      gpu_slots = std::make_unique<CudaSlotModel>(*gpu_model);
      runner = std::make_unique<SlotModelRunner>(*gpu_slots);
      if (ec.kv_blocks == 0) ec.kv_blocks = ec.max_batch * ((ec.max_seq_len + ec.kv_block_size - 1) / ec.kv_block_size);
    } else {
      cpu_model = std::make_unique<GptOssCpuModel>(w);
      runner = std::make_unique<CpuModelRunner>(*cpu_model);
    }
    if (ec.kv_blocks == 0) {  // enough for every sequence at full length, within the memory budget
      const double block_bytes = 2.0 * w.config.num_layers * ec.kv_block_size * w.config.kv_dim() * sizeof(float);
      const long wanted = long(ec.max_batch) * ((ec.max_seq_len + ec.kv_block_size - 1) / ec.kv_block_size);
      ec.kv_blocks = int(std::max(1L, std::min(wanted, long(args->kv_cache_gib * double(1ull << 30) / block_bytes))));
      log_info("KV cache: {} blocks of {} tokens ({:.2f} GiB)", ec.kv_blocks, ec.kv_block_size,
               ec.kv_blocks * block_bytes / double(1ull << 30));
    }
    const long kv_tokens = long(ec.kv_blocks) * ec.kv_block_size;
    if (kv_tokens < ec.max_seq_len)
      fail("the KV cache holds {} tokens ({} blocks of {}), less than one request of the context, {} tokens: give "
           "--kv-blocks {} or more, a larger --kv-cache-gib, or a smaller --max-seq-len",
           kv_tokens, ec.kv_blocks, ec.kv_block_size, ec.max_seq_len, (ec.max_seq_len + ec.kv_block_size - 1) / ec.kv_block_size);
    Engine engine(std::move(runner), ec);
    std::string name = args->name.empty() ? std::filesystem::path(args->model).filename().string() : args->name;
    if (name.empty()) name = std::filesystem::path(args->model).parent_path().filename().string();
    server::OpenAiServer srv(engine, tok, {.host = args->host, .port = args->port, .model_id = name, .reasoning_budget = args->reasoning_budget});
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
