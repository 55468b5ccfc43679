// Structure-aware fuzzing of the chat-completions request path (run under ASan/UBSan in CI): random
// JSON trees shaped like requests (messages of every role, content parts, tool calls with string or
// object arguments, tools with random JSON schemas, tool_choice, reasoning settings), mutated
// (wrong types, missing or extra fields, deep nesting, control-token text, odd UTF-8), serialized
// and sent through what `osprey serve` does with a body: the bounded parse, the request mapping
// with its prompt-size bound, for every 8th request the mapping accepts the Harmony renderer and the
// tokenizer, and for every 64th the structured-output spec (response_format, strict and forced tool
// calls: the server built it after the mapping, and once crashed there on a tool the mapping had
// skipped). Nothing may crash or throw anything but the documented errors.
// Usage: osprey_fuzz_chat_request [requests] [seed]
#include <cstdio>
#include <random>
#include <string>

#include "core/error.h"
#include "harmony/chat_request.h"
#include "harmony/o200k.h"
#include "harmony/renderer.h"
#include "server/request_json.h"
#include "server/structured_output.h"

using json = nlohmann::ordered_json;
using namespace osprey;

namespace {

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint64_t pick(uint64_t n) { return rng() % n; }
  bool chance(int percent) { return int(pick(100)) < percent; }

  std::string text() {
    static const char* pieces[] = {"hello", " world", "<|end|>", "<|start|>", "<|call|>", "functions.", "\xE6\x97\xA5",
                                   "\xF0\x9F\x92\x96", "\xC3", "\xFF\xFE", "\n", "\"", "\\", "{", "}", " to=", "analysis",
                                   "final", "{\"a\": 1}", "\x01", ""};
    std::string s;
    for (size_t n = pick(6); n-- > 0;) s += pieces[pick(std::size(pieces))];
    return s;
  }
  std::string name() {
    static const char* names[] = {"get_weather", "f", "lookup-2", "get weather", "", "x<|call|>", "functions.f",
                                  "a_very_long_name_that_goes_on_and_on_and_on_past_the_limit_of_sixty_four_chars"};
    return names[pick(std::size(names))];
  }
  json scalar() {
    switch (pick(6)) {
      case 0: return nullptr;
      case 1: return chance(50);
      case 2: return int64_t(rng()) >> pick(63);
      case 3: return double(int64_t(rng() % 2000) - 1000) / 7.0;
      default: return text();
    }
  }
  json any(int depth) {  // arbitrary JSON, sometimes deep
    if (depth <= 0 || chance(40)) return scalar();
    if (chance(50)) {
      json a = json::array();
      for (size_t n = pick(4); n-- > 0;) a.push_back(any(depth - 1));
      return a;
    }
    json o = json::object();
    for (size_t n = pick(4); n-- > 0;) o[text()] = any(depth - 1);
    return o;
  }
  json schema(int depth) {
    static const char* types[] = {"object", "array", "string", "number", "integer", "boolean", "null", "strng"};
    json s = json::object();
    if (chance(90)) s["type"] = chance(10) ? json::array({types[pick(8)], "null"}) : json(types[pick(8)]);
    if (chance(30)) s["description"] = text();
    if (depth > 0 && chance(50)) {
      json p = json::object();
      for (size_t n = pick(4); n-- > 0;) p[chance(80) ? "p" + std::to_string(pick(5)) : text()] = schema(depth - 1);
      s["properties"] = chance(95) ? p : json(text());
      if (chance(50)) {
        json r = json::array();
        for (auto it = p.begin(); it != p.end(); ++it)
          if (chance(70)) r.push_back(it.key());
        if (chance(10)) r.push_back("undeclared");
        s["required"] = chance(95) ? r : json(text());
      }
    }
    if (depth > 0 && chance(20)) s["items"] = schema(depth - 1);
    if (depth > 0 && chance(10)) s["oneOf"] = json::array({schema(depth - 1), schema(depth - 1)});
    if (chance(10)) s["enum"] = chance(80) ? json::array({text(), text()}) : json(text());
    if (chance(10)) s["default"] = scalar();
    return s;
  }
  json tool() {
    json f = {{"name", name()}};
    if (chance(70)) f["description"] = text();
    if (chance(80)) f["parameters"] = chance(90) ? schema(int(pick(5))) : any(3);
    json t = {{"type", chance(95) ? "function" : "browser"}, {"function", chance(97) ? f : any(2)}};
    return t;
  }
  json content() {
    if (chance(70)) return text();
    if (chance(50)) return nullptr;
    json parts = json::array();
    for (size_t n = pick(3); n-- > 0;)
      parts.push_back(chance(85) ? json{{"type", "text"}, {"text", text()}} : any(2));
    return parts;
  }
  json message() {
    static const char* roles[] = {"system", "developer", "user", "assistant", "tool", "robot"};
    json m = {{"role", roles[pick(std::size(roles))]}};
    if (chance(90)) m["content"] = content();
    if (m["role"] == "assistant") {
      if (chance(40)) m[chance(50) ? "reasoning_content" : "reasoning"] = chance(90) ? json(text()) : any(1);
      if (chance(40)) {
        json calls = json::array();
        for (size_t n = 1 + pick(2); n-- > 0;) {
          json args = chance(60) ? json("{\"city\": \"" + text() + "\"}") : any(int(pick(6)));
          calls.push_back({{"id", "c" + std::to_string(pick(3))}, {"type", "function"},
                           {"function", chance(95) ? json{{"name", name()}, {"arguments", args}} : any(2)}});
        }
        m["tool_calls"] = calls;
      }
    }
    if (m["role"] == "tool") {
      if (chance(70)) m["tool_call_id"] = "c" + std::to_string(pick(4));
      if (chance(20)) m["name"] = name();
    }
    return m;
  }
  json request() {
    json r = {{"model", "m"}};
    json msgs = json::array();
    for (size_t n = pick(6); n-- > 0;) msgs.push_back(message());
    r["messages"] = chance(97) ? msgs : any(2);
    if (chance(40)) {
      json tools = json::array();
      for (size_t n = 1 + pick(3); n-- > 0;) tools.push_back(tool());
      r["tools"] = chance(95) ? tools : any(2);
    }
    if (chance(30)) {
      static const char* choices[] = {"auto", "none", "required", "sometimes"};
      r["tool_choice"] = chance(70) ? json(choices[pick(4)])
                                    : json{{"type", "function"}, {"function", {{"name", chance(70) ? json(name()) : scalar()}}}};
    }
    if (chance(30)) r["reasoning_effort"] = chance(80) ? json(std::vector<std::string>{"low", "medium", "high", "max"}[pick(4)]) : scalar();
    if (chance(10)) r["reasoning"] = any(2);
    if (chance(15)) {
      static const char* types[] = {"json_schema", "json_object", "text", "xml"};
      json js = {{"name", chance(90) ? json(name()) : scalar()}, {"schema", chance(90) ? schema(int(pick(4))) : any(2)}};
      if (chance(30)) js["strict"] = chance(80) ? json(chance(50)) : scalar();
      if (chance(20)) js["description"] = chance(80) ? json(text()) : scalar();
      json rf = {{"type", types[pick(4)]}};
      if (rf["type"] == "json_schema" || chance(5)) rf["json_schema"] = chance(95) ? js : any(2);
      r["response_format"] = chance(95) ? rf : any(2);
    }
    return r;
  }
};

