// The fields of a chat or completions request body: typed readers that name the field in their
// errors, the policy that refuses unknown and unhonoured fields (never ignored), and the fields
// that become a GenerationRequest's logit adjustments and logprobs. Every error is an ApiError
// (400, the field as its param).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "server/api_error.h"

namespace osprey::server {

using json = nlohmann::ordered_json;

// The endpoint a body is for: /v1/responses checks its own field list (responses_api.cpp).
enum class Endpoint { Chat, Completions, Responses };

// `key` of `body`, or `fallback` when absent or null; a value of another type is refused. T is
// double (any number), int64_t (an integer) or bool.
template <typename T>
T get_field(const json& body, const char* key, T fallback);
template <>
double get_field(const json& body, const char* key, double fallback);
template <>
int64_t get_field(const json& body, const char* key, int64_t fallback);
template <>
bool get_field(const json& body, const char* key, bool fallback);

// stream_options.include_usage.
bool wants_usage(const json& body);

// `stop`: a string or an array of at most 4 strings; none when absent.
std::vector<std::string> stop_field(const json& body);

// Every field of a chat or completions request is one osprey honours, one refuse_unhonoured
// refuses by value, or an identifier that changes nothing in the answer; any other is refused.
void refuse_unknown_fields(const json& body, Endpoint endpoint);
// Fields osprey does not honour, refused unless they hold their neutral values.
void refuse_unhonoured_fields(const json& body);

// The identifiers that change nothing in the answer (user, metadata, prompt_cache_key,
// safety_identifier), held to OpenAI's types: strings, and metadata at most 16 string values of at
// most 512 characters under keys of at most 64. Every endpoint.
void check_identifier_fields(const json& body);

// logit_bias (token ids below `vocab`), presence_penalty, frequency_penalty.
LogitAdjust logit_adjust_fields(const json& body, int vocab);

// chat: logprobs true with top_logprobs 0..20; completions: logprobs k in 0..20. -1: none.
int logprobs_field(const json& body, bool chat);

}  // namespace osprey::server
