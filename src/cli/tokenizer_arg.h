// --model DIR | --tokenizer FILE, shared by tokenize, render and parse.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/error.h"
#include "harmony/tokenizer.h"

namespace osprey::cli {

struct TokenizerArg {
  std::string model, file;
  void add(CLI::App* cmd) {
    auto* m = cmd->add_option("--model", model, "model directory (its tokenizer.json or .tiktoken)");
    auto* t = cmd->add_option("--tokenizer", file, "tokenizer.json or .tiktoken ranks file");
    m->excludes(t);
  }
  harmony::Tokenizer load() const {
    if (!model.empty()) return harmony::Tokenizer::for_model_dir(model);
    if (!file.empty()) return harmony::Tokenizer::from_file(file);
    fail("give --model DIR or --tokenizer FILE");
  }
};

}  // namespace osprey::cli
