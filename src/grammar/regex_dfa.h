// Regular expressions (the subset JSON Schema patterns and formats use) compiled to a DFA over the
// bytes of a JSON string's raw content. Matching is over the characters as the model writes them
// between the quotes, so the DFA never accepts '"', '\\' or control bytes: a constrained string is
// written without escapes. '.' and negated classes match one whole UTF-8 character.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace osprey::grammar {

struct ByteDfa {
  std::vector<int32_t> next;     // [state * 256 + byte] -> state, -1 dead
  std::vector<uint8_t> accept;   // [state]
  std::vector<int32_t> dist;     // [state] fewest bytes to an accepting state (INT32_MAX: none)
  int32_t step(int32_t s, uint8_t c) const { return next[size_t(s) * 256 + c]; }
  int states() const { return int(accept.size()); }
};

// Supported: literals (UTF-8), '.', classes [a-z0-9_] and [^...] (ASCII members and ranges;
// non-ASCII single characters), escapes \d \D \w \W \s \S \n \r \t \uXXXX and escaped
// metacharacters, groups (...) and (?:...), '|', quantifiers * + ? {m} {m,} {m,n} (lazy forms
// match the same strings), '^' at the start and '$' at the end. JSON Schema's semantics: a
// pattern without '^' may be preceded by anything, one without '$' followed by anything.
// Anything else throws SchemaError("pattern", ...) naming what is not supported.
ByteDfa compile_regex(std::string_view pattern, const std::string& keyword = "pattern");

// The regular expression for a JSON Schema "format" (date-time, date, time, duration, email,
// hostname, ipv4, uuid); throws SchemaError("format", ...) for any other.
std::string format_regex(const std::string& format);

}  // namespace osprey::grammar
