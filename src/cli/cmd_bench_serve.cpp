// `osprey bench serve`: a load generator for a running server, in the manner of vLLM's serving
// benchmark. Streaming completions with fixed input and output lengths (random token prompts,
// ignore_eos), a fixed number in flight per concurrency level; reports throughput and
// time-to-first-token / inter-token latency percentiles.
#include <httplib.h>
#include <cstring>
#include <sstream>
#include <map>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fmt/format.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "cli/bench_serve_stream.h"
#include "cli/commands.h"
#include "core/error.h"

namespace osprey::cli {

namespace {

using clk = std::chrono::steady_clock;

struct RequestResult {
  bool ok = false;
  bool streamed = false;  // a chunk of generated output arrived (ttft is its time)
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int tokens = 0;
  std::string error;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5))];
}

// How requests are sent: /v1/completions with the token prompt, or /v1/chat/completions with a
// user message of as many words (and, with response_format, a structured output to constrain).
struct RequestShape {
  bool chat = false;
  std::string response_format;  // chat: "" or json_object
};

// One streamed request on the worker's client (its kept-alive connection, opened on first use).
RequestResult one_request(httplib::Client& cli, const std::string& model, const std::vector<int32_t>& prompt,
                          int output_len, const RequestShape& shape) {
  nlohmann::json body = {{"model", model}, {"max_tokens", output_len}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
  if (shape.chat) {
    std::string text;
    for (int32_t t : prompt) text += " w" + std::to_string(t % 1000);
    body["messages"] = {{{"role", "user"}, {"content", text}}};
    body["stream_options"] = {{"include_usage", true}};
    if (!shape.response_format.empty()) body["response_format"] = {{"type", shape.response_format}};
  } else {
    body["prompt"] = prompt;
  }
  RequestResult r;
  auto t0 = clk::now(), last = t0;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = shape.chat ? "/v1/chat/completions" : "/v1/completions";
  int usage_tokens = -1;  // chat: the usage chunk's count (a chunk is not always one token)
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
                        buf.append(data, n);
                        size_t at;
                        while ((at = buf.find("\n\n")) != std::string::npos) {
                          std::string ev = buf.substr(0, at);
                          buf.erase(0, at + 2);
                          if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
                          auto j = nlohmann::json::parse(ev.substr(6), nullptr, false);
                          if (!j.is_discarded() && j.contains("usage") && j["usage"].is_object())
                            usage_tokens = j["usage"].value("completion_tokens", -1);
                          if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
                          if (shape.chat && !chat_chunk_has_output(j)) continue;  // the role chunk, the finish chunk
                          auto now = clk::now();
                          if (r.tokens == 0) r.ttft = std::chrono::duration<double>(now - t0).count(), r.streamed = true;
                          else r.itl.push_back(std::chrono::duration<double>(now - last).count());
                          last = now;
                          ++r.tokens;
                        }
                        return true;
                      };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = std::chrono::duration<double>(clk::now() - t0).count();
  if (usage_tokens >= 0) r.tokens = usage_tokens;
  if (!sent) r.error = httplib::to_string(err);
  else if (res.status != 200) r.error = fmt::format("HTTP {}", res.status);
  else r.ok = true;
  return r;
}

// The server's speculative-decoding counters (osprey's /metrics; empty for a server without them).
std::map<std::string, double> spec_counters(const std::string& host, int port) {
  std::map<std::string, double> out;
  httplib::Client cli(host, port);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return out;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);)
    for (const char* name : {"osprey_spec_decode_num_drafts_total", "osprey_spec_decode_num_draft_tokens_total",
                             "osprey_spec_decode_num_accepted_tokens_total", "osprey_spec_decode_emitted_tokens_total",
                             "osprey_spec_decode_steps_total", "osprey_engine_step_seconds_count"})
      if (line.rfind(std::string(name) + " ", 0) == 0) out[name] = std::atof(line.c_str() + std::strlen(name) + 1);
  return out;
}

}  // namespace

