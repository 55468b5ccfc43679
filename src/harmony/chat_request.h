// OpenAI chat-completions request -> Harmony conversation (harmony.md section 4.1, "Us" rules):
// all client system/developer texts become the developer # Instructions; tools the `functions`
// namespace (omitted for tool_choice "none"); reasoning_effort (or reasoning.effort) the system
// Reasoning line; assistant history keeps its reasoning only when no final answer follows it;
// each tool call is its own commentary message to functions.NAME ended by <|call|>; tool
// results are authored by functions.NAME (found through tool_call_id) and addressed to assistant.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "harmony/conversation.h"

namespace osprey::harmony {

struct ChatRenderSettings {
  std::string current_date;  // YYYY-MM-DD for the system message; empty: none
  // The last message is an assistant reply to train on (`osprey render --reply`): its reasoning
  // is kept, and it does not count as a later final answer for the messages before it, so they
  // render exactly as in the request that asked for it.
  bool last_is_reply = false;
  // Refuse a request whose prompt text (message texts and the rendered tools) exceeds this many
  // bytes, before anything is tokenized; 0: no limit.
  size_t max_prompt_bytes = 0;
};

// Request limits (documented in the README): tool names as OpenAI's /^[a-zA-Z0-9_-]{1,64}$/, JSON
// schemas known types with `required` naming declared properties.
inline constexpr size_t kMaxToolNameLength = 64;

// The prompt's text is over ChatRenderSettings::max_prompt_bytes (the server: 400
// context_length_exceeded).
struct PromptTooLong : Error {
  using Error::Error;
};

// Throws osprey::Error naming the offending field on a malformed request, PromptTooLong over the
// prompt bound.
std::vector<Message> conversation_from_chat_request(const ordered_json& request, const ChatRenderSettings& settings);

// A chat request's response_format, checked (an Error naming the field otherwise): absent, null or
// text; json_object; or json_schema, with the format the developer message shows (the server
// holds the decoding to format->schema). The one reading of the field, for the conversation and
// for the server's constraint alike.
struct ResponseFormatField {
  enum class Type { Text, JsonObject, JsonSchema } type = Type::Text;
  std::optional<ResponseFormat> format;  // json_schema only
};
ResponseFormatField response_format_field(const ordered_json& request);

// "2026-11-29" in UTC.
std::string today_utc();

}  // namespace osprey::harmony
