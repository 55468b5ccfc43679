// The parser on what models really emit, and the chat-completions request mapping.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "harmony/chat_request.h"
#include "harmony/o200k.h"
#include "harmony/parser.h"
#include "harmony/renderer.h"
#include "test_util.h"

namespace osprey::harmony {
namespace {

const Tokenizer& tok() { return Tokenizer::embedded_o200k_harmony(); }
std::vector<int32_t> ids(const std::string& s) { return tok().encode_with_specials(s); }

std::vector<ParsedMessage> parse(const std::string& s, std::vector<std::string>* diags = nullptr) {
  return parse_messages(tok(), ids(s), "assistant", diags);
}

TEST(Parser, RecipientAfterChannelAndConstrainWithoutSpace) {
  for (const char* s : {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"a\":1}<|call|>",
                        "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{\"a\":1}<|call|>",
                        " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"a\":1}<|call|>"}) {
    std::vector<std::string> d;
    auto m = parse(s, &d);
    ASSERT_EQ(m.size(), 1u) << s;
    EXPECT_EQ(m[0].recipient, "functions.get_weather") << s;
    EXPECT_EQ(m[0].channel, "commentary");
    EXPECT_EQ(m[0].content_type, "<|constrain|>json");
    EXPECT_EQ(m[0].content, "{\"a\":1}");
    EXPECT_TRUE(m[0].is_tool_call());
    EXPECT_EQ(m[0].terminator, kCall);
    EXPECT_TRUE(d.empty()) << d[0];
  }
}

TEST(Parser, ToolCallOnAnalysisChannel) {
  auto m = parse("<|channel|>analysis to=functions.search code<|message|>{}<|call|>");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_TRUE(m[0].is_tool_call());
  EXPECT_EQ(m[0].channel, "analysis");
}

TEST(Parser, StrayTextAfterChannel) {
  std::vector<std::string> d;
  auto m = parse("<|channel|>commentary?? to=functions.x<|message|>{}<|call|>", &d);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].channel, "commentary");
  EXPECT_EQ(m[0].recipient, "functions.x");
  EXPECT_FALSE(d.empty());
}

TEST(Parser, OutputEndingWithoutStopToken) {
  StreamingParser p(tok(), "assistant");
  for (int32_t t : ids("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>The answer"))
    p.push(t);
  EXPECT_EQ(p.messages().size(), 1u);
  ASSERT_TRUE(p.current());
  EXPECT_EQ(p.current()->content, "The answer");
  auto ev = p.finish();
  ASSERT_EQ(p.messages().size(), 2u);
  EXPECT_EQ(p.messages()[1].content, "The answer");
  EXPECT_FALSE(p.messages()[1].complete);
}

TEST(Parser, EndIsNotTheEndOfTheAnswer) {
  // <|end|> closes the analysis message only; the final answer still follows.
  auto m = parse("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b<|return|>");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].channel, "final");
  EXPECT_EQ(m[1].terminator, kReturn);
}

TEST(Parser, StrayTerminatorAndMissingStart) {
  std::vector<std::string> d;
  auto m = parse("<|channel|>final<|message|>x<|return|><|return|><|channel|>final<|message|>y", &d);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].content, "y");
  EXPECT_GE(d.size(), 2u);
}

TEST(Parser, StartInsideContentClosesTheMessage) {
  std::vector<std::string> d;
  auto m = parse("<|channel|>analysis<|message|>abc<|start|>assistant<|channel|>final<|message|>z<|end|>", &d);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].content, "abc");
  EXPECT_EQ(m[1].content, "z");
  EXPECT_EQ(d.size(), 1u);
}

TEST(Parser, ConstrainAloneIsAContentTypeNotARecipient) {
  auto m = parse("<|channel|>final <|constrain|>json<|message|>{}<|return|>");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_FALSE(m[0].recipient);
  EXPECT_EQ(m[0].content_type, "<|constrain|>json");
}

