// The error a JSON schema (or a pattern in it) that the grammar engine cannot compile raises:
// the keyword it stopped at and where, so that the server's 400 can name it.
#pragma once
#include <string>

#include "core/error.h"

namespace osprey::grammar {

struct SchemaError : Error {
  std::string keyword;  // "pattern", "minProperties", ...
  SchemaError(std::string kw, const std::string& message) : Error(message), keyword(std::move(kw)) {}
};

}  // namespace osprey::grammar
