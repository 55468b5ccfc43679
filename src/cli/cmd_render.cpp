#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/tokenizer_arg.h"
#include "harmony/chat_request.h"
#include "harmony/parser.h"
#include "harmony/renderer.h"

namespace osprey::cli {

void add_render(CLI::App& app) {
  struct Args {
    TokenizerArg tok;
    std::string request, date;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("render", "Render a chat-completions request as a Harmony prompt: {\"text\", \"ids\"}");
  args->tok.add(cmd);
  cmd->add_option("--request", args->request, "request body (JSON file)")->required();
  cmd->add_option("--date", args->date, "the system message's current date, YYYY-MM-DD (default: today, UTC)");
  cmd->callback([args] {
    harmony::Tokenizer tok = args->tok.load();
    std::ifstream in(args->request);
    if (!in) fail("cannot open {}", args->request);
    harmony::ordered_json req = harmony::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (req.is_discarded()) fail("{}: not valid JSON", args->request);
    auto conv = harmony::conversation_from_chat_request(req, {.current_date = args->date.empty() ? harmony::today_utc() : args->date});
    std::vector<int32_t> ids = harmony::Renderer(tok).render_for_completion(conv, {.auto_drop_analysis = false});
    nlohmann::ordered_json out = {{"text", tok.decode(ids)}, {"ids", ids}};
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
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