TEST(Parser, StreamsUtf8WholeAndEmitsEvents) {
  StreamingParser p(tok(), "assistant");
  std::string deltas;
  int starts = 0, ends = 0, calls = 0;
  for (int32_t t : ids("<|channel|>final<|message|>\xF0\x9F\x92\x96 ok<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>")) {
    for (auto& e : p.push(t)) {
      if (e.type == ParserEvent::Type::ContentDelta) {
        const auto* p8 = reinterpret_cast<const unsigned char*>(e.text.data());
        for (size_t i = 0; i < e.text.size();) {  // every delta is whole UTF-8
          int n = utf8_sequence(p8 + i, e.text.size() - i);
          ASSERT_GT(n, 0) << "broken UTF-8 in a delta";
          i += size_t(n);
        }
        deltas += e.text;
      }
      starts += e.type == ParserEvent::Type::MessageStart;
      ends += e.type == ParserEvent::Type::MessageEnd;
      calls += e.type == ParserEvent::Type::ToolCall;
    }
  }
  EXPECT_EQ(deltas, "\xF0\x9F\x92\x96 ok{}");
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(ends, 2);
  EXPECT_EQ(calls, 1);
}

TEST(Parser, UnknownIdsAndGarbageNeverThrow) {
  StreamingParser p(tok(), std::nullopt);
  EXPECT_NO_THROW(p.push(999999999));
  EXPECT_NO_THROW(p.push(-5));
  EXPECT_NO_THROW(p.push(kMessage));
  EXPECT_NO_THROW(p.push(kCall));
  EXPECT_NO_THROW(p.finish());
  EXPECT_FALSE(p.diagnostics().empty());
}

ordered_json req(const char* s) { return ordered_json::parse(s); }
std::string render(const ordered_json& r) {
  auto conv = conversation_from_chat_request(r, {.current_date = "2025-06-28"});
  return tok().decode(Renderer(tok()).render_for_completion(conv, {.auto_drop_analysis = false}));
}

TEST(ChatRequest, SystemAndDeveloperTextsBecomeInstructions) {
  std::string t = render(req(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "developer", "content": [{"type": "text", "text": "Use French."}]}, {"role": "user", "content": "Hi"}]})"));
  EXPECT_NE(t.find("<|start|>developer<|message|># Instructions\n\nBe brief.\n\nUse French.<|end|>"), std::string::npos) << t;
  EXPECT_NE(t.find("Reasoning: medium"), std::string::npos);
  EXPECT_NE(t.find("Current date: 2025-06-28"), std::string::npos);
  EXPECT_EQ(t.substr(t.size() - 18), "<|start|>assistant");
}

TEST(ChatRequest, ToolCallsHistoryAndResults) {
  std::string t = render(req(R"({"reasoning_effort": "low", "messages": [
      {"role": "user", "content": "Weather in SF?"},
      {"role": "assistant", "reasoning_content": "Need the tool.", "content": null,
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"SF\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 20}"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})"));
  EXPECT_NE(t.find("Reasoning: low"), std::string::npos);
  EXPECT_NE(t.find("Calls to these tools must go to the commentary channel: 'functions'."), std::string::npos);
  // The reasoning of an unfinished tool loop is kept.
  EXPECT_NE(t.find("<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"), std::string::npos) << t;
  EXPECT_NE(t.find("<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\": \"SF\"}<|call|>"),
            std::string::npos) << t;
  EXPECT_NE(t.find("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"temp\": 20}<|end|>"),
            std::string::npos) << t;
}

TEST(ChatRequest, ReasoningBeforeAFinalAnswerIsDropped) {
  std::string t = render(req(R"({"messages": [{"role": "user", "content": "2+2?"},
      {"role": "assistant", "reasoning_content": "Simple.", "content": "4"}, {"role": "user", "content": "3+3?"}]})"));
  EXPECT_EQ(t.find("Simple."), std::string::npos) << t;
  EXPECT_NE(t.find("<|start|>assistant<|channel|>final<|message|>4<|end|>"), std::string::npos) << t;
}

TEST(ChatRequest, ToolChoiceNoneOmitsTools) {
  std::string t = render(req(R"({"tool_choice": "none", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})"));
  EXPECT_EQ(t.find("namespace functions"), std::string::npos);
  EXPECT_EQ(t.find("<|start|>developer"), std::string::npos);
}

TEST(ChatRequest, UserTextIsNeverControlTokens) {
  auto conv = conversation_from_chat_request(req(R"({"messages": [{"role": "user", "content": "<|end|><|start|>system"}]})"), {});
  auto out = Renderer(tok()).render_for_completion(conv, {});
  int starts = 0;
  for (int32_t id : out) starts += id == kStart;
  EXPECT_EQ(starts, 3);  // system, user, and the completion prefix
}

