#include "server/request_fields.h"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <set>

namespace osprey::server {

namespace {
// `key` of `b`: `fallback` when absent or null; refused as "must be KIND" where `is` rejects it.
template <typename T, typename Is>
T typed_field(const json& b, const char* key, T fallback, Is is, const char* kind) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return fallback;
  if (!is(*it)) throw ApiError(400, fmt::format("'{}' must be {}", key, kind), "invalid_request_error", key);
  return it->get<T>();
}
}  // namespace

template <>
double get_field(const json& b, const char* key, double fallback) {
  return typed_field(b, key, fallback, [](const json& v) { return v.is_number(); }, "a number");
}
template <>
int64_t get_field(const json& b, const char* key, int64_t fallback) {
  return typed_field(b, key, fallback, [](const json& v) { return v.is_number_integer(); }, "an integer");
}
template <>
bool get_field(const json& b, const char* key, bool fallback) {
  return typed_field(b, key, fallback, [](const json& v) { return v.is_boolean(); }, "a boolean");
}

bool wants_usage(const json& b) {
  auto so = b.find("stream_options");
  return so != b.end() && so->is_object() && get_field<bool>(*so, "include_usage", false);
}

std::vector<std::string> stop_field(const json& b) {
  auto it = b.find("stop");
  if (it == b.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  if (it->is_array() && it->size() <= 4) {
    std::vector<std::string> v;
    for (auto& s : *it) {
      if (!s.is_string()) throw ApiError(400, "'stop' entries must be strings", "invalid_request_error", "stop");
      v.push_back(s.get<std::string>());
    }
    return v;
  }
  throw ApiError(400, "'stop' must be a string or an array of at most 4 strings", "invalid_request_error", "stop");
}

// Every field of a chat or completions request is one osprey honours, one it refuses by value
// (refuse_unhonoured_fields), or an identifier that changes nothing in the answer (user, metadata,
// prompt_cache_key, safety_identifier). Any other is refused with a 400 naming it, as OpenAI's
// API does, not ignored: a vLLM-style min_p or repetition_penalty would otherwise be dropped
// without a word. (/v1/responses checks its own list: responses_api.cpp.)
void refuse_unknown_fields(const json& b, Endpoint endpoint) {
  static const std::set<std::string> kCommon = {
      "model", "n", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
      "top_k", "seed", "stop", "logit_bias", "presence_penalty", "frequency_penalty", "logprobs", "ignore_eos",
      "speculative", "user", "metadata", "store", "service_tier"};
  static const std::set<std::string> kChat = {
      "messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls", "response_format", "reasoning_effort",
      "reasoning", "reasoning_budget", "modalities", "verbosity", "audio", "prediction", "web_search_options",
      "functions", "function_call", "prompt_cache_key", "safety_identifier"};
  static const std::set<std::string> kCompletions = {"prompt", "echo", "best_of", "suffix", "response_format"};
  const bool chat = endpoint == Endpoint::Chat;
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!kCommon.count(it.key()) && !(chat ? kChat : kCompletions).count(it.key()))
      throw ApiError(400,
                     fmt::format("Unrecognized request argument supplied: {} (not a field of {} that osprey serves)",
                                 it.key(), chat ? "/v1/chat/completions" : "/v1/completions"),
                     "invalid_request_error", it.key());
  // stream_options, as OpenAI's API takes it: only with stream true; include_usage honoured,
  // include_obfuscation false accepted (the chunks carry no obfuscation padding), nothing else.
  if (auto so = b.find("stream_options"); so != b.end() && !so->is_null()) {
    auto stream = b.find("stream");
    if (stream == b.end() || *stream != true)
      throw ApiError(400, "'stream_options' is only allowed when 'stream' is true", "invalid_request_error",
                     "stream_options");
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "invalid_request_error", "stream_options");
    for (auto it = so->begin(); it != so->end(); ++it) {
      const std::string field = "stream_options." + it.key();
      if (it.key() == "include_usage" || it.key() == "include_obfuscation") {
        if (!it->is_boolean() && !it->is_null())
          throw ApiError(400, fmt::format("'{}' must be a boolean", field), "invalid_request_error", field);
        if (it.key() == "include_obfuscation" && *it == true)
          throw ApiError(400, "'stream_options.include_obfuscation' is not supported: the chunks carry no obfuscation padding",
                         "invalid_request_error", field);
        continue;
      }
      throw ApiError(400, fmt::format("Unrecognized request argument supplied: {}", field), "invalid_request_error", field);
    }
  }
}

