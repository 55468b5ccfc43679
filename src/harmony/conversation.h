// The Harmony conversation model (openai/harmony chat.rs, restated): messages with an author,
// optional recipient, channel and content type, and text, system or developer content.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace osprey::harmony {

using ordered_json = nlohmann::ordered_json;  // schema properties render in insertion order

struct ToolDescription {
  std::string name;
  std::string description;
  ordered_json parameters;  // JSON schema, or null for a tool without parameters
};

struct ToolNamespace {
  std::string name;
  std::optional<std::string> description;
  std::vector<ToolDescription> tools;
};

using ToolNamespaces = std::map<std::string, ToolNamespace>;  // rendered in name order

struct SystemContent {
  std::optional<std::string> model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
  std::optional<std::string> reasoning_effort = "medium";  // low | medium | high
  std::optional<std::string> knowledge_cutoff = "2024-06";
  std::optional<std::string> conversation_start_date;     // YYYY-MM-DD
  std::vector<std::string> valid_channels = {"analysis", "commentary", "final"};
  bool channel_required = true;
  ToolNamespaces tools;  // built-in tools (browser, python)
};

// A structured output's format (a chat request's response_format json_schema): the developer
// message's "# Response Formats" section, its schema as JSON text.
struct ResponseFormat {
  std::string name;
  std::optional<std::string> description;
  ordered_json schema;
};

struct DeveloperContent {
  std::optional<std::string> instructions;
  ToolNamespaces tools;  // "functions" for function tools
  std::optional<ResponseFormat> response_format;
};

struct Message {
  std::string role;  // system | developer | user | assistant | tool
  std::optional<std::string> name;       // author name; a tool message's header is its name
  std::optional<std::string> recipient;  // e.g. functions.get_weather
  std::optional<std::string> channel;    // analysis | commentary | final
  std::optional<std::string> content_type;
  std::variant<std::string, SystemContent, DeveloperContent> content;

  const std::string& text() const { return std::get<std::string>(content); }
};

inline const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
inline bool is_role(std::string_view s) {
  for (const char* r : kRoles)
    if (s == r) return true;
  return false;
}

}  // namespace osprey::harmony
