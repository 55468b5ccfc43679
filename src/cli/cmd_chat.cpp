// `osprey chat`: an interactive terminal chat on the CPU engine. The answer streams as it is
// generated; reasoning (the analysis channel) is shown dimmed; tool calls are shown, not run.
#include <fmt/format.h>
#include <iostream>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/sampling_arg.h"
#include "core/log.h"
#include "core/progress.h"
#include "engine/generate.h"
#include "harmony/chat_request.h"
#include "harmony/o200k.h"
#include "harmony/renderer.h"
#include "server/chat_output.h"

namespace osprey::cli {

namespace {

// Reads every page of the mapped checkpoint once, so the first answer does not wait on the disk.
void prefault(const GptOssWeights& w) {
  uint64_t total = 0;
  for (auto& name : w.store.names()) total += w.store.get(name).nbytes;
  Progress p("loading weights", total);
  volatile uint8_t sink = 0;
  for (auto& name : w.store.names()) {
    const TensorView& t = w.store.get(name);
    for (size_t off = 0; off < t.nbytes; off += 4096) sink = sink + t.data[off];
    p.advance(t.nbytes);
  }
  p.finish();
}

}  // namespace

void add_chat(CLI::App& app) {
  struct Args {
    std::string model, effort = "medium";
    int max_tokens = 1024;
    SamplingArg sampling;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("chat", "Interactive chat in the terminal (CPU)");
  cmd->add_option("--model", args->model, "checkpoint directory (default: the embedded osprey-mini)");
  cmd->add_option("--reasoning-effort", args->effort, "low | medium | high")->check(CLI::IsMember({"low", "medium", "high"}));
  cmd->add_option("--max-tokens", args->max_tokens, "tokens per answer")->check(CLI::PositiveNumber);
  args->sampling.add(cmd, /*with_greedy=*/false);
  cmd->callback([args] {
    const SamplingParams sampling = args->sampling.checked();  // before the model loads
    const bool tty = ::isatty(1);
    const std::string dim = tty ? "\x1b[2m" : "", reset = tty ? "\x1b[0m" : "";
    args->model = model_or_default(args->model);
    GptOssWeights w = GptOssWeights::load(args->model);
    prefault(w);
    harmony::Tokenizer tok = harmony::Tokenizer::for_model_dir(args->model);
    GptOssCpuModel model(w);
    harmony::ordered_json history = harmony::ordered_json::array();
    fmt::print(stderr, "osprey chat: {} (type /reset to start over, /exit or Ctrl-D to quit)\n", args->model);
    uint64_t turn = 0;
    for (std::string line;;) {
      fmt::print("{}> ", tty ? "\n" : "");
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line == "/reset") {
        history.clear();
        continue;
      }
      if (line.empty()) continue;
      history.push_back({{"role", "user"}, {"content", line}});
      harmony::ordered_json req = {{"messages", history}, {"reasoning_effort", args->effort}};
      auto conv = harmony::conversation_from_chat_request(req, {.current_date = harmony::today_utc()});
      std::vector<int32_t> prompt = harmony::Renderer(tok).render_for_completion(conv, {.auto_drop_analysis = false});
      server::ChatOutputBuilder out(tok, {}, {});
      bool in_reasoning = false;
      auto show = [&](const std::vector<server::json>& deltas) {
        for (auto& d : deltas) {
          if (d.contains("reasoning_content")) {
            if (!in_reasoning) fmt::print("{}", dim);
            in_reasoning = true;
            fmt::print("{}", d["reasoning_content"].get<std::string>());
          } else if (d.contains("content")) {
            if (in_reasoning) fmt::print("{}\n", reset);
            in_reasoning = false;
            fmt::print("{}", d["content"].get<std::string>());
          } else if (d.contains("tool_calls")) {
            auto& c = d["tool_calls"][0];
            if (c.contains("id")) fmt::print("{}\n[tool call {}] ", in_reasoning ? reset : "", c["function"]["name"].get<std::string>());
            else fmt::print("{}", c["function"]["arguments"].get<std::string>());
            in_reasoning = false;
          }
        }
        std::fflush(stdout);
      };
      SamplingParams turn_sampling = sampling;
      turn_sampling.seed += turn++;  // each answer its own stream
      GenerateOptions opt{.max_tokens = args->max_tokens,
                          .sampling = turn_sampling,
                          .stop_tokens = {harmony::kReturn, harmony::kCall}};
      GenerateStats st;
      generate(model, prompt, opt, &st, [&](int32_t t) {
        show(out.push(t));
        return true;
      });
      show(out.finish());
      server::json msg = out.message();
      if (msg["content"].is_null() || msg["content"].get<std::string>().empty())
        if (!msg.contains("reasoning_content") && !msg.contains("tool_calls"))
          fmt::print("{}({} tokens generated, none of them a Harmony message{}){}", dim, st.generated_tokens,
                     out.diagnostics().empty() ? "" : ": " + out.diagnostics().front(), reset);
      fmt::print("{}\n", in_reasoning ? reset : "");
      harmony::ordered_json turn_msg = {{"role", "assistant"}, {"content", msg["content"].is_null() ? "" : msg["content"]}};
      history.push_back(turn_msg);
    }
  });
}

}  // namespace osprey::cli
