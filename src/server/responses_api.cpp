#include "server/responses_api.h"

#include <fmt/format.h>

#include "server/structured_output.h"

namespace osprey::server {

void ResponseStore::put(const std::string& id, Entry e) {
  std::lock_guard lk(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    lru_.erase(it->second.second);
    entries_.erase(it);
  }
  lru_.push_front(id);
  entries_[id] = {std::move(e), lru_.begin()};
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return it->second.first;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  lru_.erase(it->second.second);
  entries_.erase(it);
  return true;
}

size_t ResponseStore::size() {
  std::lock_guard lk(mu_);
  return entries_.size();
}

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& why) {
  throw FieldError(field, fmt::format("'{}' {}", field, why));
}

// obj[key] as a string: `dflt` when absent or null, refused (naming WHERE.KEY) when of another type
// (nlohmann's value() would throw a type error, a 500).
std::string string_at(const json& obj, const char* key, const std::string& where, const std::string& dflt = "") {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (!it->is_string()) refuse(where + "." + key, "must be a string");
  return it->get<std::string>();
}

// A message's content: a string, or parts of type input_text / output_text / text.
std::string content_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) refuse(where, "must be a string or an array of text parts");
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    const std::string type = p.is_object() ? string_at(p, "type", fmt::format("{}[{}]", where, i)) : "";
    if (type != "input_text" && type != "output_text" && type != "text")
      refuse(fmt::format("{}[{}]", where, i), fmt::format("has type '{}': only text parts are supported", type));
    if (!p.contains("text") || !p["text"].is_string()) refuse(fmt::format("{}[{}].text", where, i), "must be a string");
    s += p["text"].get<std::string>();
  }
  return s;
}

// Input items -> chat messages, appended to out. Reasoning and function calls gather into one
// assistant message until a message or a tool result ends it.
void input_messages(const json& input, json& out) {
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) refuse("input", "must be a string or an array of items");
  json pending;  // the assistant message being gathered
  auto flush = [&] {
    if (!pending.is_null()) out.push_back(pending);
    pending = nullptr;
  };
  auto assistant = [&]() -> json& {
    if (pending.is_null()) pending = {{"role", "assistant"}, {"content", nullptr}};
    return pending;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& it = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!it.is_object()) refuse(where, "must be an object");
    const std::string type = string_at(it, "type", where, it.contains("role") ? "message" : "");
    if (type == "message") {
      const std::string role = string_at(it, "role", where);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        refuse(where + ".role", fmt::format("'{}' is not one of user, system, developer, assistant", role));
      const std::string text = content_text(it.value("content", json()), where + ".content");
      if (role == "assistant") {
        json& a = assistant();
        a["content"] = (a["content"].is_string() ? a["content"].get<std::string>() : "") + text;
        flush();
      } else {
        flush();
        out.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "reasoning") {
      std::string text;
      if (auto c = it.find("content"); c != it.end() && c->is_array())
        for (const json& p : *c)
          if (p.is_object() && string_at(p, "type", where + ".content[]") == "reasoning_text")
            text += string_at(p, "text", where + ".content[]");
      if (text.empty())  // only a summary: it stands for the reasoning
        if (auto s = it.find("summary"); s != it.end() && s->is_array())
          for (const json& p : *s)
            if (p.is_object()) text += string_at(p, "text", where + ".summary[]");
      if (text.empty() && it.contains("encrypted_content") && !it["encrypted_content"].is_null())
        refuse(where + ".encrypted_content", "cannot be read here (osprey returns reasoning as text, never encrypted)");
      json& a = assistant();
      a["reasoning_content"] = a.value("reasoning_content", "") + text;
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"})
        if (!it.contains(k) || !it[k].is_string()) refuse(fmt::format("{}.{}", where, k), "must be a string");
      json& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
      a["tool_calls"].push_back({{"id", it["call_id"]}, {"type", "function"},
                                 {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
    } else if (type == "function_call_output") {
      if (!it.contains("call_id") || !it["call_id"].is_string()) refuse(where + ".call_id", "must be a string");
      flush();
      const json& o = it.value("output", json());
      out.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]},
                     {"content", o.is_string() ? o.get<std::string>() : content_text(o, where + ".output")}});
    } else {
      refuse(where + ".type", fmt::format("'{}' is not supported (message, reasoning, function_call, function_call_output)", type));
    }
  }
  flush();
}

}  // namespace

