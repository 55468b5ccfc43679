// build/osprey: one binary, one subcommand per job.
#include <fstream>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <fmt/format.h>
#include <omp.h>

#include "cli/commands.h"
#include "core/error.h"

namespace osprey::cli {

std::vector<int32_t> parse_int_list(const std::string& s, const std::string& option, const std::string& what,
                                    bool positive) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) fail("{}: empty entry in '{}'", option, s);
    item = item.substr(a, b - a + 1);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < (positive ? 1 : 0) || v > INT32_MAX) fail("{}: '{}' is not {}", option, item, what);
    out.push_back(int32_t(v));
    i = j + 1;
  }
  return out;
}

std::vector<int32_t> parse_token_list(const std::string& s) { return parse_int_list(s, "--tokens", "a token id"); }

void for_each_line(const std::string& path, const std::function<void(const std::string&)>& fn) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      fn(line);
    } catch (const Error& e) {
      fail("{} line {}: {}", path, n, e.what());
    }
  }
}

CpuPrecision cpu_precision(const std::string& name) {
  if (name.empty() || name == "fp32") return CpuPrecision::AsStored;
  if (name == "fp8") return CpuPrecision::Fp8;
  if (name == "bf16") return CpuPrecision::Bf16;
  if (name == "mxfp4") return CpuPrecision::Mxfp4;
  fail("--precision {} is not a CPU precision (fp32, fp8, bf16 or mxfp4)", name);
}

}  // namespace osprey::cli

int main(int argc, char** argv) {
  CLI::App app{"osprey: gpt-oss inference engine"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  osprey::cli::add_synth(app);
  osprey::cli::add_convert(app);
  osprey::cli::add_logits(app);
  osprey::cli::add_generate(app);
  osprey::cli::add_bench(app);
  osprey::cli::add_inspect(app);
  osprey::cli::add_tokenize(app);
  osprey::cli::add_grammar(app);
  osprey::cli::add_render(app);
  osprey::cli::add_parse(app);
  osprey::cli::add_serve(app);
  osprey::cli::add_chat(app);
  app.parse_complete_callback([&] {
    if (threads > 0) omp_set_num_threads(threads);
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const osprey::Error& e) {
    fmt::print(stderr, "osprey: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "osprey: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "osprey: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
