#include "harmony/chat_request.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "harmony/renderer.h"

#include "core/error.h"

namespace osprey::harmony {

namespace {

// Refuses a key of `obj` outside `known` (an OpenAI field osprey does not honour, or a misspelling):
// "WHERE.KEY is not supported (known: ...)".
void only_keys(const ordered_json& obj, std::initializer_list<const char*> known, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; })) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail("{}.{} is not supported (known: {})", where, it.key(), list);
    }
}

// Keys a client may send back with their neutral values (the OpenAI SDKs return an assistant
// message with "refusal": null, "audio": null, "annotations": []): true where `key` is absent or so.
bool absent_or_neutral(const ordered_json& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() || it->is_null() || (it->is_array() && it->empty());
}

std::string content_text(const ordered_json& c, const std::string& where) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string s;
    for (auto& part : c) {
      if (!part.is_object() || !part.contains("type")) fail("{}: content parts must be objects with a type", where);
      std::string type = part["type"].is_string() ? part["type"].get<std::string>() : "";
      if (type != "text") fail("{}: content part type '{}' is not supported (text only)", where, type);
      if (!part.contains("text") || !part["text"].is_string()) fail("{}: a text part needs a string 'text'", where);
      only_keys(part, {"type", "text"}, where + "[]");
      s += part["text"].get<std::string>();
    }
    return s;
  }
  fail("{}: content must be a string, an array of parts, or null", where);
}

// reasoning_effort, or reasoning.effort (the Responses API's spelling); both only if they agree.
std::string effort(const ordered_json& req) {
  std::string e = "medium";
  std::optional<std::string> top, nested;
  if (auto it = req.find("reasoning_effort"); it != req.end() && !it->is_null()) {
    if (!it->is_string()) fail("reasoning_effort must be a string");
    top = it->get<std::string>();
  }
  if (auto r = req.find("reasoning"); r != req.end() && !r->is_null()) {
    if (!r->is_object()) fail("reasoning must be an object ({{\"effort\": ...}})");
    only_keys(*r, {"effort"}, "reasoning");
    if (auto ef = r->find("effort"); ef != r->end() && !ef->is_null()) {
      if (!ef->is_string()) fail("reasoning.effort must be a string");
      nested = ef->get<std::string>();
    }
  }
  if (top && nested && *top != *nested)
    fail("reasoning_effort '{}' and reasoning.effort '{}' disagree; give one", *top, *nested);
  if (top) e = *top;
  else if (nested) e = *nested;
  if (e == "minimal") e = "low";
  if (e == "xhigh") e = "high";
  if (e != "low" && e != "medium" && e != "high")
    fail("reasoning_effort '{}' is not supported (low, medium, high; gpt-oss has no mode without reasoning)", e);
  return e;
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > kMaxToolNameLength) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// A function's parameters must be a JSON schema: known types, `properties` of schemas, `items` a
// schema, `required` the declared properties. Iterative (the request's depth is bounded before it
// gets here, but no walk of request JSON recurses).
void check_schema(const ordered_json& root, const std::string& where) {
  static const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
  std::vector<std::pair<const ordered_json*, std::string>> todo = {{&root, where}};
  while (!todo.empty()) {
    auto [s, path] = todo.back();
    todo.pop_back();
    if (s->is_boolean()) continue;  // `true` / `false` schemas
    if (!s->is_object()) fail("{} must be a JSON schema object", path);
    if (auto t = s->find("type"); t != s->end()) {
      auto known = [&](const ordered_json& v) { return v.is_string() && kTypes.count(v.get<std::string>()); };
      bool ok = t->is_array() ? !t->empty() && std::all_of(t->begin(), t->end(), known) : known(*t);
      if (!ok) fail("{}.type must be one of object, array, string, number, integer, boolean, null (or an array of them)", path);
    }
    auto props = s->find("properties");
    if (props != s->end()) {
      if (!props->is_object()) fail("{}.properties must be an object", path);
      for (auto it = props->begin(); it != props->end(); ++it) todo.push_back({&it.value(), path + ".properties." + it.key()});
    }
    if (auto r = s->find("required"); r != s->end()) {
      if (!r->is_array()) fail("{}.required must be an array of property names", path);
      for (const auto& n : *r) {
        if (!n.is_string()) fail("{}.required must be an array of property names", path);
        if (props == s->end() || !props->contains(n.get<std::string>()))
          fail("{}.required names '{}', which is not one of its properties", path, n.get<std::string>());
      }
    }
    if (auto it = s->find("items"); it != s->end()) {
      if (it->is_array())
        for (size_t j = 0; j < it->size(); ++j) todo.push_back({&(*it)[j], path + ".items[" + std::to_string(j) + "]"});
      else
        todo.push_back({&*it, path + ".items"});
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"})
      if (auto a = s->find(key); a != s->end()) {
        if (!a->is_array()) fail("{}.{} must be an array of schemas", path, key);
        for (size_t j = 0; j < a->size(); ++j) todo.push_back({&(*a)[j], path + "." + key + "[" + std::to_string(j) + "]"});
      }
    for (const char* key : {"$defs", "definitions"})
      if (auto d = s->find(key); d != s->end()) {
        if (!d->is_object()) fail("{}.{} must be an object of schemas", path, key);
        for (auto it = d->begin(); it != d->end(); ++it) todo.push_back({&it.value(), path + "." + key + "." + it.key()});
      }
    if (auto ap = s->find("additionalProperties"); ap != s->end() && !ap->is_boolean()) todo.push_back({&*ap, path + ".additionalProperties"});
    if (auto e = s->find("enum"); e != s->end() && !e->is_array()) fail("{}.enum must be an array", path);
  }
}

ToolNamespace function_tools(const ordered_json& tools) {
  if (!tools.is_array()) fail("tools must be an array");
  ToolNamespace ns{"functions", std::nullopt, {}};
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("type") || t["type"] != "function")
      fail("{}: only type 'function' tools are supported", where);
    only_keys(t, {"type", "function"}, where);
    auto f = t.find("function");
    if (f == t.end() || !f->is_object()) fail("{}: missing 'function' object", where);
    only_keys(*f, {"name", "description", "parameters", "strict"}, where + ".function");
    if (auto st = f->find("strict"); st != f->end() && !st->is_null() && !st->is_boolean())
      fail("{}.function.strict must be a boolean", where);
    auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get<std::string>().empty())
      fail("{}.function.name must be a non-empty string", where);
    if (!valid_tool_name(name->get<std::string>()))
      fail("{}.function.name must be 1 to {} letters, digits, '_' or '-'", where, kMaxToolNameLength);
    ToolDescription d{name->get<std::string>(), "", nullptr};
    if (auto desc = f->find("description"); desc != f->end() && !desc->is_null()) {
      if (!desc->is_string()) fail("{}.function.description must be a string", where);
      d.description = desc->get<std::string>();
    }
    if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
      if (!p->is_object()) fail("{}.function.parameters must be a JSON schema object", where);
      if (p->contains("type") && (*p)["type"] != "object")
        fail("{}.function.parameters must be an object schema (type 'object')", where);
      check_schema(*p, where + ".function.parameters");
      d.parameters = *p;
    }
    ns.tools.push_back(std::move(d));
  }
  return ns;
}


}  // namespace