json chat_request_from_responses(const json& req, const json& history, json& messages_out) {
  static const std::set<std::string> kKnown = {
      "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "max_output_tokens",
      "temperature", "top_p", "top_k", "seed", "text", "stream", "store", "previous_response_id", "metadata", "user",
      "truncation", "include", "background", "service_tier", "top_logprobs", "max_tool_calls", "reasoning_budget",
      "prompt_cache_key", "safety_identifier", "stream_options", "speculative"};
  for (auto it = req.begin(); it != req.end(); ++it)
    if (!kKnown.count(it.key())) refuse(it.key(), "is not a Responses API field osprey knows");
  auto given = [&](const char* k) -> const json* {
    auto it = req.find(k);
    return it == req.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = given("truncation"); v && *v != "disabled") refuse("truncation", "only 'disabled' is supported");
  if (const json* v = given("include"); v && !(v->is_array() && v->empty()))
    refuse("include", "is not supported (no encrypted reasoning, no output logprobs)");
  if (const json* v = given("background"); v && *v != false) refuse("background", "is not supported");
  if (const json* v = given("service_tier"); v && *v != "auto" && *v != "default") refuse("service_tier", "only 'auto' or 'default'");
  if (const json* v = given("top_logprobs"); v && *v != 0) refuse("top_logprobs", "is not supported on /v1/responses");
  if (const json* v = given("max_tool_calls"); v) refuse("max_tool_calls", "is not supported");
  if (const json* v = given("stream_options"); v && !(v->is_object() && v->empty())) refuse("stream_options", "is not supported");
  if (!given("input")) refuse("input", "is required");

  json chat = {{"model", req["model"]}};
  json messages = history.is_array() ? history : json::array();
  // instructions belong to this request only (they are not carried by previous_response_id).
  json turn = json::array();
  if (const json* v = given("instructions")) {
    if (!v->is_string()) refuse("instructions", "must be a string");
    turn.push_back({{"role", "developer"}, {"content", *v}});
  }
  json inputs = json::array();
  input_messages(req["input"], inputs);
  messages_out = messages;
  for (const json& m : inputs) messages_out.push_back(m);
  for (const json& m : turn) messages.push_back(m);
  for (const json& m : inputs) messages.push_back(m);
  chat["messages"] = messages;

  if (const json* tools = given("tools")) {
    if (!tools->is_array()) refuse("tools", "must be an array");
    json out = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string type = t.is_object() ? string_at(t, "type", fmt::format("tools[{}]", i)) : "";
      if (type != "function") refuse(fmt::format("tools[{}]", i), fmt::format("has type '{}': only function tools are served", type));
      json f = {{"name", t.value("name", json())}};
      for (auto it = t.begin(); it != t.end(); ++it)
        if (it.key() == "description" || it.key() == "parameters" || it.key() == "strict") f[it.key()] = it.value();
        else if (it.key() != "type" && it.key() != "name")
          refuse(fmt::format("tools[{}].{}", i, it.key()), "is not supported (type, name, description, parameters, strict)");
      out.push_back({{"type", "function"}, {"function", f}});
    }
    chat["tools"] = out;
  }
  if (const json* tc = given("tool_choice")) {
    if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else if (tc->is_object() && string_at(*tc, "type", "tool_choice") == "function" && tc->contains("name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    } else {
      refuse("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"name\": NAME}");
    }
  }
  if (const json* r = given("reasoning")) {
    if (!r->is_object()) refuse("reasoning", "must be an object");
    if (r->contains("effort") && !(*r)["effort"].is_null()) chat["reasoning_effort"] = (*r)["effort"];
    for (const char* k : {"summary", "generate_summary"})  // generate_summary: the older name
      if (auto s = r->find(k); s != r->end() && !s->is_null() && *s != "auto")
        refuse(std::string("reasoning.") + k, "only 'auto' is supported (gpt-oss returns its reasoning text, not a summary)");
    for (auto it = r->begin(); it != r->end(); ++it)
      if (it.key() != "effort" && it.key() != "summary" && it.key() != "generate_summary")
        refuse("reasoning." + it.key(), "is not supported");
  }
  if (const json* v = given("max_output_tokens")) chat["max_tokens"] = *v;
  if (const json* v = given("parallel_tool_calls"); v && !v->is_boolean()) refuse("parallel_tool_calls", "must be a boolean");
  for (const char* k : {"temperature", "top_p", "top_k", "seed", "parallel_tool_calls", "reasoning_budget", "stream",
                        "speculative"})
    if (const json* v = given(k)) chat[k] = *v;
  if (const json* text = given("text")) {
    if (!text->is_object()) refuse("text", "must be an object");
    for (auto it = text->begin(); it != text->end(); ++it)
      if (it.key() != "format" && !(it.key() == "verbosity" && (it.value().is_null() || it.value() == "medium")))
        refuse("text." + it.key(), "is not supported");
    if (auto f = text->find("format"); f != text->end() && !f->is_null()) {
      if (!f->is_object() || !f->contains("type")) refuse("text.format", "must be an object with a 'type'");
      const std::string type = (*f)["type"].is_string() ? (*f)["type"].get<std::string>() : "";
      if (type == "json_schema") {
        json js = {{"name", string_at(*f, "name", "text.format", "response")}, {"schema", f->value("schema", json())}};
        for (auto it = f->begin(); it != f->end(); ++it)
          if (it.key() == "description" || it.key() == "strict") js[it.key()] = it.value();
          else if (it.key() != "type" && it.key() != "name" && it.key() != "schema")
            refuse("text.format." + it.key(), "is not supported (type, name, description, schema, strict)");
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        for (auto it = f->begin(); it != f->end(); ++it)
          if (it.key() != "type") refuse("text.format." + it.key(), fmt::format("is not supported with type '{}'", type));
        chat["response_format"] = {{"type", type}};
      }
    }
  }
  return chat;
}

