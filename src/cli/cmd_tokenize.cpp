#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/tokenizer_arg.h"

namespace osprey::cli {

std::string read_text_arg(const std::string& text, const std::string& file) {
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot open {}", file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return text;
}

void add_tokenize(CLI::App& app) {
  struct Args {
    TokenizerArg tok;
    std::string text, file;
    bool jsonl = false;
    int repeat = 0;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array (specials as plain text)");
  args->tok.add(cmd);
  auto* t = cmd->add_option("--text", args->text, "the text");
  auto* f = cmd->add_option("--file", args->file, "read the text from a file");
  t->excludes(f);
  cmd->add_flag("--jsonl", args->jsonl, "the file holds one JSON string per line; print one array per line");
  cmd->add_option("--repeat", args->repeat, "benchmark: encode N more times, report MB/s on stderr")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args, t, f] {
    if (!*t && !*f) fail("give --text S or --file F");
    if (args->jsonl && args->repeat > 0) fail("--repeat times one text; with --jsonl each line is its own text");
    harmony::Tokenizer tok = args->tok.load();
    std::string text = read_text_arg(args->text, args->file);
    if (args->jsonl) {
      std::istringstream lines(text);
      std::string line;
      for (int n = 1; std::getline(lines, line); ++n) {
        nlohmann::json s = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!s.is_string()) fail("--jsonl: line {} is not a JSON string", n);
        fmt::print("{}\n", nlohmann::json(tok.encode_ordinary(s.get<std::string>())).dump());
      }
      return;
    }
    std::vector<int32_t> ids = tok.encode_ordinary(text);
    fmt::print("{}\n", nlohmann::json(ids).dump());
    if (args->repeat > 0) {
      auto t0 = std::chrono::steady_clock::now();
      size_t n = 0;
      for (int r = 0; r < args->repeat; ++r) n += tok.encode_ordinary(text).size();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "{}\n", nlohmann::json({{"bytes", text.size()}, {"tokens", ids.size()}, {"repeat", args->repeat},
                                                 {"seconds", s}, {"mb_per_s", text.size() * double(args->repeat) / s / 1e6},
                                                 {"checksum", n}}).dump());
    }
  });
}

}  // namespace osprey::cli
