// Request bodies as JSON, bounded: parsing stops at kMaxRequestDepth levels of nesting, before any
// recursive walk (the renderer's schema printer, dump()) can meet a deeper tree.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace osprey::server {

inline constexpr int kMaxRequestDepth = 64;  // OpenAI's strict mode allows 5-10 levels of schema

struct RequestTooDeep : std::runtime_error {
  std::string field;  // the top-level field that nests too deep
  explicit RequestTooDeep(std::string f);
};

// The parsed body; a discarded value (is_discarded()) when it is not JSON; RequestTooDeep when it
// nests deeper than kMaxRequestDepth.
nlohmann::ordered_json parse_request_json(const std::string& body);

}  // namespace osprey::server
