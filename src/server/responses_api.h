// The Responses API (POST /v1/responses) on top of the chat path: a Responses request becomes a
// chat-completions request (harmony.md section 4.3: instructions and function tools the developer
// message, input items messages, function_call and function_call_output the call and the tool
// result, reasoning items the analysis), the output's chat deltas become Responses items and
// stream events, and an in-memory store keeps responses for previous_response_id and GET.
#pragma once
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/chat_output.h"

namespace osprey::server {

// Stored responses: the response object and the conversation it ends (chat-form messages, its
// input and its output), for previous_response_id. At most `capacity`; the least recently used
// goes first.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  struct Entry {
    json response;
    json messages;
  };
  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size();
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::list<std::string> lru_;
  std::map<std::string, std::pair<Entry, std::list<std::string>::iterator>> entries_;
};

// The chat-completions request a Responses request stands for. `history`: the stored messages of
// previous_response_id (an array, possibly empty). `messages_out`: history plus this request's
// input, as chat messages (stored with the output). Throws FieldError naming the field.
json chat_request_from_responses(const json& req, const json& history, json& messages_out);

// Model output tokens -> Responses output items and stream events, as tokens arrive.
class ResponsesOutput {
 public:
  ResponsesOutput(const harmony::Tokenizer& tok, std::set<std::string> declared);
  // Events this token produced (objects with "type"; the server numbers them).
  std::vector<json> push(int32_t token);
  std::vector<json> finish();  // end of generation: the open item closes
  const json& items() const { return items_; }
  json messages() const;       // the output as chat messages (for the store)
  int reasoning_tokens() const { return chat_.reasoning_tokens(); }

 private:
  enum class Kind { None, Reasoning, Message, Call };
  void deltas_to_events(const std::vector<json>& deltas, std::vector<json>& ev);
  void open(Kind k, std::vector<json>& ev, const json& call = nullptr);
  void close(std::vector<json>& ev);
  ChatOutputBuilder chat_;
  json items_ = json::array();
  Kind kind_ = Kind::None;
  std::string text_;  // the open item's text or arguments
};

}  // namespace osprey::server
