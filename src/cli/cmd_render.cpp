#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "cli/tokenizer_arg.h"
#include "harmony/chat_request.h"
#include "harmony/parser.h"
#include "harmony/renderer.h"

namespace osprey::cli {

namespace {

// One rendered request: the prompt as `serve` renders it, and with `reply` the request's last
// message (the assistant's) after it as the model writes it; prompt_tokens counts the prompt.
nlohmann::ordered_json render_one(const harmony::Tokenizer& tok, const harmony::ordered_json& req,
                                  const std::string& date, bool reply, bool with_text) {
  if (!req.is_object()) fail("the request must be a JSON object");
  harmony::ChatRenderSettings settings{.current_date = date.empty() ? harmony::today_utc() : date};
  const harmony::Renderer renderer(tok);
  std::vector<int32_t> ids;
  size_t prompt_tokens = 0;
  if (reply) {
    auto msgs = req.find("messages");
    if (msgs == req.end() || !msgs->is_array() || msgs->size() < 2)
      fail("--reply: 'messages' must hold the prompt and, last, the assistant's reply");
    harmony::ordered_json prompt_req = req;
    prompt_req["messages"].erase(prompt_req["messages"].size() - 1);
    auto prompt = harmony::conversation_from_chat_request(prompt_req, settings);
    settings.last_is_reply = true;
    auto full = harmony::conversation_from_chat_request(req, settings);
    ids = renderer.render_for_completion(prompt, {.auto_drop_analysis = false});
    prompt_tokens = ids.size();
    std::vector<int32_t> r = renderer.render_reply(full, prompt.size());
    ids.insert(ids.end(), r.begin(), r.end());
  } else {
    ids = renderer.render_for_completion(harmony::conversation_from_chat_request(req, settings),
                                         {.auto_drop_analysis = false});
    prompt_tokens = ids.size();
  }
  nlohmann::ordered_json out;
  if (with_text) out["text"] = tok.decode(ids);
  out["ids"] = ids;
  out["prompt_tokens"] = prompt_tokens;
  return out;
}

}  // namespace

void add_render(CLI::App& app) {
  struct Args {
    TokenizerArg tok;
    std::string request, requests, date;
    bool reply = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "render", "Render a chat-completions request as a Harmony prompt: {\"text\", \"ids\", \"prompt_tokens\"}");
  args->tok.add(cmd);
  auto* one = cmd->add_option("--request", args->request, "request body (JSON file)");
  auto* many = cmd->add_option("--requests", args->requests,
                               "JSON Lines, one {\"request\": BODY, \"date\": \"YYYY-MM-DD\"} per line (date optional): "
                               "one {\"ids\", \"prompt_tokens\"} line each on stdout");
  one->excludes(many);
  cmd->add_option("--date", args->date, "the system message's current date, YYYY-MM-DD (default: today, UTC)");
  cmd->add_flag("--reply", args->reply,
                "the last message is the assistant's reply (reasoning_content, then content or tool_calls): render it "
                "after the prompt as the model writes it, ending in <|return|> or <|call|> (training data)");
  cmd->callback([args] {
    if (args->request.empty() == args->requests.empty()) fail("render: give --request FILE or --requests FILE.jsonl");
    harmony::Tokenizer tok = args->tok.load();
    if (!args->request.empty()) {
      std::ifstream in(args->request);
      if (!in) fail("cannot open {}", args->request);
      harmony::ordered_json req = harmony::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (req.is_discarded()) fail("{}: not valid JSON", args->request);
      auto out = render_one(tok, req, args->date, args->reply, /*with_text=*/true);
      fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      return;
    }
    for_each_line(args->requests, [&](const std::string& line) {
      harmony::ordered_json j = harmony::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("request")) fail("expected a JSON object with a 'request'");
      std::string date = args->date;
      if (auto d = j.find("date"); d != j.end()) {
        if (!d->is_string()) fail("'date' must be a string");
        date = d->get<std::string>();
      }
      fmt::print("{}\n", render_one(tok, j["request"], date, args->reply, /*with_text=*/false).dump());
    });
  });
}

void add_parse(CLI::App& app) {
  struct Args {
    TokenizerArg tok;
    std::string ids, role;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("parse", "Parse Harmony token ids into messages (JSON array)");
  args->tok.add(cmd);
  cmd->add_option("--ids", args->ids, "comma-separated token ids")->required();
  cmd->add_option("--role", args->role, "the header of this role was already given (the prompt ended in <|start|>ROLE)");
  cmd->callback([args] {
    harmony::Tokenizer tok = args->tok.load();
    std::vector<int32_t> ids = parse_token_list(args->ids);
    std::vector<std::string> diags;
    auto msgs = harmony::parse_messages(tok, ids, args->role.empty() ? std::nullopt : std::optional(args->role), &diags);
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    auto opt = [](const std::optional<std::string>& s) { return s ? nlohmann::ordered_json(*s) : nlohmann::ordered_json(); };
    for (auto& m : msgs) {
      nlohmann::ordered_json j = {{"role", m.role}, {"channel", opt(m.channel)}, {"recipient", opt(m.recipient)},
                                  {"content_type", opt(m.content_type)}, {"content", m.content}};
      if (m.name) j["name"] = *m.name;
      out.push_back(j);
    }
    for (auto& d : diags) fmt::print(stderr, "osprey: parse: {}\n", d);
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
}

}  // namespace osprey::cli