// Text that nests `levels` deep through `key` objects (or arrays), far past what Gen builds.
std::string deep(Gen& g, size_t levels) {
  const bool array = g.chance(50);
  std::string s = R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":)";
  for (size_t i = 0; i < levels; ++i) s += array ? "[" : R"({"type":"object","properties":{"x":)";
  s += "1";
  for (size_t i = 0; i < levels; ++i) s += array ? "]" : "}}";
  return s + "}}]}";
}

}  // namespace

int main(int argc, char** argv) {
  const long requests = argc > 1 ? std::atol(argv[1]) : 1000000;
  Gen g(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2026);
  const harmony::Tokenizer& tok = harmony::Tokenizer::embedded_o200k_harmony();
  const harmony::Renderer renderer(tok);
  server::GrammarRegistry grammars(tok);
  long parsed = 0, mapped = 0, rendered = 0, too_deep = 0, specs = 0;
  for (long i = 0; i < requests; ++i) {
    std::string body;
    if (i % 997 == 0) {
      body = deep(g, 10 + g.pick(20000));
    } else {
      body = g.request().dump(-1, ' ', false, json::error_handler_t::replace);
      if (g.chance(5) && !body.empty()) body.erase(g.pick(body.size()), 1 + g.pick(8));  // broken JSON
      if (g.chance(3) && !body.empty()) body.insert(g.pick(body.size()), 1, char(0x80 + g.pick(0x80)));  // raw bytes
    }
    json b;
    try {
      b = server::parse_request_json(body);
    } catch (const server::RequestTooDeep&) {
      ++too_deep;
      continue;
    }
    if (b.is_discarded()) continue;
    ++parsed;
    try {
      auto conv = harmony::conversation_from_chat_request(b, {.current_date = "2026-12-01", .max_prompt_bytes = 4096 * 128});
      ++mapped;
      if (mapped % 8 == 0) {
        std::vector<int32_t> ids = renderer.render_for_completion(conv, {.auto_drop_analysis = false});
        if (ids.empty() || ids.back() != 173781) {
          std::fprintf(stderr, "request %ld: the prompt does not end in <|start|>assistant\n%s\n", i, body.c_str());
          return 1;
        }
        ++rendered;
      }
      if (mapped % 64 == 0) {
        std::set<std::string> declared;  // the functions the prompt declares, as the server finds them
        for (const harmony::Message& m : conv)
          if (auto* d = std::get_if<harmony::DeveloperContent>(&m.content))
            if (auto it = d->tools.find("functions"); it != d->tools.end())
              for (const auto& t : it->second.tools) declared.insert(t.name);
        server::structured_spec(b, declared, grammars, {}, 512);
        ++specs;
      }
    } catch (const Error&) {
      // a refused request: fine
    }
  }
  std::printf("fuzz_chat_request: %ld requests, %ld parsed, %ld too deep, %ld mapped, %ld rendered, %ld specs built\n",
              requests, parsed, too_deep, mapped, rendered, specs);
  if (mapped == 0 || rendered == 0 || too_deep == 0 || specs == 0) {
    std::fprintf(stderr, "the generator reached too little of the request path\n");
    return 1;
  }
  return 0;
}
