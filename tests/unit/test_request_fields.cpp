// The request-field policy of the chat and completions endpoints (server/request_fields.h), on
// bodies directly: each refusal is a 400 that names the field, each accepted value is read as given.
#include <gtest/gtest.h>

#include "server/request_fields.h"

namespace osprey::server {
namespace {

// The ApiError `f` throws: status 400 with `param` as its param.
template <typename F>
ApiError refusal(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return ApiError(0, "");
}

TEST(RequestFields, TypedReadersTakeTheirTypeAndNameTheFieldOtherwise) {
  const json b = json::parse(R"({"t": 0.5, "k": 3, "s": true, "nul": null, "str": "x"})");
  EXPECT_EQ(get_field<double>(b, "t", 1.0), 0.5);
  EXPECT_EQ(get_field<double>(b, "k", 1.0), 3.0);  // an integer is a number
  EXPECT_EQ(get_field<int64_t>(b, "k", 0), 3);
  EXPECT_EQ(get_field<bool>(b, "s", false), true);
  EXPECT_EQ(get_field<int64_t>(b, "nul", 7), 7);  // null is absent
  EXPECT_EQ(get_field<double>(b, "absent", 2.5), 2.5);
  for (auto [key, expect] : {std::pair{"t", "'t' must be an integer"}, std::pair{"str", "'str' must be an integer"}}) {
    const ApiError e = refusal([&] { get_field<int64_t>(b, key, 0); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, key);
    EXPECT_STREQ(e.what(), expect);
  }
  EXPECT_EQ(refusal([&] { get_field<bool>(b, "k", false); }).param, "k");
  EXPECT_EQ(refusal([&] { get_field<double>(b, "str", 0.0); }).param, "str");
}

TEST(RequestFields, StopIsAStringOrUpToFourStrings) {
  EXPECT_TRUE(stop_field(json::parse(R"({})")).empty());
  EXPECT_EQ(stop_field(json::parse(R"({"stop": "END"})")), std::vector<std::string>{"END"});
  EXPECT_EQ(stop_field(json::parse(R"({"stop": ["a", "b", "c", "d"]})")), (std::vector<std::string>{"a", "b", "c", "d"}));
  for (const char* body : {R"({"stop": ["a", "b", "c", "d", "e"]})", R"({"stop": [1]})", R"({"stop": 5})"})
    EXPECT_EQ(refusal([&] { stop_field(json::parse(body)); }).param, "stop") << body;
}

TEST(RequestFields, UnknownFieldsAreRefusedByName) {
  const json ok = json::parse(R"({"model": "m", "messages": [], "temperature": 0, "user": "u", "metadata": {}})");
  EXPECT_NO_THROW(refuse_unknown_fields(ok, Endpoint::Chat));
  const ApiError e = refusal([] { refuse_unknown_fields(json::parse(R"({"model": "m", "min_p": 0.1})"), Endpoint::Chat); });
  EXPECT_EQ(e.param, "min_p");
  EXPECT_NE(std::string(e.what()).find("/v1/chat/completions"), std::string::npos);
  // Each endpoint's own fields: messages is not a completions field, prompt not a chat one.
  EXPECT_EQ(refusal([] { refuse_unknown_fields(json::parse(R"({"messages": []})"), Endpoint::Completions); }).param, "messages");
  EXPECT_EQ(refusal([] { refuse_unknown_fields(json::parse(R"({"prompt": "x"})"), Endpoint::Chat); }).param, "prompt");
  // stream_options only with stream true, and only its two known keys.
  EXPECT_EQ(refusal([] { refuse_unknown_fields(json::parse(R"({"stream_options": {"include_usage": true}})"), Endpoint::Chat); }).param,
            "stream_options");
  EXPECT_NO_THROW(refuse_unknown_fields(json::parse(R"({"stream": true, "stream_options": {"include_usage": true}})"), Endpoint::Chat));
  EXPECT_EQ(refusal([] { refuse_unknown_fields(json::parse(R"({"stream": true, "stream_options": {"x": 1}})"), Endpoint::Chat); }).param,
            "stream_options.x");
  EXPECT_EQ(refusal([] {
              refuse_unknown_fields(json::parse(R"({"stream": true, "stream_options": {"include_obfuscation": true}})"), Endpoint::Chat);
            }).param,
            "stream_options.include_obfuscation");
}

TEST(RequestFields, UnhonouredFieldsPassOnlyAtTheirNeutralValues) {
  EXPECT_NO_THROW(refuse_unhonoured_fields(json::parse(
      R"({"echo": false, "best_of": 1, "suffix": "", "store": false, "service_tier": "auto", "verbosity": "medium", "modalities": ["text"]})")));
  for (const char* key_value : {R"({"echo": true})", R"({"best_of": 2})", R"({"suffix": "x"})", R"({"store": true})",
                                R"({"service_tier": "flex"})", R"({"verbosity": "low"})", R"({"modalities": ["text", "audio"]})",
                                R"({"audio": {}})", R"({"functions": []})", R"({"parallel_tool_calls": 1})"}) {
    const json b = json::parse(key_value);
    const ApiError e = refusal([&] { refuse_unhonoured_fields(b); });
    EXPECT_EQ(e.status, 400) << key_value;
    EXPECT_EQ(e.param, b.begin().key()) << key_value;
  }
}

TEST(RequestFields, LogitBiasAndPenaltiesWithinTheirRanges) {
  const LogitAdjust a =
      logit_adjust_fields(json::parse(R"({"presence_penalty": 0.5, "frequency_penalty": -1, "logit_bias": {"3": 100, "7": -2.5}})"), 10);
  EXPECT_EQ(a.presence, 0.5f);
  EXPECT_EQ(a.frequency, -1.0f);
  ASSERT_EQ(a.bias.size(), 2u);
  EXPECT_EQ(a.bias[0], (std::pair<int32_t, float>{3, 100.0f}));
  EXPECT_EQ(a.bias[1], (std::pair<int32_t, float>{7, -2.5f}));
  EXPECT_TRUE(logit_adjust_fields(json::parse("{}"), 10).empty());
  for (const char* body : {R"({"logit_bias": {"10": 1}})", R"({"logit_bias": {"-1": 1}})", R"({"logit_bias": {"3x": 1}})",
                           R"({"logit_bias": {"": 1}})", R"({"logit_bias": {"3": 101}})", R"({"logit_bias": {"3": "1"}})",
                           R"({"logit_bias": [1]})"})
    EXPECT_EQ(refusal([&] { logit_adjust_fields(json::parse(body), 10); }).param, "logit_bias") << body;
  EXPECT_EQ(refusal([] { logit_adjust_fields(json::parse(R"({"presence_penalty": 2.5})"), 10); }).param, "presence_penalty");
  EXPECT_EQ(refusal([] { logit_adjust_fields(json::parse(R"({"frequency_penalty": -3})"), 10); }).param, "frequency_penalty");
}

TEST(RequestFields, IdentifiersHaveOpenAisTypes) {
  EXPECT_NO_THROW(check_identifier_fields(
      json::parse(R"({"user": "u", "metadata": {"a": "b"}, "prompt_cache_key": "k", "safety_identifier": "s", "n": 1})")));
  EXPECT_NO_THROW(check_identifier_fields(json::parse(R"({"user": null, "metadata": null})")));
  for (const char* body : {R"({"user": 7})", R"({"prompt_cache_key": [1]})", R"({"safety_identifier": {}})", R"({"metadata": 5})",
                           R"({"metadata": {"a": 5}})"}) {
    const json b = json::parse(body);
    EXPECT_EQ(refusal([&] { check_identifier_fields(b); }).param, b.begin().key()) << body;
  }
  json many = json::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(refusal([&] { check_identifier_fields(json{{"metadata", many}}); }).param, "metadata");
  EXPECT_EQ(refusal([] { check_identifier_fields(json{{"metadata", {{std::string(65, 'k'), "v"}}}}); }).param, "metadata");
  EXPECT_EQ(refusal([] { check_identifier_fields(json{{"metadata", {{"k", std::string(513, 'v')}}}}); }).param, "metadata");
}

TEST(RequestFields, LogprobsPerEndpoint) {
  EXPECT_EQ(logprobs_field(json::parse("{}"), true), -1);
  EXPECT_EQ(logprobs_field(json::parse(R"({"logprobs": true})"), true), 0);
  EXPECT_EQ(logprobs_field(json::parse(R"({"logprobs": true, "top_logprobs": 20})"), true), 20);
  EXPECT_EQ(refusal([] { logprobs_field(json::parse(R"({"top_logprobs": 2})"), true); }).param, "top_logprobs");
  EXPECT_EQ(refusal([] { logprobs_field(json::parse(R"({"logprobs": true, "top_logprobs": 21})"), true); }).param, "top_logprobs");
  EXPECT_EQ(logprobs_field(json::parse(R"({"logprobs": 5})"), false), 5);
  EXPECT_EQ(logprobs_field(json::parse(R"({"logprobs": 0})"), false), 0);
  for (const char* body : {R"({"logprobs": 21})", R"({"logprobs": true})", R"({"logprobs": -1})"})
    EXPECT_EQ(refusal([&] { logprobs_field(json::parse(body), false); }).param, "logprobs") << body;
}

}  // namespace
}  // namespace osprey::server
