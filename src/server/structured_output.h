// Structured outputs of a chat request: response_format (json_schema, json_object), strict
// tools, forced tool calls and the reasoning budget, turned into the HarmonyConstraint's spec.
// Compiled grammars (and their mask caches) are shared between requests with the same schema.
#pragma once
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "core/error.h"
#include "server/harmony_constraint.h"

namespace osprey::server {

// A request field that cannot be honoured; param names it for the 400.
struct FieldError : Error {
  std::string param;
  FieldError(std::string p, const std::string& message) : Error(message), param(std::move(p)) {}
};

class GrammarRegistry {
 public:
  GrammarRegistry(const harmony::Tokenizer& tok, size_t capacity = 64) : tok_(tok), capacity_(capacity) {}
  // The grammar of a schema ("json_object": any object); throws grammar::SchemaError.
  std::shared_ptr<grammar::MaskCache> get(const nlohmann::ordered_json& schema);
  grammar::MaskStats stats();  // over every grammar it held

 private:
  const harmony::Tokenizer& tok_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::string> lru_;
  grammar::MaskStats evicted_;
  std::map<std::string, std::pair<std::shared_ptr<grammar::MaskCache>, std::list<std::string>::iterator>> by_schema_;
};

struct StructuredSettings {
  int default_reasoning_budget = 1024;  // analysis tokens of a constrained request (server flag)
};

// The constraint a chat-completions request (or a Responses request mapped to one) asks for;
// nullopt when it asks for none. `declared`: the functions rendered into the prompt.
// Throws FieldError naming the field (an unsupported schema keyword names it too).
std::optional<HarmonyConstraintSpec> structured_spec(const nlohmann::ordered_json& req, const std::set<std::string>& declared,
                                                     GrammarRegistry& grammars, const StructuredSettings& settings,
                                                     int max_tokens);

}  // namespace osprey::server
