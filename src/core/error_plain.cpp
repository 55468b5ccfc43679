#include "core/error_plain.h"

#include "core/error.h"

namespace osprey {
void fail_plain(const std::string& message) { throw Error(message); }
}  // namespace osprey
