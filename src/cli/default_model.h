// The embedded default model: the small gpt-oss trained by train/ (data/osprey-mini.tar.xz,
// unpacked and SHA-256-checked into models/osprey-mini by scripts/setup.sh). `serve` and `chat`
// use it when no --model is given.
#pragma once
#include <filesystem>
#include <string>
#include <vector>
#include <system_error>

#include "core/error.h"

namespace osprey::cli {

inline constexpr const char* kDefaultModelName = "osprey-mini";

// `given` when set; else models/osprey-mini beside the binary's build directory, else in the source
// tree the binary was built from; a clear error when neither holds it.
inline std::string model_or_default(const std::string& given) {
  if (!given.empty()) return given;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "models" / kDefaultModelName);
#ifdef OSPREY_SOURCE_DIR
  candidates.push_back(fs::path(OSPREY_SOURCE_DIR) / "models" / kDefaultModelName);
#endif
  for (const fs::path& p : candidates)
    if (fs::exists(p / "config.json", ec)) return p.string();
  fail("no --model given, and the default model ({}) is not unpacked at {}: run scripts/setup.sh, or pass --model DIR",
       kDefaultModelName, candidates.empty() ? std::string("models/") + kDefaultModelName : candidates.back().string());
}

}  // namespace osprey::cli
