#include "server/structured_output.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/json_grammar.h"
#include "harmony/chat_request.h"
#include "grammar/schema_error.h"

namespace osprey::server {

using ojson = nlohmann::ordered_json;

std::shared_ptr<grammar::MaskCache> GrammarRegistry::get(const ojson& schema) {
  const std::string key = schema.dump();
  {
    std::lock_guard lk(mu_);
    if (auto it = by_schema_.find(key); it != by_schema_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  auto g = schema == "json_object" ? grammar::compile_any_json_object() : grammar::compile_json_schema(schema);
  auto cache = std::make_shared<grammar::MaskCache>(grammar::TokenIndex::for_tokenizer(tok_), g);
  std::lock_guard lk(mu_);
  if (auto it = by_schema_.find(key); it != by_schema_.end()) return it->second.first;
  lru_.push_front(key);
  by_schema_[key] = {cache, lru_.begin()};
  if (by_schema_.size() > capacity_) {
    const grammar::MaskStats gone = by_schema_[lru_.back()].first->stats();
    evicted_.computed += gone.computed, evicted_.cached += gone.cached;
    by_schema_.erase(lru_.back());
    lru_.pop_back();
  }
  return cache;
}

grammar::MaskStats GrammarRegistry::stats() {
  std::lock_guard lk(mu_);
  grammar::MaskStats s = evicted_;
  for (auto& [k, v] : by_schema_) {
    grammar::MaskStats x = v.first->stats();
    s.computed += x.computed, s.cached += x.cached;
  }
  return s;
}

namespace {

std::shared_ptr<grammar::MaskCache> compile_or_refuse(GrammarRegistry& g, const ojson& schema, const std::string& param) {
  try {
    return g.get(schema);
  } catch (const grammar::SchemaError& e) {
    throw FieldError(param, fmt::format("{}: unsupported JSON Schema ('{}'): {}", param, e.keyword, e.what()));
  }
}

// A strict function without parameters takes no arguments: {}.
const ojson kNoArguments = {{"type", "object"}, {"properties", ojson::object()}, {"additionalProperties", false}};

}  // namespace

std::optional<HarmonyConstraintSpec> structured_spec(const ojson& req, const std::set<std::string>& declared,
                                                     GrammarRegistry& grammars, const StructuredSettings& settings,
                                                     int max_tokens) {
  HarmonyConstraintSpec spec;
  spec.declared.assign(declared.begin(), declared.end());
  spec.max_tokens = max_tokens;
  // response_format, read as the conversation reads it (the request was checked there first)
  harmony::ResponseFormatField rf;
  try {
    rf = harmony::response_format_field(req);
  } catch (const Error& e) {
    throw FieldError("response_format", e.what());
  }
  if (rf.type == harmony::ResponseFormatField::Type::JsonObject) spec.final_grammar = grammars.get("json_object");
  if (rf.type == harmony::ResponseFormatField::Type::JsonSchema)
    spec.final_grammar = compile_or_refuse(grammars, rf.format->schema, "response_format");
  // tool_choice: required or a named function forces a call.
  if (auto tc = req.find("tool_choice"); tc != req.end() && !declared.empty()) {
    if (tc->is_object()) spec.forced_calls = {(*tc)["function"]["name"].get<std::string>()};
    else if (*tc == "required") spec.forced_calls = spec.declared;
  }
  // Arguments: strict functions always, forced calls too (a schema this engine cannot compile
  // falls back to any JSON object for a function that is not strict).
  if (auto tools = req.find("tools"); tools != req.end() && tools->is_array())
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& f = (*tools)[i]["function"];
      const std::string name = f["name"].get<std::string>();
      if (!declared.count(name)) continue;
      const bool strict = f.contains("strict") && f["strict"] == true;
      const bool forced = std::count(spec.forced_calls.begin(), spec.forced_calls.end(), name) > 0;
      if (!strict && !forced) continue;
      const ojson& params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : kNoArguments;
      if (strict) {
        spec.call_grammars[name] = compile_or_refuse(grammars, params, fmt::format("tools[{}].function.parameters", i));
      } else {
        try {
          spec.call_grammars[name] = grammars.get(params);
        } catch (const grammar::SchemaError&) {
          spec.call_grammars[name] = grammars.get("json_object");
        }
      }
    }
  // The reasoning budget: the request's (extension field), else the server's for a constrained
  // request; never more than half of what the payload leaves of max_tokens.
  int budget = -1;
  if (auto rb = req.find("reasoning_budget"); rb != req.end() && !rb->is_null()) {
    if (!rb->is_number_integer() || rb->get<int64_t>() < 0)
      throw FieldError("reasoning_budget", "'reasoning_budget' must be a non-negative integer (analysis tokens)");
    budget = int(std::min<int64_t>(rb->get<int64_t>(), 1 << 30));
  }
  const bool constrained = spec.final_grammar || !spec.forced_calls.empty() || !spec.call_grammars.empty();
  if (!constrained && budget < 0) return std::nullopt;
  if (budget < 0) budget = settings.default_reasoning_budget;
  if (constrained) {
    auto min_document = [](const grammar::MaskCache& c) {
      const grammar::Grammar& g = c.matcher().grammar();
      return g.nodes[size_t(g.root)].min_bytes;
    };
    int64_t payload = spec.final_grammar ? min_document(*spec.final_grammar) : 0;
    for (auto& [n, g] : spec.call_grammars) payload = std::max(payload, min_document(*g));
    const int64_t header = 32;  // a call header and the restart after the analysis
    budget = int(std::min<int64_t>(budget, std::max<int64_t>(0, (max_tokens - header - std::min<int64_t>(payload, 1 << 20)) / 2)));
  }
  spec.reasoning_budget = budget;
  return spec;
}

}  // namespace osprey::server
