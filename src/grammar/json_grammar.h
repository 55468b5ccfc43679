// JSON Schema (the subset OpenAI's strict structured outputs allow, and a little more) compiled to
// a grammar of nodes that the matcher walks byte by byte: objects with properties in declared
// order (optional ones may be skipped, required ones may not), arrays with item counts, strings
// with lengths, formats and patterns, numbers and integers with bounds, enums and consts, anyOf,
// $ref to $defs/definitions (recursion included), and any JSON value where the schema allows it.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/regex_dfa.h"

namespace osprey::grammar {

enum class NodeKind : uint8_t { Object, Array, String, Number, Integer, Literal, AnyOf };

struct Property {
  int key = -1;    // Literal node: the JSON-encoded key with its quotes
  int value = -1;  // node
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::AnyOf;
  // Object
  std::vector<Property> props;
  int additional = -1;            // node for undeclared properties' values; -1: none allowed
  std::vector<int> required_from; // [i]: index of the first required property at or after i (props.size(): none)
  int key_string = -1;            // String node for undeclared keys
  // Array
  int items = -1;
  int64_t min_items = 0, max_items = -1;  // -1: unbounded
  // String
  int64_t min_length = 0, max_length = -1;
  int dfa = -1;                   // index into Grammar::dfas (a format or pattern), -1: none
  bool key_exclusion = false;     // dfa excludes declared names: escapes allowed, they go to its sink (state 1)
  // Number, Integer
  bool has_min = false, has_max = false, excl_min = false, excl_max = false;
  double min = 0, max = 0;
  // Literal
  std::string text;
  // AnyOf
  std::vector<int> alts;
  // Fewest bytes of any value of this node (filled by the compiler).
  int64_t min_bytes = 0;
  bool counts_length() const { return min_length > 0 || max_length >= 0; }
};

struct GrammarOptions {
  // true: whitespace (' ', '\n', '\t') allowed between tokens, at most max_whitespace in a row.
  // false: none, and the separators are exactly item_separator and key_separator.
  bool any_whitespace = true;
  int max_whitespace = 20;
  std::string item_separator = ",", key_separator = ":";
  int max_depth = 32;  // nesting of objects and arrays
};

struct Grammar {
  std::vector<Node> nodes;
  std::vector<ByteDfa> dfas;
  int root = -1;
  int item_sep = -1, key_sep = -1;  // Literal nodes when !any_whitespace and longer than one byte
  GrammarOptions options;
  // How much one token can raise the bytes still needed (by committing to an optional property,
  // an item or an alternative), plus a margin: the budget check starts this far from the end.
  int64_t commit_slack = 16;
  std::string source;  // the schema, as compiled (for the mask cache key and diagnostics)
};

// Throws SchemaError naming the first unsupported keyword (or malformed value).
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const GrammarOptions& opt = {});
// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> compile_any_json_object(const GrammarOptions& opt = {});

}  // namespace osprey::grammar
