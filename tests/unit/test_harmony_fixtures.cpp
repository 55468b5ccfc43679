// openai/harmony's golden fixtures (tests/data/harmony, from openai/harmony v0.0.8) reproduced
// exactly: every render case as text and as token ids, every parse and stream case message by
// message. Inputs come from cases.json.
#include <filesystem>
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "harmony/renderer.h"
#include "test_util.h"

namespace osprey::harmony {
namespace {

const std::string kDir = std::string(OSPREY_TEST_DATA) + "/harmony/";

const ordered_json& cases() {
  static const ordered_json j = ordered_json::parse(test::read_file(kDir + "cases.json"));
  return j;
}

const Tokenizer& tok() {
  if (!Tokenizer::has_embedded()) throw std::runtime_error("no embedded vocabulary: run scripts/setup.sh and rebuild");
  return Tokenizer::embedded_o200k_harmony();
}

// Fixture text: CRLF -> LF, trailing whitespace stripped (as upstream compares).
std::string fixture_text(const std::string& name) {
  std::string s = test::read_file(kDir + name), out;
  for (size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) out.push_back(s[i]);
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

std::optional<std::string> opt_str(const ordered_json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

ToolNamespace namespace_from(const ordered_json& j) {
  ToolNamespace ns{j["name"], opt_str(j, "description"), {}};
  for (auto& t : j["tools"])
    ns.tools.push_back({t["name"], t.value("description", ""), t.contains("parameters") ? t["parameters"] : ordered_json()});
  return ns;
}

Message message_from(const ordered_json& m) {
  Message msg{m["role"], opt_str(m, "name"), opt_str(m, "recipient"), opt_str(m, "channel"), opt_str(m, "content_type"), ""};
  const ordered_json& c = m["content"];
  const std::string type = c["type"];
  if (type == "text") {
    msg.content = c["text"].get<std::string>();
  } else if (type == "system_content") {
    SystemContent s;
    s.model_identity = opt_str(c, "model_identity");
    s.reasoning_effort = opt_str(c, "reasoning_effort");
    s.knowledge_cutoff = opt_str(c, "knowledge_cutoff");
    s.conversation_start_date = opt_str(c, "conversation_start_date");
    s.valid_channels = c["channel_config"]["valid_channels"].get<std::vector<std::string>>();
    s.channel_required = c["channel_config"]["channel_required"];
    for (const char* b : {"browser", "python"})
      if (c.value(std::string(b) + "_tool", false)) s.tools[b] = namespace_from(cases()["builtin_tool_namespaces"][b]);
    msg.content = s;
  } else {
    DeveloperContent d;
    d.instructions = opt_str(c, "instructions");
    if (c.contains("function_tools") && !c["function_tools"].is_null())
      d.tools["functions"] = namespace_from({{"name", "functions"}, {"description", nullptr}, {"tools", c["function_tools"]}});
    msg.content = d;
  }
  return msg;
}

void expect_messages(const std::vector<ParsedMessage>& got, const ordered_json& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(got[i].role, want[i]["role"].get<std::string>());
    EXPECT_EQ(got[i].name, opt_str(want[i], "name"));
    EXPECT_EQ(got[i].recipient, opt_str(want[i], "recipient"));
    EXPECT_EQ(got[i].channel, opt_str(want[i], "channel"));
    EXPECT_EQ(got[i].content_type, opt_str(want[i], "content_type"));
    EXPECT_EQ(got[i].content, want[i]["content"]["text"].get<std::string>());
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (auto& c : cases()["cases"]) v.push_back(c["fixture"]);
  return v;
}

class HarmonyFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HarmonyFixture, Reproduces) {
  const ordered_json* c = nullptr;
  for (auto& x : cases()["cases"])
    if (x["fixture"] == GetParam()) c = &x;
  ASSERT_NE(c, nullptr);
  const std::string kind = (*c)["kind"];
  if (kind == "render" || kind == "render_completion") {
    std::vector<Message> msgs;
    for (auto& m : (*c)["messages"]) msgs.push_back(message_from(m));
    Renderer r(tok());
    RenderOptions opt{.auto_drop_analysis = (*c)["render"]["auto_drop_analysis"].get<bool>()};
    std::vector<int32_t> ids = kind == "render" ? r.render_conversation(msgs, opt) : r.render_for_completion(msgs, opt);
    const std::string want = fixture_text(GetParam());
    EXPECT_EQ(tok().decode(ids), want);
    EXPECT_EQ(ids, tok().encode_with_specials(want));  // token-exact, as upstream's token_ids comparison
    return;
  }
  std::vector<int32_t> ids;
  if ((*c)["fixture_format"] == "token_ids") {
    std::istringstream in(test::read_file(kDir + GetParam()));
    for (int32_t id; in >> id;) ids.push_back(id);
  } else {
    ids = tok().encode_with_specials(fixture_text(GetParam()));
  }
  if (kind == "parse") {
    auto start = opt_str((*c)["parse"], "start_role");
    std::vector<std::string> diags;
    expect_messages(parse_messages(tok(), ids, start, &diags), (*c)["expected_messages"]);
    EXPECT_TRUE(diags.empty()) << diags[0];
    if (c->contains("alternate_input"))
      expect_messages(parse_messages(tok(), (*c)["alternate_input"]["token_ids"].get<std::vector<int32_t>>(), start),
                      (*c)["expected_messages"]);
    if (c->contains("also_render_check")) {
      std::vector<int32_t> out;
      Renderer(tok()).render_message(message_from((*c)["expected_messages"][0]), false, out);
      out.pop_back();  // the final <|end|>
      EXPECT_EQ(tok().decode(out), fixture_text(GetParam()));
    }
  } else {  // stream: one token at a time, no end of input
    StreamingParser p(tok(), opt_str((*c)["stream"], "start_role"));
    for (int32_t id : ids) p.push(id);
    EXPECT_EQ(p.messages().size(), (*c)["expected_message_count"].get<size_t>());
    expect_messages(p.messages(), (*c)["expected_messages"]);
    EXPECT_TRUE(p.diagnostics().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(OpenAiHarmony, HarmonyFixture, ::testing::ValuesIn(case_names()), [](const auto& info) {
  std::string n = info.param.substr(0, info.param.size() - 4);
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST(HarmonyFixtures, AllTwentyThreeArePresent) { EXPECT_EQ(case_names().size(), 23u); }

}  // namespace
}  // namespace osprey::harmony
