// Throwing osprey::Error without fmt, for translation units that nvcc compiles.
#pragma once
#include <string>

namespace osprey {
[[noreturn]] void fail_plain(const std::string& message);
}  // namespace osprey