std::string today_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

ResponseFormatField response_format_field(const ordered_json& req) {
  ResponseFormatField out;
  auto rf = req.find("response_format");
  if (rf == req.end() || rf->is_null()) return out;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    fail("response_format must be an object with a 'type'");
  const std::string type = (*rf)["type"].get<std::string>();
  if (type == "text" || type == "json_object") {
    only_keys(*rf, {"type"}, "response_format");
    out.type = type == "text" ? ResponseFormatField::Type::Text : ResponseFormatField::Type::JsonObject;
    return out;
  }
  if (type != "json_schema") fail("response_format type '{}' is not one of text, json_object, json_schema", type);
  only_keys(*rf, {"type", "json_schema"}, "response_format");
  auto js = rf->find("json_schema");
  if (js == rf->end() || !js->is_object()) fail("response_format.json_schema must be an object");
  only_keys(*js, {"name", "description", "schema", "strict"}, "response_format.json_schema");
  ResponseFormat f{"response", std::nullopt, ordered_json::object()};
  if (auto n = js->find("name"); n != js->end() && !n->is_null()) {
    if (!n->is_string() || !valid_tool_name(n->get<std::string>()))
      fail("response_format.json_schema.name must be 1 to {} letters, digits, '_' or '-'", kMaxToolNameLength);
    f.name = n->get<std::string>();
  }
  if (auto d = js->find("description"); d != js->end() && !d->is_null()) {
    if (!d->is_string()) fail("response_format.json_schema.description must be a string");
    f.description = d->get<std::string>();
  }
  if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean())
    fail("response_format.json_schema.strict must be a boolean");
  auto sc = js->find("schema");
  if (sc == js->end() || !sc->is_object()) fail("response_format.json_schema.schema must be a JSON schema object");
  f.schema = *sc;
  out.type = ResponseFormatField::Type::JsonSchema;
  out.format = std::move(f);
  return out;
}