void add_bench_serve(CLI::App* bench) {
  struct Args {
    std::string url = "http://127.0.0.1:8000", concurrency = "1,8,64", model;
    int input_len = 128, output_len = 128, num_prompts = 0, shared_prefix = 0;
    uint64_t seed = 0;
    std::string api = "completions", response_format;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand("serve", "Load-test a running osprey (or any OpenAI-compatible) server");
  cmd->add_option("--url", args->url, "server base URL");
  cmd->add_option("--concurrency", args->concurrency, "comma-separated requests in flight, one run each");
  cmd->add_option("--input-len", args->input_len, "prompt tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", args->output_len, "generated tokens per request")->check(CLI::PositiveNumber);
  cmd->add_option("--shared-prefix", args->shared_prefix,
                  "the first N prompt tokens are the same in every request (a system prompt; prefix caching)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-prompts", args->num_prompts, "requests per run (default: 4 x concurrency, at least 8)");
  cmd->add_option("--model", args->model, "model id (default: the first of /v1/models)");
  cmd->add_option("--seed", args->seed, "seed of the random prompts");
  cmd->add_option("--api", args->api, "completions (token prompts) or chat (word prompts; tokens counted from usage)")
      ->check(CLI::IsMember({"completions", "chat"}));
  cmd->add_option("--response-format", args->response_format, "chat: json_object, every request a structured output")
      ->check(CLI::IsMember({"json_object"}));
  cmd->callback([args] {
    if (!args->response_format.empty() && args->api != "chat") fail("--response-format needs --api chat");
    if (args->shared_prefix > args->input_len) fail("--shared-prefix must not exceed --input-len");
    if (args->shared_prefix > 0 && args->api != "completions") fail("--shared-prefix needs --api completions (token prompts)");
    std::smatch m;
    std::regex re(R"(^http://([^/:]+)(?::(\d+))?/?$)");
    if (!std::regex_match(args->url, m, re)) fail("--url must look like http://HOST:PORT");
    const std::string host = m[1];
    const int port = m[2].matched ? std::stoi(m[2]) : 80;
    std::string model = args->model;
    if (model.empty()) {
      httplib::Client cli(host, port);
      auto res = cli.Get("/v1/models");
      if (!res || res->status != 200) fail("cannot list models at {}", args->url);
      auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (j.is_discarded() || j["data"].empty()) fail("{}/v1/models lists no model", args->url);
      model = j["data"][0]["id"];
    }
    nlohmann::json runs = nlohmann::json::array();
    fmt::print(stderr, "{:>5} {:>6} {:>9} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10}\n", "conc", "reqs", "secs",
               "out tok/s", "total tok/s", "ttft p50", "ttft p99", "itl p50", "itl p99");
    for (int c : parse_int_list(args->concurrency, "--concurrency", "a positive integer", /*positive=*/true)) {
      const int n = args->num_prompts > 0 ? args->num_prompts : std::max(8, 4 * c);
      std::mt19937_64 rng(args->seed + uint64_t(c));
      std::vector<std::vector<int32_t>> prompts(n);
      std::mt19937_64 prefix_rng(args->seed ^ 0x5eedull);
      std::vector<int32_t> prefix(size_t(args->shared_prefix));
      for (auto& t : prefix) t = int32_t(prefix_rng() % 199998);
      for (auto& p : prompts) {
        p.resize(args->input_len);
        for (auto& t : p) t = int32_t(rng() % 199998);
        std::copy(prefix.begin(), prefix.end(), p.begin());
      }
      std::vector<RequestResult> results(n);
      const std::map<std::string, double> spec0 = spec_counters(host, port);
      std::atomic<int> next{0};
      auto t0 = clk::now();
      std::vector<std::thread> workers;
      // A client per worker whose connection is kept alive across its requests, as the field's
      // serving benchmarks (vLLM's aiohttp session) and the OpenAI SDKs keep theirs: a request's
      // TTFT then holds no TCP connect (before the twenty-seventh session it did, a new
      // connection per request).
      for (int w = 0; w < c; ++w)
        workers.emplace_back([&] {
          httplib::Client cli(host, port);
          cli.set_keep_alive(true);
          cli.set_tcp_nodelay(true);  // as aiohttp's and the SDKs' clients: a request's header and body writes not held by Nagle
          cli.set_read_timeout(600, 0);
          for (int i; (i = next++) < n;)
            results[i] = one_request(cli, model, prompts[i], args->output_len, {args->api == "chat", args->response_format});
        });
      for (auto& w : workers) w.join();
      const double secs = std::chrono::duration<double>(clk::now() - t0).count();
      std::vector<double> ttft, itl;
      int ok = 0, out_tokens = 0;
      std::string first_error;
      for (auto& r : results) {
        if (!r.ok) {
          if (first_error.empty()) first_error = r.error;
          continue;
        }
        ++ok;
        out_tokens += r.tokens;
        if (r.streamed) ttft.push_back(r.ttft);  // a chat answer of control tokens alone streams no text
        itl.insert(itl.end(), r.itl.begin(), r.itl.end());
      }
      nlohmann::json run = {{"concurrency", c}, {"requests", n}, {"succeeded", ok}, {"seconds", secs},
                            {"input_len", args->input_len}, {"output_len", args->output_len},
                            {"output_tokens_per_s", out_tokens / secs},
                            {"total_tokens_per_s", (out_tokens + double(ok) * args->input_len) / secs},
                            {"requests_per_s", ok / secs},
                            {"ttft_requests", ttft.size()},
                            {"ttft_p50_ms", percentile(ttft, 50) * 1e3}, {"ttft_p99_ms", percentile(ttft, 99) * 1e3},
                            {"itl_p50_ms", percentile(itl, 50) * 1e3}, {"itl_p99_ms", percentile(itl, 99) * 1e3}};
      if (!first_error.empty()) run["first_error"] = first_error;
      if (std::map<std::string, double> spec1 = spec_counters(host, port); !spec1.empty() && !spec0.empty()) {
        auto d = [&](const char* k) { return spec1[k] - spec0.at(k); };
        const double chunks = d("osprey_spec_decode_num_drafts_total"), drafts = d("osprey_spec_decode_num_draft_tokens_total");
        const double accepted = d("osprey_spec_decode_num_accepted_tokens_total"), steps = d("osprey_engine_step_seconds_count");
        run["speculative"] = {{"verify_chunks", chunks},
                              {"draft_tokens", drafts},
                              {"accepted_tokens", accepted},
                              {"acceptance_rate", drafts > 0 ? accepted / drafts : 0.0},
                              {"tokens_per_verify_chunk", chunks > 0 ? d("osprey_spec_decode_emitted_tokens_total") / chunks : 0.0},
                              {"engine_steps", steps},
                              {"steps_with_drafts", d("osprey_spec_decode_steps_total")},
                              {"accepted_tokens_per_step", steps > 0 ? accepted / steps : 0.0}};
        if (drafts > 0)
          fmt::print(stderr, "      speculative: {:.0f} of {:.0f} draft tokens accepted ({:.1f}%), {:.2f} accepted per engine step\n",
                     accepted, drafts, 100 * accepted / drafts, steps > 0 ? accepted / steps : 0.0);
      }
      if (args->shared_prefix > 0) run["shared_prefix"] = args->shared_prefix;
      if (n <= 16) {  // each request's end-to-end latency, in submission order
        nlohmann::json lat = nlohmann::json::array();
        for (auto& r : results) lat.push_back(r.ok ? r.e2e * 1e3 : -1.0);
        run["e2e_ms"] = lat;
      }
      fmt::print(stderr, "{:>5} {:>6} {:>9.2f} {:>11.1f} {:>11.1f} {:>8.1f}ms {:>8.1f}ms {:>8.1f}ms {:>8.1f}ms\n", c, ok, secs,
                 double(run["output_tokens_per_s"]), double(run["total_tokens_per_s"]), double(run["ttft_p50_ms"]),
                 double(run["ttft_p99_ms"]), double(run["itl_p50_ms"]), double(run["itl_p99_ms"]));
      runs.push_back(run);
    }
    fmt::print("{}\n", nlohmann::json({{"url", args->url}, {"model", model}, {"runs", runs}}).dump(2));
  });
}

}  // namespace osprey::cli
