// An OpenAI-style error: raised anywhere in a request's handling (the field readers of
// request_fields.h included) and turned into the response's status and error object.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace osprey::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int s, std::string msg, std::string t = "invalid_request_error", std::string p = "", std::string c = "")
      : std::runtime_error(std::move(msg)), status(s), type(std::move(t)), param(std::move(p)), code(std::move(c)) {}
};

// The body OpenAI's API answers an error with; param and code are null when empty.
inline nlohmann::ordered_json error_body(const std::string& message, const std::string& type, const std::string& param,
                                         const std::string& code) {
  using json = nlohmann::ordered_json;
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
                     {"code", code.empty() ? json() : json(code)}}}};
}

}  // namespace osprey::server
