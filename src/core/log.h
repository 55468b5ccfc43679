// Logging goes to stderr so that stdout carries only a command's result.
#pragma once
#include <fmt/format.h>
#include <cstdio>

namespace osprey {

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "osprey: {}\n", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace osprey
