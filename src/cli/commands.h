// Each subcommand adds itself to the app; its usage text lives beside its code.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt_oss_forward.h"

namespace osprey::cli {

void add_synth(CLI::App& app);
void add_convert(CLI::App& app);
void add_logits(CLI::App& app);
void add_generate(CLI::App& app);
void add_bench(CLI::App& app);
void add_inspect(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_render(CLI::App& app);
void add_parse(CLI::App& app);
void add_serve(CLI::App& app);
void add_chat(CLI::App& app);
void add_bench_serve(CLI::App* bench);
void add_grammar(CLI::App& app);
void add_bench_grammar(CLI::App* bench);

// --text S or --file F
std::string read_text_arg(const std::string& text, const std::string& file);

// Calls fn on each non-empty line of a file (JSON Lines, id lists); an Error fn throws comes back
// naming the file and line.
void for_each_line(const std::string& path, const std::function<void(const std::string&)>& fn);

// "1,2,3" -> integers >= 0 (>= 1 when positive); errors name the option and say what an entry must be.
std::vector<int32_t> parse_int_list(const std::string& s, const std::string& option, const std::string& what,
                                    bool positive = false);
// "1,2,3" -> ids; throws Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& s);
// --precision of the CPU backend: fp32 (or empty), fp8 or bf16 (the emulations of the CUDA paths).
CpuPrecision cpu_precision(const std::string& name);

}  // namespace osprey::cli
