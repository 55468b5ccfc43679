// How `osprey bench serve` reads a streamed chat answer (cmd_bench_serve.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace osprey::cli {

// Whether a streamed chat chunk carries generated output (content, reasoning or a tool call), as
// the field's serving benchmarks count it: the first chunk only announces the role (content ""),
// and the last may carry only the finish reason, so neither is a token's arrival.
inline bool chat_chunk_has_output(const nlohmann::json& chunk) {
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return false;
  const nlohmann::json& choice = chunk["choices"][0];
  if (!choice.is_object() || !choice.contains("delta") || !choice["delta"].is_object()) return false;
  const nlohmann::json& d = choice["delta"];
  auto nonempty = [&](const char* k) {
    return d.contains(k) && ((d[k].is_string() && !d[k].get<std::string>().empty()) || (d[k].is_array() && !d[k].empty()));
  };
  return nonempty("content") || nonempty("reasoning_content") || nonempty("tool_calls");
}

}  // namespace osprey::cli