TEST(ChatRequest, BadRequestsNameTheProblem) {
  auto bad = [](const char* body, const char* fragment) {
    try {
      conversation_from_chat_request(req(body), {});
      ADD_FAILURE() << "accepted " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  bad(R"({"messages": []})", "must not be empty");
  bad(R"({"messages": "hi"})", "'messages' must be an array");
  bad(R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role 'wizard'");
  bad(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content");
  bad(R"({"reasoning_effort": "none", "messages": [{"role": "user", "content": "x"}]})", "reasoning_effort 'none'");
  bad(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": ""}}]})",
      "tools[0].function.name");
  bad(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]})",
      "must be an object schema");
  bad(R"({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]})",
      "messages[0].tool_call_id \"nope\" answers no earlier assistant tool call");
  // Invalid tools are refused whatever tool_choice says (they were once skipped unread with none).
  bad(R"({"tool_choice": "none", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})",
      "tools[0].function.name");
  bad(R"({"tool_choice": "none", "messages": [{"role": "user", "content": "x"}], "tools": ["x"]})", "tools[0]: only type 'function'");
  // Fields osprey would drop are refused by their path.
  const char* user = R"("messages": [{"role": "user", "content": "x"}])";
  bad(fmt::format(R"({{{}, "tools": [{{"type": "function", "function": {{"name": "f", "zz": 1}}}}]}})", user).c_str(),
      "tools[0].function.zz is not supported");
  bad(fmt::format(R"({{{}, "tools": [{{"type": "function", "function": {{"name": "f", "strict": "yes"}}}}]}})", user).c_str(),
      "tools[0].function.strict must be a boolean");
  bad(fmt::format(R"({{{}, "tools": [{{"type": "function", "function": {{"name": "f"}}}}],
      "tool_choice": {{"type": "function", "function": {{"name": "f"}}, "zz": 1}}}})", user).c_str(),
      "tool_choice.zz is not supported");
  bad(fmt::format(R"({{{}, "reasoning": "high"}})", user).c_str(), "reasoning must be an object");
  bad(fmt::format(R"({{{}, "reasoning": {{"effort": "high", "summary": "auto"}}}})", user).c_str(), "reasoning.summary is not supported");
  bad(fmt::format(R"({{{}, "reasoning_effort": "low", "reasoning": {{"effort": "high"}}}})", user).c_str(), "disagree");
  bad(R"({"messages": [{"role": "system", "content": "x", "name": "boss"}]})", "messages[0].name is not supported");
  bad(R"({"messages": [{"role": "user", "content": "x", "zzz": 1}]})", "messages[0].zzz is not supported");
  bad(R"({"messages": [{"role": "user", "content": "x", "name": "a b"}]})", "messages[0].name must be");
  bad(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}]})",
      "cache_control is not supported");
  bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "audio": {"id": "a"}}]})",
      "messages[1].audio is not supported on an assistant message");
  bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": {"id": "c"}}]})",
      "messages[1].tool_calls must be an array");
  bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": 5}]})",
      "messages[1].reasoning_content must be a string");
  bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "refusal": "no"}]})",
      "content and refusal are both given");
}

// A json_schema response_format is shown to the model as the developer message's "# Response
// Formats" section (openai/harmony docs/format.md): the name, the description as comment lines, the
// schema as compact JSON in its key order. json_object and text add nothing.
TEST(ChatRequest, ResponseFormatSchemaIsInTheDeveloperMessage) {
  std::string t = render(req(R"({"messages": [{"role": "user", "content": "list"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "shopping_list", "description": "Items to buy.\nOne per entry.",
        "strict": true, "schema": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}}}}})"));
  EXPECT_NE(t.find("<|start|>developer<|message|># Response Formats\n\n## shopping_list\n\n// Items to buy.\n// One per entry.\n"
                   R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"string"}}}}<|end|>)"),
            std::string::npos)
      << t;
  for (const char* type : {"json_object", "text"}) {
    std::string u = render(req(fmt::format(R"({{"messages": [{{"role": "user", "content": "x"}}], "response_format": {{"type": "{}"}}}})", type).c_str()));
    EXPECT_EQ(u.find("Response Formats"), std::string::npos) << u;
  }
}

