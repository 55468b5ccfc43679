// osprey::Error: the one exception type for bad input and failed I/O. Messages name the file and
// tensor involved; the CLI prints them and exits non-zero.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace osprey {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

#define OSPREY_CHECK(cond, ...)                       \
  do {                                                \
    if (!(cond)) ::osprey::fail(__VA_ARGS__);         \
  } while (0)

}  // namespace osprey
