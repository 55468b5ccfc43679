#include "server/chat_output.h"

#include <random>

namespace osprey::server {

std::string new_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  snprintf(buf, sizeof buf, "%016llx%08x", static_cast<unsigned long long>(rng()), static_cast<unsigned>(rng()));
  return std::string(prefix) + buf;
}

ChatOutputBuilder::ChatOutputBuilder(const harmony::Tokenizer& tok, std::set<std::string> declared,
                                     std::vector<std::string> stop)
    : parser_(tok, "assistant"), declared_(std::move(declared)), stop_(std::move(stop)) {}

std::vector<json> ChatOutputBuilder::push(int32_t token) {
  std::vector<json> out;
  last_was_content_ = false;
  if (stop_.stopped()) return out;
  const bool in_reasoning = route_ == Route::Reasoning && parser_.current().has_value();
  for (auto& e : parser_.push(token)) handle(e, out);
  if (in_reasoning) ++reasoning_tokens_;
  return out;
}

std::vector<json> ChatOutputBuilder::finish() {
  std::vector<json> out;
  if (!stop_.stopped())
    for (auto& e : parser_.finish()) handle(e, out);
  if (stop_.holding()) emit_content("", /*final_flush=*/true, out);
  return out;
}

void ChatOutputBuilder::handle(const harmony::ParserEvent& e, std::vector<json>& out) {
  using T = harmony::ParserEvent::Type;
  switch (e.type) {
    case T::MessageStart: {
      const auto& m = e.message;
      if (m.recipient && m.recipient->rfind("functions.", 0) == 0) {
        std::string name = m.recipient->substr(10);
        // Tolerate a content type glued to the name ("get_weatherjson").
        if (!declared_.count(name) && name.size() > 4 && name.ends_with("json") &&
            declared_.count(name.substr(0, name.size() - 4)))
          name.resize(name.size() - 4);
        if (!declared_.count(name)) {  // undeclared (or no tools at all): dropped, not leaked
          route_ = Route::Dropped;
          break;
        }
        route_ = Route::ToolCall;
        json call = {{"index", tool_calls_.size()}, {"id", new_id("call_")}, {"type", "function"},
                     {"function", {{"name", name}, {"arguments", ""}}}};
        tool_calls_.push_back(call);
        out.push_back({{"tool_calls", json::array({call})}});
      } else if (m.recipient && *m.recipient != "all" && *m.recipient != "user") {
        route_ = Route::Dropped;  // built-in tools (browser, python) are not served here
      } else if (m.channel == "analysis") {
        route_ = Route::Reasoning;
      } else {
        route_ = Route::Content;  // final, and commentary without a recipient (a preamble)
        if (!content_.empty() || stop_.holding()) emit_content("\n", false, out);
      }
      break;
    }
    case T::ContentDelta:
      if (route_ == Route::Reasoning) {
        reasoning_ += e.text;
        out.push_back({{"reasoning_content", e.text}, {"reasoning", e.text}});
      } else if (route_ == Route::Content) {
        last_was_content_ = true;
        emit_content(e.text, false, out);
      } else if (route_ == Route::ToolCall) {
        json& call = tool_calls_.back();
        call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + e.text;
        out.push_back({{"tool_calls", json::array({{{"index", call["index"]}, {"function", {{"arguments", e.text}}}}})}});
      }
      break;
    default:
      break;
  }
}

// Content passes through a hold-back buffer so that a stop string split across tokens is never
// half sent; text after a stop string is dropped.
void ChatOutputBuilder::emit_content(std::string text, bool final_flush, std::vector<json>& out) {
  std::string ready = stop_.push(text);
  if (final_flush) ready += stop_.flush();
  if (!ready.empty()) {
    content_ += ready;
    out.push_back({{"content", ready}});
  }
}

json ChatOutputBuilder::message() const {
  json m = {{"role", "assistant"}, {"content", content_.empty() && !tool_calls_.empty() ? json() : json(content_)}};
  if (!reasoning_.empty()) {
    m["reasoning_content"] = reasoning_;
    m["reasoning"] = reasoning_;
  }
  if (!tool_calls_.empty()) m["tool_calls"] = tool_calls_;
  return m;
}

std::string ChatOutputBuilder::finish_reason(const std::string& engine_reason) const {
  if (!tool_calls_.empty()) return "tool_calls";
  if (stop_.stopped()) return "stop";
  return engine_reason == "length" ? "length" : "stop";
}

}  // namespace osprey::server
