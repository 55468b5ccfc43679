// The tool_choice constraint drives any model into a call to a declared function.
#include <gtest/gtest.h>
#include <random>

#include "harmony/o200k.h"
#include "harmony/parser.h"
#include "server/tool_choice.h"

namespace osprey::server {
namespace {

using namespace harmony;

// Samples greedily from random logits under the constraint; `end_after` makes <|end|> the
// favourite once that many analysis tokens were produced (a model that reasons, then acts).
std::vector<int32_t> run(ToolChoiceConstraint& c, uint64_t seed, int end_after, int max_tokens) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out;
  std::vector<float> logits(kO200kHarmonyVocab);
  int analysis = 0;
  for (int i = 0; i < max_tokens; ++i) {
    for (auto& l : logits) l = float(rng() % 1000);
    logits[kReturn] = logits[kEnd] = logits[kCall] = 5000;  // a model eager to stop
    if (++analysis < end_after) logits[kEnd] = -1;
    c.apply(out, logits);
    int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (t == kCall || t == kReturn) break;
  }
  return out;
}

TEST(ToolChoice, ForcesACallToADeclaredFunction) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    ToolChoiceConstraint c(tok, {"get_weather", "get_time"});
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

TEST(ToolChoice, NamedFunctionOnly) {
  const Tokenizer& tok = Tokenizer::embedded_o200k_harmony();
  ToolChoiceConstraint c(tok, {"lookup"});
  auto msgs = parse_messages(tok, run(c, 7, 3, 100), "assistant");
  ASSERT_FALSE(msgs.empty());
  EXPECT_EQ(msgs.back().recipient, "functions.lookup");
}

}  // namespace
}  // namespace osprey::server
