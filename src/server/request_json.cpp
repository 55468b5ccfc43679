#include "server/request_json.h"

#include <fmt/format.h>

namespace osprey::server {

RequestTooDeep::RequestTooDeep(std::string f)
    : std::runtime_error(fmt::format("'{}' nests deeper than {} levels", f, kMaxRequestDepth)), field(std::move(f)) {}

nlohmann::ordered_json parse_request_json(const std::string& body) {
  using json = nlohmann::ordered_json;
  std::string field;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) field = parsed.get<std::string>();
    if (depth > kMaxRequestDepth) throw RequestTooDeep(field);
    return true;
  };
  return json::parse(body, cb, /*allow_exceptions=*/false);
}

}  // namespace osprey::server
