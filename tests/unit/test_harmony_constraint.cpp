// The Harmony constraint drives any model (random logits here) into what the request asks for: a
// call to a declared function, arguments and answers that match their schemas, reasoning cut at
// its budget, all within max_tokens.
#include <gtest/gtest.h>

#include <random>

#include "grammar/json_grammar.h"
#include "harmony/o200k.h"
#include "harmony/parser.h"
#include "server/harmony_constraint.h"

namespace osprey::server {
namespace {

using namespace harmony;
using ojson = nlohmann::ordered_json;

// Samples greedily from random logits under the constraint; `end_after` makes <|end|> the
// favourite once that many analysis tokens were produced (a model that reasons, then acts).
std::vector<int32_t> run(HarmonyConstraint& c, uint64_t seed, int end_after, int max_tokens) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out;
  std::vector<float> logits(kO200kHarmonyVocab);
  int analysis = 0;
  for (int i = 0; i < max_tokens; ++i) {
    for (auto& l : logits) l = float(rng() % 1000);
    logits[kReturn] = logits[kEnd] = logits[kCall] = 5000;  // a model eager to stop
    if (++analysis < end_after) logits[kEnd] = -1;
    std::vector<uint32_t> mask((logits.size() + 31) / 32, ~0u);
    if (c.fill_mask(out, mask)) apply_token_mask(mask, logits);
    int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (t == kCall || t == kReturn) break;
  }
  return out;
}

std::shared_ptr<grammar::MaskCache> cache_for(const std::string& schema) {
  auto index = grammar::TokenIndex::for_tokenizer(Tokenizer::embedded_o200k_harmony());
  return std::make_shared<grammar::MaskCache>(index, grammar::compile_json_schema(ojson::parse(schema)));
}

TEST(HarmonyConstraint, ForcesACallToADeclaredFunction) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    HarmonyConstraint c(tok, {.forced_calls = {"get_weather", "get_time"}, .max_tokens = 200});
    std::vector<int32_t> ids = run(c, seed, /*end_after=*/5 + int(seed % 7), 200);
    auto msgs = parse_messages(tok, ids, "assistant");
    ASSERT_FALSE(msgs.empty());
    const ParsedMessage& last = msgs.back();
    ASSERT_TRUE(last.recipient.has_value()) << tok.decode(ids);
    EXPECT_TRUE(*last.recipient == "functions.get_weather" || *last.recipient == "functions.get_time") << *last.recipient;
    EXPECT_EQ(last.channel, "commentary");
    EXPECT_EQ(last.content_type, "<|constrain|>json");
    EXPECT_EQ(last.terminator, kCall);
    EXPECT_LE(msgs.size(), 2u);  // at most one analysis message first
    for (auto& m : msgs) EXPECT_NE(m.channel, "final");
  }
}

TEST(HarmonyConstraint, NamedFunctionOnly) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  HarmonyConstraint c(tok, {.forced_calls = {"lookup"}, .max_tokens = 100});
  auto msgs = parse_messages(tok, run(c, 7, 3, 100), "assistant");
  ASSERT_FALSE(msgs.empty());
  EXPECT_EQ(msgs.back().recipient, "functions.lookup");
}

// A forced call to a strict function: the arguments are a valid document of its schema, and the
// call arrives within max_tokens although the model would reason forever.
TEST(HarmonyConstraint, StrictArgumentsWithinTheBudget) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  const std::string schema = R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},
      "unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit","days"],
      "additionalProperties":false})";
  auto g = cache_for(schema);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    HarmonyConstraint c(tok, {.forced_calls = {"forecast"}, .declared = {"forecast"}, .call_grammars = {{"forecast", g}},
                              .reasoning_budget = 40, .max_tokens = 120});
    std::vector<int32_t> ids = run(c, seed, /*end_after=*/100000, 120);  // never ends reasoning by itself
    ASSERT_LE(ids.size(), 120u);
    auto msgs = parse_messages(tok, ids, "assistant");
    ASSERT_FALSE(msgs.empty()) << tok.decode(ids);
    const ParsedMessage& call = msgs.back();
    ASSERT_EQ(call.recipient, "functions.forecast") << tok.decode(ids);
    EXPECT_EQ(call.terminator, kCall);
    ojson args = ojson::parse(call.content, nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << call.content;
    EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 80) << call.content;
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << call.content;
    EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7) << call.content;
    // The analysis, if the model chose one, was cut at its budget (40 tokens; re-encoding the
    // text may count a few differently).
    ASSERT_LE(msgs.size(), 2u);
    if (msgs.size() == 2) {
      EXPECT_EQ(msgs[0].channel, "analysis");
      EXPECT_LE(tok.encode_ordinary(msgs[0].content).size(), 60u);
    }
  }
}

// response_format: the final answer is the schema's document, ended by <|return|>.
TEST(HarmonyConstraint, FinalAnswerFollowsTheSchema) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  auto g = cache_for(R"({"type":"object","properties":{"answer":{"type":"string"},"score":{"type":"number"}},
      "required":["answer","score"],"additionalProperties":false})");
  for (uint64_t seed = 0; seed < 8; ++seed) {
    HarmonyConstraint c(tok, {.final_grammar = g, .reasoning_budget = 30, .max_tokens = 150});
    std::vector<int32_t> ids = run(c, seed, 100000, 150);
    auto msgs = parse_messages(tok, ids, "assistant");
    ASSERT_FALSE(msgs.empty());
    const ParsedMessage& last = msgs.back();
    EXPECT_EQ(last.channel, "final") << tok.decode(ids);
    EXPECT_EQ(last.terminator, kReturn) << tok.decode(ids);
    ojson v = ojson::parse(last.content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << last.content;
    EXPECT_TRUE(v["answer"].is_string() && v["score"].is_number()) << last.content;
  }
}

}  // namespace
}  // namespace osprey::server
