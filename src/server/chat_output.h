// Model output tokens -> OpenAI chat-completion output, as tokens arrive. The Harmony parser's
// events become deltas: analysis -> reasoning_content (and reasoning), final and recipient-less
// commentary -> content, a message addressed to functions.NAME (on commentary or analysis) ->
// tool_calls with streamed arguments. Calls to undeclared or built-in tools are dropped, not
// leaked into content. Used by both the streaming and the non-streaming responses.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harmony/parser.h"
#include "server/stop_strings.h"

namespace osprey::server {

using json = nlohmann::ordered_json;

class ChatOutputBuilder {
 public:
  ChatOutputBuilder(const harmony::Tokenizer& tok, std::set<std::string> declared_tools, std::vector<std::string> stop);

  // Feeds one generated token; returns the deltas it produced (each a chat.completion.chunk
  // `delta` object). stopped() turns true when a stop string was met.
  std::vector<json> push(int32_t token);
  std::vector<json> finish();  // end of generation (flushes held text and an unfinished message)
  bool stopped() const { return stop_.stopped(); }
  // Whether the last pushed token was content of the answer (what chat logprobs cover).
  bool last_was_content() const { return last_was_content_; }

  // The non-streaming message, the finish reason given the engine's, and token counts.
  json message() const;
  std::string finish_reason(const std::string& engine_reason) const;
  int reasoning_tokens() const { return reasoning_tokens_; }
  const std::vector<std::string>& diagnostics() const { return parser_.diagnostics(); }

 private:
  enum class Route { Reasoning, Content, ToolCall, Dropped };
  void handle(const harmony::ParserEvent& e, std::vector<json>& out);
  void emit_content(std::string text, bool final_flush, std::vector<json>& out);

  harmony::StreamingParser parser_;
  std::set<std::string> declared_;
  StopStringFilter stop_;
  Route route_ = Route::Content;
  std::string reasoning_, content_;
  json tool_calls_ = json::array();
  int reasoning_tokens_ = 0;
  bool last_was_content_ = false;
};

std::string new_id(const char* prefix);  // prefix + 24 random hex digits

}  // namespace osprey::server