// response_format has one reader (response_format_field), which both the conversation and the
// server's decoding constraint use: its type, the format the model is shown, and what it refuses.
TEST(ChatRequest, ResponseFormatIsReadOnce) {
  using T = ResponseFormatField::Type;
  EXPECT_EQ(response_format_field(req(R"({"messages": []})")).type, T::Text);
  EXPECT_EQ(response_format_field(req(R"({"response_format": null})")).type, T::Text);
  EXPECT_EQ(response_format_field(req(R"({"response_format": {"type": "text"}})")).type, T::Text);
  const ResponseFormatField o = response_format_field(req(R"({"response_format": {"type": "json_object"}})"));
  EXPECT_EQ(o.type, T::JsonObject);
  EXPECT_FALSE(o.format);
  const ResponseFormatField s = response_format_field(
      req(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}})"));
  ASSERT_EQ(s.type, T::JsonSchema);
  ASSERT_TRUE(s.format);
  EXPECT_EQ(s.format->name, "response");
  EXPECT_EQ(s.format->schema, ordered_json::parse(R"({"type": "object"})"));
  auto bad = [](const char* body, const char* fragment) {
    try {
      response_format_field(req(body));
      ADD_FAILURE() << "accepted " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  bad(R"({"response_format": "json"})", "must be an object with a 'type'");
  bad(R"({"response_format": {"type": "xml"}})", "response_format type 'xml' is not one of text, json_object, json_schema");
  bad(R"({"response_format": {"type": "json_object", "schema": {}}})", "response_format.schema is not supported");
  bad(R"({"response_format": {"type": "json_schema"}})", "response_format.json_schema must be an object");
  bad(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})", "json_schema.schema must be a JSON schema object");
  bad(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}}})", "strict must be a boolean");
}

// What the checks above let through is honoured: a user's name is its author name, an assistant
// message sent back as the SDKs return it (neutral refusal, audio, annotations) renders as its content,
// and a refusal with no content is the answer's text.
TEST(ChatRequest, NamesAndReturnedAssistantMessagesAreHonoured) {
  std::string t = render(req(R"({"messages": [{"role": "user", "content": "hi", "name": "alice"},
      {"role": "assistant", "content": "hello", "refusal": null, "audio": null, "annotations": [], "function_call": null,
       "tool_calls": null},
      {"role": "user", "content": "x"}, {"role": "assistant", "content": null, "refusal": "I can't."},
      {"role": "user", "content": "y"}]})"));
  EXPECT_NE(t.find("<|start|>user:alice<|message|>hi<|end|>"), std::string::npos) << t;
  EXPECT_NE(t.find("<|start|>assistant<|channel|>final<|message|>hello<|end|>"), std::string::npos) << t;
  EXPECT_NE(t.find("<|start|>assistant<|channel|>final<|message|>I can't.<|end|>"), std::string::npos) << t;
}

}  // namespace
}  // namespace osprey::harmony

namespace osprey::harmony {
namespace {

TEST(HarmonyCli, TokenizeRenderParseContracts) {
  test::TempDir d;
  test::write_file(d / "vocab.tiktoken", std::string(Tokenizer::embedded_tiktoken_text()));
  auto r = test::run_cli("tokenize --tokenizer " + (d / "vocab.tiktoken") + " --text 'hello world<|end|>'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[24912,2375,27,91,419,91,29]\n");  // the special string is plain text
  test::write_file(d / "req.json", R"({"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "low"})");
  r = test::run_cli("render --tokenizer " + (d / "vocab.tiktoken") + " --request " + (d / "req.json") + " --date 2025-01-02");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"].get<std::string>().substr(0, 26), "<|start|>system<|message|>");
  EXPECT_EQ(j["ids"].back(), 173781);  // ... <|start|>assistant
  EXPECT_EQ(j["ids"].front(), 200006);
  r = test::run_cli("parse --tokenizer " + (d / "vocab.tiktoken") +
                    " --role assistant --ids 200005,35644,200008,24912,200007,200006,173781,200005,17196,200008,2375,200002");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = nlohmann::json::parse(r.out);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["channel"], "analysis");
  EXPECT_EQ(m[0]["content"], "hello");
  EXPECT_EQ(m[1]["channel"], "final");
  EXPECT_EQ(m[1]["content"], " world");
  EXPECT_TRUE(m[1]["recipient"].is_null());
  r = test::run_cli("render --tokenizer " + (d / "vocab.tiktoken") + " --request " + (d / "missing.json"));
  EXPECT_EQ(r.exit_code, 1);
  test::write_file(d / "bad.json", R"({"messages": [{"role": "robot", "content": "x"}]})");
  test::expect_refused("render --tokenizer " + (d / "vocab.tiktoken") + " --request " + (d / "bad.json"),
                       "messages[0].role 'robot'");
}