std::vector<Message> conversation_from_chat_request(const ordered_json& req, const ChatRenderSettings& settings) {
  if (!req.is_object()) fail("the request body must be a JSON object");
  auto msgs_it = req.find("messages");
  if (msgs_it == req.end() || !msgs_it->is_array()) fail("'messages' must be an array");
  if (msgs_it->empty()) fail("'messages' must not be empty");

  SystemContent sys;
  sys.reasoning_effort = effort(req);
  if (!settings.current_date.empty()) sys.conversation_start_date = settings.current_date;

  bool tools_enabled = true;
  if (auto tc = req.find("tool_choice"); tc != req.end() && !tc->is_null()) {
    if (tc->is_string()) {
      std::string v = tc->get<std::string>();
      if (v != "none" && v != "auto" && v != "required") fail("tool_choice '{}' is not one of none, auto, required", v);
      tools_enabled = v != "none";
    } else if (tc->is_object()) {
      auto f = tc->find("function");
      if (tc->value("type", ordered_json()) != "function" || f == tc->end() || !f->is_object() || !f->contains("name") ||
          !(*f)["name"].is_string())
        fail("tool_choice must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": NAME}}}}");
      only_keys(*tc, {"type", "function"}, "tool_choice");
      only_keys(*f, {"name"}, "tool_choice.function");
    } else {
      fail("tool_choice must be a string or an object");
    }
  }
  DeveloperContent dev;
  dev.response_format = response_format_field(req).format;
  if (auto tools = req.find("tools"); tools != req.end() && !tools->is_null()) {
    ToolNamespace ns = function_tools(*tools);  // checked with tool_choice none too
    if (tools_enabled && !ns.tools.empty()) dev.tools["functions"] = std::move(ns);
  }

  // Client system and developer texts, in order, become the developer instructions.
  std::vector<std::string> instructions;
  const ordered_json& msgs = *msgs_it;
  // An assistant's reasoning is kept only if no later assistant message carries a final answer.
  std::vector<bool> final_after(msgs.size() + 1, false);
  auto role_is = [](const ordered_json& m, const char* role) { return m.is_object() && m.contains("role") && m["role"] == role; };
  if (settings.last_is_reply && !role_is(msgs.back(), "assistant"))
    fail("the last message must be the assistant's reply");
  for (size_t i = msgs.size() - (settings.last_is_reply ? 1 : 0); i-- > 0;) {
    const ordered_json& m = msgs[i];
    bool is_final = role_is(m, "assistant") && m.contains("content") &&
                    !m["content"].is_null() && !(m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty());
    final_after[i] = final_after[i + 1] || is_final;
  }
  std::vector<Message> body;
  std::map<std::string, std::string> call_names;  // tool_call_id -> function name
  std::string last_call_name;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ordered_json& m = msgs[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail("{} must be an object", where);
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) fail("{}.role must be a string", where);
    std::string role = role_it->get<std::string>();
    if (role == "system" || role == "developer") {
      // Their texts become the developer instructions: no author of their own (no name).
      only_keys(m, {"role", "content"}, where);
      std::string t = content_text(m.value("content", ordered_json()), where + ".content");
      if (!t.empty()) instructions.push_back(t);
    } else if (role == "user") {
      only_keys(m, {"role", "content", "name"}, where);
      std::optional<std::string> name;  // the author name: <|start|>user:NAME
      if (auto n = m.find("name"); n != m.end() && !n->is_null()) {
        if (!n->is_string() || !valid_tool_name(n->get<std::string>()))
          fail("{}.name must be 1 to {} letters, digits, '_' or '-'", where, kMaxToolNameLength);
        name = n->get<std::string>();
      }
      body.push_back({"user", name, std::nullopt, std::nullopt, std::nullopt,
                      content_text(m.value("content", ordered_json()), where + ".content")});
    } else if (role == "assistant") {
      only_keys(m, {"role", "content", "tool_calls", "reasoning_content", "reasoning", "refusal", "name", "audio",
                    "function_call", "annotations"},
                where);
      for (const char* key : {"name", "audio", "function_call", "annotations"})
        if (!absent_or_neutral(m, key))
          fail("{}.{} is not supported on an assistant message (gpt-oss text turns: content, reasoning_content, "
               "tool_calls)",
               where, key);
      std::optional<std::string> reasoning_field;
      for (const char* key : {"reasoning_content", "reasoning"})
        if (auto r = m.find(key); r != m.end() && !r->is_null()) {
          if (!r->is_string()) fail("{}.{} must be a string", where, key);
          if (reasoning_field && *reasoning_field != r->get<std::string>())
            fail("{}: reasoning_content and reasoning disagree; give one", where);
          reasoning_field = r->get<std::string>();
        }
      const std::string reasoning = reasoning_field.value_or("");
      std::string content = content_text(m.value("content", ordered_json()), where + ".content");
      // A refusal the model gave is its answer's text (Harmony has no refusal channel).
      if (auto rf = m.find("refusal"); rf != m.end() && !rf->is_null()) {
        if (!rf->is_string()) fail("{}.refusal must be a string", where);
        if (!content.empty() && !rf->get<std::string>().empty())
          fail("{}: content and refusal are both given; an answer is one or the other", where);
        if (content.empty()) content = rf->get<std::string>();
      }
      const ordered_json* calls = nullptr;
      if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
        if (!tc->is_array()) fail("{}.tool_calls must be an array", where);
        calls = &*tc;
      }
      if (!reasoning.empty() && !final_after[i])  // this message's own answer counts
        body.push_back({"assistant", std::nullopt, std::nullopt, "analysis", std::nullopt, reasoning});
      if (calls && !calls->empty()) {
        if (!content.empty())  // a preamble: user-visible commentary without a recipient
          body.push_back({"assistant", std::nullopt, std::nullopt, "commentary", std::nullopt, content});
        for (size_t c = 0; c < calls->size(); ++c) {
          const ordered_json& call = (*calls)[c];
          std::string cw = where + ".tool_calls[" + std::to_string(c) + "]";
          if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
            fail("{} needs a 'function' object", cw);
          only_keys(call, {"id", "type", "function", "index"}, cw);  // index: as streamed deltas carry it
          if (auto ty = call.find("type"); ty != call.end() && !ty->is_null() && *ty != "function")
            fail("{}.type must be 'function'", cw);
          const ordered_json& f = call["function"];
          only_keys(f, {"name", "arguments"}, cw + ".function");
          if (!f.contains("name") || !f["name"].is_string()) fail("{}.function.name must be a string", cw);
          std::string name = f["name"].get<std::string>();
          std::string args = "{}";
          if (f.contains("arguments")) {
            if (f["arguments"].is_string()) args = f["arguments"].get<std::string>();  // verbatim, never re-quoted
            else if (f["arguments"].is_object()) args = f["arguments"].dump();
            else fail("{}.function.arguments must be a JSON string", cw);
          }
          if (call.contains("id") && call["id"].is_string()) call_names[call["id"].get<std::string>()] = name;
          last_call_name = name;
          body.push_back({"assistant", std::nullopt, "functions." + name, "commentary", "<|constrain|>json", args});
        }
      } else if (!content.empty() || reasoning.empty()) {
        body.push_back({"assistant", std::nullopt, std::nullopt, "final", std::nullopt, content});
      }
    } else if (role == "tool") {
      only_keys(m, {"role", "content", "tool_call_id", "name"}, where);
      std::string name;
      if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
        if (!id->is_string() || !call_names.count(id->get<std::string>()))
          fail("{}.tool_call_id {} answers no earlier assistant tool call", where, id->dump());
        name = call_names[id->get<std::string>()];
      } else if (auto n = m.find("name"); n != m.end() && n->is_string())
        name = n->get<std::string>();
      else if (!last_call_name.empty())
        name = last_call_name;
      else
        fail("{}: a tool message must follow an assistant tool call (unknown tool_call_id)", where);
      body.push_back({"tool", "functions." + name, "assistant", "commentary", std::nullopt,
                      content_text(m.value("content", ordered_json()), where + ".content")});
    } else {
      fail("{}.role '{}' is not one of system, developer, user, assistant, tool", where, role);
    }
  }
  std::vector<Message> conv;
  conv.push_back({"system", std::nullopt, std::nullopt, std::nullopt, std::nullopt, sys});
  if (!instructions.empty()) {
    std::string joined;
    for (size_t i = 0; i < instructions.size(); ++i) joined += (i ? "\n\n" : "") + instructions[i];
    dev.instructions = joined;
  }
  if (dev.instructions || !dev.tools.empty() || dev.response_format)
    conv.push_back({"developer", std::nullopt, std::nullopt, std::nullopt, std::nullopt, dev});
  conv.insert(conv.end(), body.begin(), body.end());
  if (settings.max_prompt_bytes) {  // bound the prompt before the renderer tokenizes it
    size_t bytes = dev.tools.empty() ? 0 : render_tools_section(dev.tools).size();
    if (dev.instructions) bytes += dev.instructions->size();
    if (dev.response_format) bytes += dev.response_format->schema.dump().size();
    for (const Message& m : body) bytes += m.text().size() + (m.recipient ? m.recipient->size() : 0);
    if (bytes > settings.max_prompt_bytes)
      throw PromptTooLong(fmt::format(
          "the prompt's text is {} bytes (the messages and the rendered tools), more than the {} the context can hold",
          bytes, settings.max_prompt_bytes));
  }
  return conv;
}

}  // namespace osprey::harmony