ResponsesOutput::ResponsesOutput(const harmony::Tokenizer& tok, std::set<std::string> declared)
    : chat_(tok, std::move(declared), {}) {}

std::vector<json> ResponsesOutput::push(int32_t token) {
  std::vector<json> ev;
  deltas_to_events(chat_.push(token), ev);
  return ev;
}

std::vector<json> ResponsesOutput::finish() {
  std::vector<json> ev;
  deltas_to_events(chat_.finish(), ev);
  close(ev);
  return ev;
}

void ResponsesOutput::open(Kind k, std::vector<json>& ev, const json& call) {
  close(ev);
  kind_ = k;
  text_.clear();
  const size_t index = items_.size();
  json item;
  if (k == Kind::Reasoning) {
    item = {{"type", "reasoning"}, {"id", new_id("rs_")}, {"summary", json::array()}, {"content", json::array()},
            {"status", "in_progress"}};
  } else if (k == Kind::Message) {
    item = {{"type", "message"}, {"id", new_id("msg_")}, {"status", "in_progress"}, {"role", "assistant"},
            {"content", json::array()}};
  } else {
    item = {{"type", "function_call"}, {"id", new_id("fc_")}, {"call_id", call["id"]},
            {"name", call["function"]["name"]}, {"arguments", ""}, {"status", "in_progress"}};
  }
  items_.push_back(item);
  ev.push_back({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  if (k == Kind::Reasoning || k == Kind::Message)
    ev.push_back({{"type", "response.content_part.added"}, {"item_id", item["id"]}, {"output_index", index},
                  {"content_index", 0},
                  {"part", k == Kind::Message ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                                              : json{{"type", "reasoning_text"}, {"text", ""}}}});
}

void ResponsesOutput::close(std::vector<json>& ev) {
  if (kind_ == Kind::None) return;
  const size_t index = items_.size() - 1;
  json& item = items_[index];
  const json id = item["id"];
  if (kind_ == Kind::Reasoning || kind_ == Kind::Message) {
    const bool msg = kind_ == Kind::Message;
    const json part = msg ? json{{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}, {"logprobs", json::array()}}
                          : json{{"type", "reasoning_text"}, {"text", text_}};
    ev.push_back({{"type", msg ? "response.output_text.done" : "response.reasoning_text.done"}, {"item_id", id},
                  {"output_index", index}, {"content_index", 0}, {"text", text_}});
    ev.push_back({{"type", "response.content_part.done"}, {"item_id", id}, {"output_index", index}, {"content_index", 0},
                  {"part", part}});
    item["content"] = json::array({part});
  } else {
    item["arguments"] = text_;
    ev.push_back({{"type", "response.function_call_arguments.done"}, {"item_id", id}, {"output_index", index},
                  {"name", item["name"]}, {"arguments", text_}});
  }
  item["status"] = "completed";
  ev.push_back({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  kind_ = Kind::None;
}

void ResponsesOutput::deltas_to_events(const std::vector<json>& deltas, std::vector<json>& ev) {
  for (const json& d : deltas) {
    if (auto r = d.find("reasoning_content"); r != d.end()) {
      if (kind_ != Kind::Reasoning) open(Kind::Reasoning, ev);
      text_ += r->get<std::string>();
      ev.push_back({{"type", "response.reasoning_text.delta"}, {"item_id", items_.back()["id"]},
                    {"output_index", items_.size() - 1}, {"content_index", 0}, {"delta", *r}});
    } else if (auto c = d.find("content"); c != d.end() && c->is_string()) {
      if (kind_ != Kind::Message) open(Kind::Message, ev);
      text_ += c->get<std::string>();
      ev.push_back({{"type", "response.output_text.delta"}, {"item_id", items_.back()["id"]},
                    {"output_index", items_.size() - 1}, {"content_index", 0}, {"delta", *c}, {"logprobs", json::array()}});
    } else if (auto t = d.find("tool_calls"); t != d.end()) {
      for (const json& call : *t) {
        if (call.contains("id")) open(Kind::Call, ev, call);
        const std::string args = call["function"].value("arguments", "");
        if (args.empty() || kind_ != Kind::Call) continue;
        text_ += args;
        ev.push_back({{"type", "response.function_call_arguments.delta"}, {"item_id", items_.back()["id"]},
                      {"output_index", items_.size() - 1}, {"delta", args}});
      }
    }
  }
}

json ResponsesOutput::messages() const {
  json out = json::array();
  json a = {{"role", "assistant"}, {"content", nullptr}};
  auto flush = [&] {
    if (a.contains("reasoning_content") || a.contains("tool_calls") || !a["content"].is_null()) out.push_back(a);
    a = {{"role", "assistant"}, {"content", nullptr}};
  };
  for (const json& it : items_) {
    const std::string type = it["type"];
    if (type == "reasoning") {
      a["reasoning_content"] = it["content"].empty() ? "" : it["content"][0]["text"].get<std::string>();
    } else if (type == "function_call") {
      if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
      a["tool_calls"].push_back({{"id", it["call_id"]}, {"type", "function"},
                                 {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
    } else {
      a["content"] = it["content"].empty() ? "" : it["content"][0]["text"].get<std::string>();
      flush();
    }
  }
  flush();
  return out;
}

}  // namespace osprey::server