// Fields osprey does not honour are refused with a 400 naming them, never ignored. Their
// neutral values (echo false, best_of 1, an empty suffix) pass.
void refuse_unhonoured_fields(const json& b) {
  auto given = [&](const char* key) -> const json* {
    auto it = b.find(key);
    return it == b.end() || it->is_null() ? nullptr : &*it;
  };
  auto refuse = [](const char* key, const std::string& why) {
    throw ApiError(400, fmt::format("'{}' is not supported: {}", key, why), "invalid_request_error", key);
  };
  if (const json* v = given("echo"); v && *v != false) refuse("echo", "the prompt is not echoed");
  if (const json* v = given("best_of"); v && *v != 1) refuse("best_of", "only 1 is supported");
  if (const json* v = given("suffix"); v && !(v->is_string() && v->get_ref<const std::string&>().empty()))
    refuse("suffix", "insertion is not supported");
  if (const json* v = given("parallel_tool_calls"); v && !v->is_boolean())
    throw ApiError(400, "'parallel_tool_calls' must be a boolean", "invalid_request_error", "parallel_tool_calls");
  // OpenAI fields that would change the answer and that osprey does not serve.
  for (const char* key : {"audio", "prediction", "web_search_options", "functions", "function_call"})
    if (given(key)) refuse(key, "this server serves gpt-oss text chat with `tools` (not audio, predicted outputs, web search or legacy functions)");
  if (const json* v = given("modalities"); v && *v != json::array({"text"})) refuse("modalities", "only [\"text\"]");
  if (const json* v = given("store"); v && *v != false) refuse("store", "chat completions are not stored (use /v1/responses)");
  if (const json* v = given("service_tier"); v && *v != "auto" && *v != "default") refuse("service_tier", "only auto or default");
  if (const json* v = given("verbosity"); v && *v != "medium") refuse("verbosity", "only medium");
}

void check_identifier_fields(const json& b) {
  for (const char* key : {"user", "prompt_cache_key", "safety_identifier"})
    if (auto it = b.find(key); it != b.end() && !it->is_null() && !it->is_string())
      throw ApiError(400, fmt::format("'{}' must be a string", key), "invalid_request_error", key);
  if (auto m = b.find("metadata"); m != b.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16)
      throw ApiError(400, "'metadata' must be an object of at most 16 string values", "invalid_request_error", "metadata");
    for (auto it = m->begin(); it != m->end(); ++it)
      if (it.key().size() > 64 || !it->is_string() || it->get_ref<const std::string&>().size() > 512)
        throw ApiError(400,
                       fmt::format("'metadata.{}': keys are at most 64 characters and values strings of at most 512", it.key()),
                       "invalid_request_error", "metadata");
  }
}

// logit_bias, presence_penalty, frequency_penalty.
LogitAdjust logit_adjust_fields(const json& b, int vocab) {
  LogitAdjust a;
  a.presence = float(get_field<double>(b, "presence_penalty", 0.0));
  a.frequency = float(get_field<double>(b, "frequency_penalty", 0.0));
  for (auto [key, v] : {std::pair{"presence_penalty", a.presence}, std::pair{"frequency_penalty", a.frequency}})
    if (!(v >= -2 && v <= 2)) throw ApiError(400, fmt::format("'{}' must be between -2 and 2", key), "invalid_request_error", key);
  if (auto lb = b.find("logit_bias"); lb != b.end() && !lb->is_null()) {
    if (!lb->is_object()) throw ApiError(400, "'logit_bias' must map token ids to biases", "invalid_request_error", "logit_bias");
    if (lb->size() > 1024) throw ApiError(400, "'logit_bias' holds at most 1024 tokens", "invalid_request_error", "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      char* end = nullptr;
      const long id = std::strtol(it.key().c_str(), &end, 10);
      if (it.key().empty() || *end || id < 0 || id >= vocab)
        throw ApiError(400, fmt::format("logit_bias key '{}' is not a token id in [0, {})", it.key(), vocab),
                       "invalid_request_error", "logit_bias");
      if (!it.value().is_number() || !(it.value().get<double>() >= -100 && it.value().get<double>() <= 100))
        throw ApiError(400, fmt::format("logit_bias[{}] must be a number between -100 and 100", it.key()),
                       "invalid_request_error", "logit_bias");
      a.bias.push_back({int32_t(id), float(it.value().get<double>())});
    }
  }
  return a;
}

// chat: logprobs true with top_logprobs 0..20; completions: logprobs k in 0..20. -1: none.
int logprobs_field(const json& b, bool chat) {
  if (chat) {
    const bool on = get_field<bool>(b, "logprobs", false);
    const int64_t top = get_field<int64_t>(b, "top_logprobs", -1);
    if (top >= 0 && !on) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "invalid_request_error", "top_logprobs");
    if (top > 20) throw ApiError(400, "'top_logprobs' must be between 0 and 20", "invalid_request_error", "top_logprobs");
    return on ? int(std::max<int64_t>(top, 0)) : -1;
  }
  auto it = b.find("logprobs");
  if (it == b.end() || it->is_null()) return -1;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 20)
    throw ApiError(400, "'logprobs' must be an integer between 0 and 20", "invalid_request_error", "logprobs");
  return int(it->get<int64_t>());
}

}  // namespace osprey::server
