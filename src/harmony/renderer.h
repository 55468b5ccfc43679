// Harmony renderer: conversation -> token ids, byte- and token-exact with openai/harmony.
// Text is always encoded as ordinary text (a user typing "<|end|>" gets text tokens); control
// tokens are appended by id.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harmony/conversation.h"
#include "harmony/tokenizer.h"

namespace osprey::harmony {

struct RenderOptions {
  // openai/harmony's rule: when the last assistant message is on `final`, drop the analysis
  // messages before the first `final` message.
  bool auto_drop_analysis = true;
};

// JSON schema -> the TypeScript-like type text of a `namespace functions` block.
std::string json_schema_to_typescript(const ordered_json& schema, const std::string& indent);
// The "# Tools" section for a set of namespaces.
std::string render_tools_section(const ToolNamespaces& tools);

class Renderer {
 public:
  explicit Renderer(const Tokenizer& tok) : tok_(tok) {}
  void render_message(const Message& m, bool conversation_has_function_tools, std::vector<int32_t>& out) const;
  std::vector<int32_t> render_conversation(const std::vector<Message>& msgs, const RenderOptions& opt) const;
  // render_conversation, then <|start|> + next_role (ids 200006, 173781 for assistant).
  std::vector<int32_t> render_for_completion(const std::vector<Message>& msgs, const RenderOptions& opt,
                                             const std::string& next_role = "assistant") const;
  // Messages msgs[first..] (all the assistant's) as the model writes them after a prompt that ends in
  // <|start|>assistant: that header is left out, a final answer ends in <|return|>, a tool call in
  // <|call|>. Throws unless the reply ends in one of those two.
  std::vector<int32_t> render_reply(const std::vector<Message>& msgs, size_t first) const;

 private:
  void text(std::string_view s, std::vector<int32_t>& out) const { tok_.encode_ordinary_into(s, out); }
  const Tokenizer& tok_;
};

}  // namespace osprey::harmony