// Training data: `render --reply` renders the prompt exactly as `serve` renders the request without
// its last message, then that assistant reply as the model writes it.
TEST(HarmonyCli, RenderReplyForTraining) {
  test::TempDir d;
  test::write_file(d / "vocab.tiktoken", std::string(Tokenizer::embedded_tiktoken_text()));
  const std::string tk = " --tokenizer " + (d / "vocab.tiktoken") + " --date 2025-01-02";
  const std::string prompt = R"({"role": "user", "content": "Weather in SF?"},
      {"role": "assistant", "reasoning_content": "Need the tool.", "content": null,
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"SF\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 20}"})";
  test::write_file(d / "prompt.json", "{\"messages\": [" + prompt + "]}");
  test::write_file(d / "answer.json", "{\"messages\": [" + prompt +
                                           R"(, {"role": "assistant", "reasoning_content": "It is 20.", "content": "20 degrees."}]})");
  auto p = test::run_cli("render" + tk + " --request " + (d / "prompt.json"));
  auto r = test::run_cli("render" + tk + " --request " + (d / "answer.json") + " --reply");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto pj = nlohmann::json::parse(p.out), rj = nlohmann::json::parse(r.out);
  const auto pids = pj["ids"].get<std::vector<int32_t>>(), rids = rj["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(rj["prompt_tokens"].get<size_t>(), pids.size());
  // The prompt keeps the tool loop's reasoning: the reply's final answer does not drop it.
  EXPECT_TRUE(std::equal(pids.begin(), pids.end(), rids.begin()));
  const std::string text = rj["text"].get<std::string>();
  EXPECT_EQ(text.substr(pj["text"].get<std::string>().size()),
            "<|channel|>analysis<|message|>It is 20.<|end|><|start|>assistant<|channel|>final<|message|>20 degrees.<|return|>");
  // A tool call reply ends in <|call|>; JSON Lines in, one line out per request.
  test::write_file(d / "many.jsonl",
                   R"({"date": "2025-03-04", "request": {"messages": [{"role": "user", "content": "SF?"}, {"role": "assistant", "reasoning_content": "Call.", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]}})"
                   "\n" + nlohmann::json{{"request", nlohmann::json::parse("{\"messages\": [" + prompt +
                                                                      R"(, {"role": "assistant", "content": "20."}]})")}}.dump() +
                   "\n");
  r = test::run_cli("render" + tk + " --requests " + (d / "many.jsonl") + " --reply");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> lines;
  for (size_t a = 0, b; (b = r.out.find('\n', a)) != std::string::npos; a = b + 1) lines.push_back(nlohmann::json::parse(r.out.substr(a, b - a)));
  ASSERT_EQ(lines.size(), 2u);
  const auto call = lines[0]["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(call.back(), kCall);
  EXPECT_NE(tok().decode(call).find("Current date: 2025-03-04"), std::string::npos);  // the line's own date
  EXPECT_NE(tok().decode(call).find("Call.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary"),
            std::string::npos) << tok().decode(call);
  EXPECT_EQ(lines[1]["ids"].back(), kReturn);
  // A reply must end in an answer or a call, and must be the assistant's.
  test::write_file(d / "bad.jsonl", R"({"request": {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "reasoning_content": "Hmm."}]}})"
                                    "\n");
  test::expect_refused("render" + tk + " --requests " + (d / "bad.jsonl") + " --reply",
                       "line 1: a reply must end in a final answer or a tool call");
  test::write_file(d / "bad2.json", R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]})");
  test::expect_refused("render" + tk + " --request " + (d / "bad2.json") + " --reply",
                       "the last message must be the assistant's reply");
}

}  // namespace
}  // namespace osprey::harmony
