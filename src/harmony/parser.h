// Streaming Harmony parser: token ids in, events out. Tolerant of what the model really emits
// (recipient before or after the channel, no space before <|constrain|>, stray text after
// <|channel|>, tool calls on analysis, output that ends without <|call|> or <|return|>, a
// <|start|> or stray terminator where none belongs). It never throws: odd input becomes
// best-effort content plus a diagnostic.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harmony/conversation.h"
#include "harmony/tokenizer.h"

namespace osprey::harmony {

struct ParsedMessage {
  std::string role;
  std::optional<std::string> name;  // a tool message's author (its whole header word)
  std::optional<std::string> recipient, channel, content_type;
  std::string content;
  bool complete = false;            // ended by <|end|>, <|call|> or <|return|> (not by end of input)
  int32_t terminator = -1;          // that token, or -1
  bool is_tool_call() const { return recipient.has_value() && *recipient != "all" && *recipient != "assistant" && role != "tool"; }
};

struct ParserEvent {
  enum class Type { MessageStart, ContentDelta, MessageEnd, ToolCall, Diagnostic };
  Type type;
  ParsedMessage message;  // the header (MessageStart), the whole message (MessageEnd, ToolCall)
  std::string text;       // the delta (ContentDelta) or the diagnostic
};

class StreamingParser {
 public:
  // start_role: the prompt ended in <|start|>ROLE, so the first header has no role text.
  StreamingParser(const Tokenizer& tok, std::optional<std::string> start_role = "assistant");

  std::vector<ParserEvent> push(int32_t token);
  std::vector<ParserEvent> finish();  // end of input: closes an unfinished message

  const std::vector<ParsedMessage>& messages() const { return messages_; }
  const std::vector<std::string>& diagnostics() const { return diagnostics_; }
  // The message being received, if its header is complete.
  const std::optional<ParsedMessage>& current() const { return current_; }

 private:
  enum class State { ExpectStart, Header, Content };
  void diag(std::vector<ParserEvent>& ev, std::string text);
  void begin_header(std::optional<std::string> role);
  void open_message(std::vector<ParserEvent>& ev);
  void close_message(std::vector<ParserEvent>& ev, int32_t terminator);
  ParsedMessage parse_header(std::vector<ParserEvent>& ev);

  const Tokenizer& tok_;
  State state_;
  std::optional<std::string> header_role_;  // role known before the header text
  std::string header_;                      // header text so far (specials as their strings)
  std::optional<ParsedMessage> current_;
  Utf8StreamDecoder utf8_;
  std::vector<ParsedMessage> messages_;
  std::vector<std::string> diagnostics_;
  std::string last_role_ = "assistant";
};

// Whole-sequence convenience: every message, complete or not.
std::vector<ParsedMessage> parse_messages(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                          std::optional<std::string> start_role,
                                          std::vector<std::string>* diagnostics = nullptr);

}  // namespace osprey::harmony
