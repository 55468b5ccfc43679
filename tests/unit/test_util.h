// Small helpers shared by the tests: temporary directories, raw files, running the CLI and expecting
// its refusals.
#pragma once
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <sys/wait.h>

namespace osprey::test {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("osprey_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct CliResult {
  int exit_code;
  std::string out, err;
};

// Runs build/osprey with the given arguments (a shell-quoted string).
inline CliResult run_cli(const std::string& args) {
  TempDir t;
  std::string cmd = std::string(OSPREY_BINARY) + " " + args + " >" + (t / "out") + " 2>" + (t / "err");
  int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(t / "out"), read_file(t / "err")};
}

// Runs the CLI with these arguments and expects a refusal: exit status 1 and `says` on stderr.
inline void expect_refused(const std::string& args, const std::string& says) {
  SCOPED_TRACE(args);
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
}

}  // namespace osprey::test
