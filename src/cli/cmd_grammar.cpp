// `osprey grammar-masks`: the grammar engine's token masks for schemas and prefixes (the
// differential test compares them with XGrammar's), and `osprey bench grammar`: the time a mask
// takes per generated token, computed fresh and through the per-state cache.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "grammar/json_grammar.h"
#include "grammar/schema_error.h"
#include "grammar/token_mask.h"
#include "harmony/tokenizer.h"

namespace osprey::cli {

namespace {

using ojson = nlohmann::ordered_json;
using namespace grammar;

struct GrammarArgs {
  std::string cases;
  bool compact = false;
  std::string item_sep = ",", key_sep = ":";
  CLI::Option *item_opt = nullptr, *key_opt = nullptr;
  void add(CLI::App* cmd) {
    cmd->add_option("--cases", cases, "JSON Lines: {\"schema\": SCHEMA or \"json_object\", \"prefixes\": [TEXT, ...]}")
        ->required();
    cmd->add_flag("--compact", compact, "no whitespace; separators exactly --item-separator and --key-separator");
    item_opt = cmd->add_option("--item-separator", item_sep, "with --compact (default ',')");
    key_opt = cmd->add_option("--key-separator", key_sep, "with --compact (default ':')");
  }
  // Refuses the separators without --compact (the grammar then allows JSON's own separators with any
  // whitespace around them, so they would change nothing).
  void check() const {
    if (!compact)
      for (const CLI::Option* o : {item_opt, key_opt})
        if (o && o->count())
          fail("{} applies with --compact (without it the separators are JSON's own, with any whitespace around them)",
               o->get_name());
  }
  GrammarOptions options() const {
    GrammarOptions o;
    if (compact) o.any_whitespace = false, o.item_separator = item_sep, o.key_separator = key_sep;
    return o;
  }
};

std::shared_ptr<const Grammar> compile_case(const ojson& c, const GrammarOptions& opt) {
  const ojson& s = c.at("schema");
  if (s == "json_object") return compile_any_json_object(opt);
  return compile_json_schema(s, opt);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

void add_grammar(CLI::App& app) {
  auto args = std::make_shared<GrammarArgs>();
  auto* cmd = app.add_subcommand("grammar-masks", "Print the o200k_harmony token masks of JSON schemas after given prefixes");
  args->add(cmd);
  cmd->callback([args] {
    args->check();
    const harmony::Tokenizer& tok = harmony::Tokenizer::embedded_o200k_harmony();
    auto index = TokenIndex::for_tokenizer(tok);
    int case_no = 0;
    for_each_line(args->cases, [&](const std::string& line) {
      const ojson c = ojson::parse(line);
      const int i = case_no++;
      std::shared_ptr<const Grammar> g;
      try {
        g = compile_case(c, args->options());
      } catch (const SchemaError& e) {
        std::cout << ojson{{"case", i}, {"error", e.what()}, {"keyword", e.keyword}}.dump() << "\n";
        return;
      }
      MaskCache cache(index, g);
      int j = 0;
      for (const ojson& p : c.at("prefixes")) {
        Matcher m(g);
        ojson out = {{"case", i}, {"prefix", j++}};
        if (!m.feed(p.get<std::string>())) {
          out["allowed"] = ojson::array();
          out["accepted_prefix"] = false;
          out["can_terminate"] = false;
        } else {
          TokenBitmask mask = cache.mask(m.state());
          ojson ids = ojson::array();
          for (int32_t t = 0; t < index->vocab(); ++t)
            if (mask_test(mask, t)) ids.push_back(t);
          out["allowed"] = ids;
          out["accepted_prefix"] = true;
          out["can_terminate"] = m.can_terminate();
        }
        std::cout << out.dump() << "\n";
      }
    });
  });
}

void add_bench_grammar(CLI::App* bench) {
  struct Args {
    GrammarArgs g;
    int tokens = 2000, budget = 256;
    uint64_t seed = 1;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench->add_subcommand(
      "grammar", "Time the token mask per generated token (fresh and cached) on random documents of each schema");
  args->g.add(cmd);
  cmd->add_option("--tokens", args->tokens, "masks to time per schema")->check(CLI::PositiveNumber);
  cmd->add_option("--budget", args->budget, "tokens per document")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "random choices");
  cmd->add_flag("--json", args->json, "one JSON object per schema instead of a table");
  cmd->callback([args] {
    args->g.check();
    const harmony::Tokenizer& tok = harmony::Tokenizer::embedded_o200k_harmony();
    auto t0 = std::chrono::steady_clock::now();
    auto index = TokenIndex::for_tokenizer(tok);
    const double index_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::mt19937_64 rng(args->seed);
    std::vector<double> all_fresh, all_cached;
    if (!args->json)
      fmt::print("vocabulary {} tokens, index built in {:.0f} ms, single thread\n{:>4} {:>9} {:>8} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}\n",
                 index->vocab(), index_ms, "case", "compile", "masks", "fresh p50", "p99", "mean", "cache p50", "p99", "mean");
    int case_no = 0;
    for_each_line(args->g.cases, [&](const std::string& line) {
      const ojson c = ojson::parse(line);
      auto tc = std::chrono::steady_clock::now();
      auto g = compile_case(c, args->g.options());
      const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tc).count();
      MaskCache cache(index, g);
      std::vector<double> fresh, cached;
      int docs = 0;
      while (int(fresh.size()) < args->tokens) {
        Matcher m(g);
        ++docs;
        for (int left = args->budget; left > 0 && int(fresh.size()) < args->tokens; --left) {
          if (m.can_terminate() && rng() % 8 == 0) break;
          auto a = std::chrono::steady_clock::now();
          TokenBitmask f = cache.compute(m.state());
          auto b = std::chrono::steady_clock::now();
          TokenBitmask mask = cache.mask_for_budget(m.state(), left);
          auto e = std::chrono::steady_clock::now();
          fresh.push_back(std::chrono::duration<double, std::micro>(b - a).count());
          cached.push_back(std::chrono::duration<double, std::micro>(e - b).count());
          std::vector<int32_t> allowed;
          for (size_t w = 0; w < mask.size(); ++w)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1) allowed.push_back(int32_t(w * 32 + size_t(__builtin_ctz(bits))));
          if (allowed.empty()) break;
          const int32_t t = allowed[rng() % allowed.size()];
          if (!m.feed(index->bytes(t))) fail("case {}: a masked token was rejected", case_no);
        }
      }
      auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0 : s / double(v.size());
      };
      all_fresh.insert(all_fresh.end(), fresh.begin(), fresh.end());
      all_cached.insert(all_cached.end(), cached.begin(), cached.end());
      if (args->json)
        std::cout << ojson{{"case", case_no}, {"compile_ms", compile_ms}, {"masks", fresh.size()}, {"documents", docs},
                           {"fresh_us", {{"p50", percentile(fresh, 0.5)}, {"p99", percentile(fresh, 0.99)}, {"mean", mean(fresh)}}},
                           {"cached_us", {{"p50", percentile(cached, 0.5)}, {"p99", percentile(cached, 0.99)}, {"mean", mean(cached)}}}}
                         .dump()
                  << "\n";
      else
        fmt::print("{:>4} {:>7.1f}ms {:>8} | {:>7.0f}us {:>7.0f}us {:>7.0f}us | {:>7.1f}us {:>7.0f}us {:>7.1f}us\n", case_no,
                   compile_ms, fresh.size(), percentile(fresh, 0.5), percentile(fresh, 0.99), mean(fresh),
                   percentile(cached, 0.5), percentile(cached, 0.99), mean(cached));
      ++case_no;
    });
    if (!args->json) {
      auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0 : s / double(v.size());
      };
      fmt::print("{:>4} {:>9} {:>8} | {:>7.0f}us {:>7.0f}us {:>7.0f}us | {:>7.1f}us {:>7.0f}us {:>7.1f}us\n", "all", "",
                 all_fresh.size(), percentile(all_fresh, 0.5), percentile(all_fresh, 0.99), mean(all_fresh),
                 percentile(all_cached, 0.5), percentile(all_cached, 0.99), mean(all_cached));
    }
  });
}

}  // namespace osprey::cli
