#include "server/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "harmony/chat_request.h"
#include "harmony/o200k.h"
#include "harmony/renderer.h"
#include "server/chat_output.h"
#include "server/request_json.h"
#include "server/tool_choice.h"

namespace osprey::server {

namespace {

// An OpenAI-style error, raised anywhere in a handler and turned into the response.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int s, std::string msg, std::string t = "invalid_request_error", std::string p = "", std::string c = "")
      : std::runtime_error(std::move(msg)), status(s), type(std::move(t)), param(std::move(p)), code(std::move(c)) {}
};

json error_body(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
                     {"code", code.empty() ? json() : json(code)}}}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The top-level request field an error message of the request mapping names ("tools[0]..." -> tools).
std::string field_of(const std::string& message, const std::string& fallback) {
  const size_t end = message.find_first_of("[. '");
  const std::string head = message.substr(0, end);
  for (const char* f : {"messages", "tools", "tool_choice", "reasoning_effort", "reasoning"})
    if (head == f) return head;
  return fallback;
}

// Bytes of prompt text a context of `ctx` tokens can hold at most (o200k's longest token is 128 bytes).
constexpr size_t kMaxBytesPerToken = 128;
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }
const std::string kSseDone = "data: [DONE]\n\n";
const std::string kSseKeepAlive = ": \n\n";  // an SSE comment: clients skip it

// The fields that every response object and stream event of one request share.
struct Envelope {
  std::string id, model;
  int64_t created;
  json make(const char* object, json choices) const {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
  }
};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Field readers that name the field in their errors.
template <typename T>
T get_field(const json& body, const char* key, T fallback);

template <>
double get_field(const json& b, const char* key, double fallback) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), "invalid_request_error", key);
  return it->get<double>();
}
template <>
int64_t get_field(const json& b, const char* key, int64_t fallback) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw ApiError(400, fmt::format("'{}' must be an integer", key), "invalid_request_error", key);
  return it->get<int64_t>();
}
template <>
bool get_field(const json& b, const char* key, bool fallback) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw ApiError(400, fmt::format("'{}' must be a boolean", key), "invalid_request_error", key);
  return it->get<bool>();
}

bool wants_usage(const json& b) {
  auto so = b.find("stream_options");
  return so != b.end() && so->is_object() && get_field<bool>(*so, "include_usage", false);
}

std::vector<std::string> stop_strings(const json& b) {
  auto it = b.find("stop");
  if (it == b.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  if (it->is_array() && it->size() <= 4) {
    std::vector<std::string> v;
    for (auto& s : *it) {
      if (!s.is_string()) throw ApiError(400, "'stop' entries must be strings", "invalid_request_error", "stop");
      v.push_back(s.get<std::string>());
    }
    return v;
  }
  throw ApiError(400, "'stop' must be a string or an array of at most 4 strings", "invalid_request_error", "stop");
}

}  // namespace

struct OpenAiServer::Impl {
  Engine& engine;
  const harmony::Tokenizer& tok;
  ServerConfig cfg;
  httplib::Server http;

  Impl(Engine& e, const harmony::Tokenizer& t, ServerConfig c) : engine(e), tok(t), cfg(std::move(c)) {}

  // ------------------------------------------------------------------ admission
  // Every generation request holds a ticket from its handler's first line to its last byte
  // (streams: until the stream ends). At most max_batch + max_queue are held at once; one more
  // gets a 429 with Retry-After at once. Connections accepted but waiting for an HTTP thread are
  // counted too, so /metrics sees every request the server holds.
  // A request with n choices holds n.
  std::atomic<int> admitted{0}, connections_waiting{0};
  struct Ticket {
    Impl& srv;
    int count = 0;
    void add(int k) {
      const int limit = srv.engine.config().max_batch + srv.engine.config().max_queue;
      if ((srv.admitted += k) > limit) {
        srv.admitted -= k;
        throw ApiError(429, fmt::format("The server is at capacity ({} sequences running or waiting); retry shortly", limit),
                       "rate_limit_error", "", "queue_full");
      }
      count += k;
    }
    ~Ticket() { srv.admitted -= count; }
  };
  std::shared_ptr<Ticket> admit() {
    auto t = std::make_shared<Ticket>(Ticket{*this});
    t->add(1);
    return t;
  }
  // ------------------------------------------------------------------ clients that leave
  std::atomic<uint64_t> client_disconnects{0};
  // A write to the client failed: it went away. Cancels the generation (the engine frees its KV
  // at its next step); returns false to end the response.
  bool client_left(RequestHandle& handle) {
    ++client_disconnects;
    handle.cancel();
    return false;
  }

  // A non-streaming answer: one JSON object when generation ends (all n choices). The first event
  // is awaited here, so a failure before any token is still a 500. After it the body goes out
  // chunked, one space per token event ahead of the object (JSON allows leading whitespace): a
  // client that went away fails a write within a step or two and its generation is cancelled, not
  // run to max_tokens.
  using Handles = std::vector<std::shared_ptr<RequestHandle>>;
  static void cancel_all(const Handles& hs) {
    for (auto& h : hs) h->cancel();
  }
  void answer_when_done(httplib::Response& res, Handles handles, std::shared_ptr<Ticket> ticket,
                        std::function<void(size_t, const TokenEvent&)> on_event, std::function<json()> body) {
    TokenEvent first;
    const bool more = handles[0]->next(first);
    if (more && first.finish == FinishReason::Error) {
      cancel_all(handles);
      throw ApiError(500, "generation failed: " + first.error, "server_error");
    }
    if (more) on_event(0, first);
    res.set_chunked_content_provider(
        "application/json",
        [=, this](size_t, httplib::DataSink& sink) {
          TokenEvent ev;
          std::string error;
          for (size_t i = 0; i < handles.size(); ++i)
            while (handles[i]->next(ev)) {
              if (ev.finish == FinishReason::Error) error = ev.error;
              else on_event(i, ev);
              if (!sink.write(" ", 1)) {
                cancel_all(handles);
                return client_left(*handles[i]);
              }
            }
          const std::string out =
              dump(error.empty() ? body() : error_body("generation failed: " + error, "server_error", "", ""));
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        },
        [handles, ticket](bool) { cancel_all(handles); });
  }

  // n copies of one generation request (choice i samples with seed + i), submitted together; the
  // ticket grows to hold them. Either all are running or none is.
  Handles submit_choices(GenerationRequest g, int n, Ticket& ticket,
                         const std::function<std::shared_ptr<TokenConstraint>()>& constraint) {
    ticket.add(n - 1);
    Handles hs;
    try {
      for (int i = 0; i < n; ++i) {
        GenerationRequest gi = g;
        gi.sampling.seed = g.sampling.seed + uint64_t(i);
        gi.constraint = constraint ? constraint() : nullptr;
        hs.push_back(submit(std::move(gi)));
      }
    } catch (...) {
      cancel_all(hs);
      throw;
    }
    return hs;
  }

  // cpp-httplib's pool, counting the connections that wait for one of its threads.
  class CountingPool : public httplib::TaskQueue {
   public:
    CountingPool(size_t threads, std::atomic<int>& waiting) : pool_(threads), waiting_(waiting) {}
    void enqueue(std::function<void()> fn) override {
      ++waiting_;
      pool_.enqueue([this, fn = std::move(fn)] {
        --waiting_;
        fn();
      });
    }
    void shutdown() override { pool_.shutdown(); }

   private:
    httplib::ThreadPool pool_;
    std::atomic<int>& waiting_;
  };

  // ------------------------------------------------------------------ shared request pieces
  json parse_body(const httplib::Request& req) {
    json b;
    try {
      b = parse_request_json(req.body);
    } catch (const RequestTooDeep& e) {
      throw ApiError(400, e.what(), "invalid_request_error", e.field);
    }
    if (b.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
    if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
    auto m = b.find("model");
    if (m == b.end() || !m->is_string()) throw ApiError(400, "'model' is required", "invalid_request_error", "model");
    if (m->get<std::string>() != cfg.model_id)
      throw ApiError(404, fmt::format("The model '{}' does not exist; this server serves '{}'", m->get<std::string>(), cfg.model_id),
                     "invalid_request_error", "model", "model_not_found");
    const int64_t n = get_field<int64_t>(b, "n", 1);
    if (n < 1 || n > engine.config().max_batch)
      throw ApiError(400, fmt::format("'n' must be between 1 and {} (the batch)", engine.config().max_batch),
                     "invalid_request_error", "n");
    if (n > 1 && get_field<bool>(b, "stream", false))
      throw ApiError(400, "'n' > 1 is not supported with stream yet", "invalid_request_error", "n");
    refuse_unhonoured(b);
    return b;
  }

  // Fields osprey does not honour yet are refused with a 400 naming them, never ignored. Their
  // neutral values (logprobs false, penalties 0, an empty logit_bias, response_format text) pass.
  static void refuse_unhonoured(const json& b) {
    auto given = [&](const char* key) -> const json* {
      auto it = b.find(key);
      return it == b.end() || it->is_null() ? nullptr : &*it;
    };
    auto refuse = [](const char* key, const std::string& why) {
      throw ApiError(400, fmt::format("'{}' is not supported yet: {}", key, why), "invalid_request_error", key);
    };
    if (const json* v = given("logprobs"); v && !(*v == false || *v == 0)) refuse("logprobs", "log probabilities are not returned");
    if (const json* v = given("top_logprobs"); v && *v != 0) refuse("top_logprobs", "log probabilities are not returned");
    if (const json* v = given("response_format"); v && !(v->is_object() && v->value("type", json()) == "text"))
      refuse("response_format", "structured outputs (json_object, json_schema) are not constrained yet; omit it or use {\"type\": \"text\"}");
    for (const char* key : {"presence_penalty", "frequency_penalty"})
      if (const json* v = given(key); v && !(v->is_number() && v->get<double>() == 0.0)) refuse(key, "only 0 is supported");
    if (const json* v = given("logit_bias"); v && !(v->is_object() && v->empty())) refuse("logit_bias", "only an empty map is supported");
    if (const json* v = given("echo"); v && *v != false) refuse("echo", "the prompt is not echoed");
    if (const json* v = given("best_of"); v && *v != 1) refuse("best_of", "only 1 is supported");
    if (const json* v = given("suffix"); v && !(v->is_string() && v->get_ref<const std::string&>().empty()))
      refuse("suffix", "insertion is not supported");
  }

  GenerationRequest generation(const json& b, std::vector<int32_t> prompt, bool chat) {
    GenerationRequest g;
    const int ctx = engine.config().max_seq_len;
    if (int(prompt.size()) >= ctx)
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens; the prompt has {}", ctx, prompt.size()),
                     "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded");
    const int64_t room = ctx - int64_t(prompt.size());
    const char* key = b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null() ? "max_completion_tokens" : "max_tokens";
    const int64_t max_tokens = get_field<int64_t>(b, key, room);
    if (max_tokens < 1) throw ApiError(400, fmt::format("'{}' must be at least 1", key), "invalid_request_error", key);
    if (max_tokens > room)
      throw ApiError(400,
                     fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                 "({} in the {}, {} in the completion).",
                                 ctx, int64_t(prompt.size()) + max_tokens, prompt.size(), chat ? "messages" : "prompt", max_tokens),
                     "invalid_request_error", key, "context_length_exceeded");
    g.max_tokens = int(max_tokens);
    g.sampling.temperature = float(get_field<double>(b, "temperature", 1.0));
    g.sampling.top_p = float(get_field<double>(b, "top_p", 1.0));
    g.sampling.top_k = int(get_field<int64_t>(b, "top_k", 0));
    g.sampling.seed = uint64_t(get_field<int64_t>(b, "seed", int64_t(std::random_device{}())));
    if (g.sampling.temperature < 0 || g.sampling.temperature > 2)
      throw ApiError(400, "'temperature' must be between 0 and 2", "invalid_request_error", "temperature");
    if (!(g.sampling.top_p > 0 && g.sampling.top_p <= 1))
      throw ApiError(400, "'top_p' must be in (0, 1]", "invalid_request_error", "top_p");
    if (g.sampling.top_k < 0) throw ApiError(400, "'top_k' must be >= 0", "invalid_request_error", "top_k");
    if (!get_field<bool>(b, "ignore_eos", false)) {
      // <|return|> and <|call|> end an answer; never <|end|>, which only ends a message.
      g.stop_tokens = {harmony::kReturn, harmony::kCall};
      if (!chat) g.stop_tokens.push_back(harmony::kEndOfText);
    }
    g.prompt = std::move(prompt);
    return g;
  }

  std::shared_ptr<RequestHandle> submit(GenerationRequest g) {
    try {
      return engine.submit(std::move(g));
    } catch (const QueueFull& e) {
      throw ApiError(429, "The server is at capacity; retry shortly", "rate_limit_error", "", "queue_full");
    } catch (const Error& e) {
      throw ApiError(400, e.what());
    }
  }

  static json usage(int prompt, int completion, int reasoning) {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
            {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
  }

  // ------------------------------------------------------------------ chat completions
  void chat(const httplib::Request& req, httplib::Response& res) {
    auto ticket = admit();
    json b = parse_body(req);
    std::vector<harmony::Message> conv;
    try {
      conv = harmony::conversation_from_chat_request(
          b, {.current_date = harmony::today_utc(), .max_prompt_bytes = size_t(engine.config().max_seq_len) * kMaxBytesPerToken});
    } catch (const harmony::PromptTooLong& e) {
      throw ApiError(400, e.what(), "invalid_request_error", "messages", "context_length_exceeded");
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", field_of(e.what(), "messages"));
    }
    std::set<std::string> declared;
    for (auto& m : conv)
      if (auto* d = std::get_if<harmony::DeveloperContent>(&m.content))
        if (auto it = d->tools.find("functions"); it != d->tools.end())
          for (auto& t : it->second.tools) declared.insert(t.name);
    if (auto tc = b.find("tool_choice"); tc != b.end() && tc->is_object()) {
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !declared.count((*fn)["name"].get<std::string>()))
        throw ApiError(400, "tool_choice names a function that is not in 'tools'", "invalid_request_error", "tool_choice");
    }
    std::vector<int32_t> prompt = harmony::Renderer(tok).render_for_completion(conv, {.auto_drop_analysis = false});
    // tool_choice "required" or a named function is enforced while decoding, not only asked for.
    // One constraint per choice: it follows its own sequence's tokens.
    std::function<std::shared_ptr<TokenConstraint>()> constraint;
    if (auto tc = b.find("tool_choice"); tc != b.end() && !declared.empty()) {
      std::vector<std::string> names;
      if (tc->is_object()) names = {(*tc)["function"]["name"].get<std::string>()};
      else if (*tc == "required") names.assign(declared.begin(), declared.end());
      if (!names.empty()) constraint = [this, names] { return std::make_shared<ToolChoiceConstraint>(tok, names); };
    }
    if (auto tc = b.find("tool_choice"); tc != b.end() && *tc == "required" && declared.empty())
      throw ApiError(400, "tool_choice 'required' needs at least one tool", "invalid_request_error", "tool_choice");
    const bool stream = get_field<bool>(b, "stream", false), include_usage = wants_usage(b);
    GenerationRequest g = generation(b, std::move(prompt), /*chat=*/true);
    const int prompt_len = int(g.prompt.size()), n = int(get_field<int64_t>(b, "n", 1));
    const std::vector<std::string> stops = stop_strings(b);
    std::vector<std::shared_ptr<ChatOutputBuilder>> builders;
    for (int i = 0; i < n; ++i) builders.push_back(std::make_shared<ChatOutputBuilder>(tok, declared, stops));
    const Handles handles = submit_choices(std::move(g), n, *ticket, constraint);
    const Envelope env{new_id("chatcmpl-"), cfg.model_id, unix_now()};

    if (!stream) {
      struct Tally {
        int completion = 0;
        std::string reason = "stop";
      };
      auto tallies = std::make_shared<std::vector<Tally>>(n);
      answer_when_done(
          res, handles, ticket,
          [=](size_t i, const TokenEvent& ev) {
            Tally& t = (*tallies)[i];
            if (ev.token >= 0) {
              ++t.completion;
              builders[i]->push(ev.token);
              if (builders[i]->stopped()) handles[i]->cancel();
            }
            if (ev.finish != FinishReason::None) t.reason = finish_reason_name(ev.finish);
          },
          [=] {
            json choices = json::array();
            int completion = 0, reasoning = 0;
            for (int i = 0; i < n; ++i) {
              builders[i]->finish();
              choices.push_back({{"index", i}, {"message", builders[i]->message()}, {"logprobs", nullptr},
                                 {"finish_reason", builders[i]->finish_reason((*tallies)[i].reason)}});
              completion += (*tallies)[i].completion, reasoning += builders[i]->reasoning_tokens();
            }
            json out = env.make("chat.completion", choices);
            out["usage"] = usage(prompt_len, completion, reasoning);
            return out;
          });
      return;
    }
    const auto builder = builders[0];
    const auto handle = handles[0];
    struct State {
      bool sent_role = false;
      int completion = 0;
    };
    auto st = std::make_shared<State>();
    auto chunk = [env](const json& delta, const json& finish) {
      return sse(env.make("chat.completion.chunk",
                          json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}}})));
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!st->sent_role) {
            st->sent_role = true;
            if (!send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return client_left(*handle);
          }
          TokenEvent ev;
          if (!handle->next(ev)) return false;
          if (ev.token >= 0) {
            ++st->completion;
            const std::vector<json> deltas = builder->push(ev.token);
            for (auto& d : deltas)
              if (!send(chunk(d, nullptr))) return client_left(*handle);
            // A token that gives no delta yet (a tool call's name, held-back text) still probes the
            // connection with an SSE comment, so a client that left is noticed now.
            if (deltas.empty() && !send(kSseKeepAlive)) return client_left(*handle);
            if (builder->stopped()) handle->cancel();
          }
          if (ev.finish != FinishReason::None) {
            for (auto& d : builder->finish())
              if (!send(chunk(d, nullptr))) return false;
            if (ev.finish == FinishReason::Error) {
              send(sse(error_body("generation failed: " + ev.error, "server_error", "", "")));
            } else {
              send(chunk(json::object(), builder->finish_reason(finish_reason_name(ev.finish))));
              if (include_usage) {
                json u = env.make("chat.completion.chunk", json::array());
                u["usage"] = usage(prompt_len, st->completion, builder->reasoning_tokens());
                send(sse(u));
              }
            }
            send(kSseDone);
            sink.done();
          }
          return true;
        },
        [handle, ticket](bool) { handle->cancel(); });  // a finished request ignores it; a dropped client frees its blocks
  }

  // ------------------------------------------------------------------ completions
  void completions(const httplib::Request& req, httplib::Response& res) {
    auto ticket = admit();
    json b = parse_body(req);
    auto p = b.find("prompt");
    if (p == b.end()) throw ApiError(400, "'prompt' is required", "invalid_request_error", "prompt");
    std::vector<int32_t> prompt;
    if (p->is_string()) {
      const size_t limit = size_t(engine.config().max_seq_len) * kMaxBytesPerToken;
      if (p->get_ref<const std::string&>().size() > limit)
        throw ApiError(400, fmt::format("the prompt is {} bytes, more than the {} the context can hold",
                                        p->get_ref<const std::string&>().size(), limit),
                       "invalid_request_error", "prompt", "context_length_exceeded");
      prompt = tok.encode_with_specials(p->get<std::string>());  // a raw prompt: specials are allowed here
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
      for (auto& t : *p) {
        if (!t.is_number_integer()) throw ApiError(400, "'prompt' token arrays hold integers", "invalid_request_error", "prompt");
        int64_t v = t.get<int64_t>();
        if (v < 0 || v >= engine.model_config().vocab)
          throw ApiError(400, fmt::format("prompt token {} is outside the vocabulary", v), "invalid_request_error", "prompt");
        prompt.push_back(int32_t(v));
      }
    } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      prompt = tok.encode_with_specials((*p)[0].get<std::string>());
    } else {
      throw ApiError(400, "'prompt' must be a string, one string in an array, or an array of token ids",
                     "invalid_request_error", "prompt");
    }
    if (prompt.empty()) throw ApiError(400, "'prompt' is empty", "invalid_request_error", "prompt");
    const bool stream = get_field<bool>(b, "stream", false), include_usage = wants_usage(b);
    GenerationRequest g = generation(b, std::move(prompt), /*chat=*/false);
    const int prompt_len = int(g.prompt.size()), n = int(get_field<int64_t>(b, "n", 1));
    const std::vector<std::string> stops = stop_strings(b);  // checked before anything runs
    const Handles handles = submit_choices(std::move(g), n, *ticket, nullptr);
    const Envelope env{new_id("cmpl-"), cfg.model_id, unix_now()};
    auto choice = [](int index, const std::string& text, const json& finish) {
      return json{{"index", index}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
    };
    // Per choice: its text as it decodes, cut at the stop strings.
    struct Text {
      harmony::Utf8StreamDecoder utf8;
      StopStringFilter stops;
      std::string text, reason = "stop";
      int completion = 0;
      // The text an event adds (at the end, the held-back tail too).
      std::string push(const harmony::Tokenizer& tok, const TokenEvent& ev) {
        std::string t;
        if (ev.token >= 0 && !stops.stopped()) {
          ++completion;
          t = stops.push(utf8.push(tok.token_bytes(ev.token)));
        }
        if (ev.finish != FinishReason::None) {
          t += stops.push(utf8.flush());
          t += stops.flush();
          reason = stops.stopped() ? "stop" : finish_reason_name(ev.finish);
        }
        text += t;
        return t;
      }
    };
    auto texts = std::make_shared<std::vector<Text>>();
    for (int i = 0; i < n; ++i) texts->push_back(Text{{}, StopStringFilter(stops), {}, "stop", 0});
    if (!stream) {
      answer_when_done(
          res, handles, ticket,
          [=, this](size_t i, const TokenEvent& ev) {
            (*texts)[i].push(tok, ev);
            if ((*texts)[i].stops.stopped()) handles[i]->cancel();
          },
          [=] {
            json choices = json::array();
            int completion = 0;
            for (int i = 0; i < n; ++i) {
              choices.push_back(choice(i, (*texts)[i].text, (*texts)[i].reason));
              completion += (*texts)[i].completion;
            }
            json out = env.make("text_completion", choices);
            out["usage"] = usage(prompt_len, completion, 0);
            return out;
          });
      return;
    }
    const auto handle = handles[0];
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          Text& t = (*texts)[0];
          TokenEvent ev;
          if (!handle->next(ev)) return false;
          const bool last = ev.finish != FinishReason::None;
          const std::string piece = t.push(tok, ev);
          if (!send(sse(env.make("text_completion", json::array({choice(0, piece, last ? json(t.reason) : json())})))))
            return client_left(*handle);
          if (t.stops.stopped()) handle->cancel();
          if (last) {
            if (include_usage) {
              json u = env.make("text_completion", json::array());
              u["usage"] = usage(prompt_len, t.completion, 0);
              send(sse(u));
            }
            send(kSseDone);
            sink.done();
          }
          return true;
        },
        [handle, ticket](bool) { handle->cancel(); });
  }

  // ------------------------------------------------------------------ metrics
  std::string metrics_text() {
    EngineMetrics m = engine.metrics();
    std::string s;
    auto counter = [&](const char* name, const char* help, double v) {
      s += fmt::format("# HELP osprey_{0} {1}\n# TYPE osprey_{0} counter\nosprey_{0} {2}\n", name, help, v);
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      s += fmt::format("# HELP osprey_{0} {1}\n# TYPE osprey_{0} gauge\nosprey_{0} {2}\n", name, help, v);
    };
    auto hist = [&](const char* name, const char* help, const Histogram& h) {
      s += fmt::format("# HELP osprey_{0} {1}\n# TYPE osprey_{0} histogram\n", name, help);
      uint64_t cum = 0;
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        cum += h.counts[i];
        s += fmt::format("osprey_{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
      }
      s += fmt::format("osprey_{0}_bucket{{le=\"+Inf\"}} {1}\nosprey_{0}_sum {2}\nosprey_{0}_count {1}\n", name, h.count, h.sum);
    };
    counter("requests_total", "Requests accepted.", double(m.requests_total));
    counter("requests_finished_total", "Requests finished (any reason).", double(m.requests_finished));
    counter("requests_cancelled_total", "Requests cancelled (client gone or stop string).", double(m.requests_cancelled));
    counter("requests_rejected_total", "Requests refused because the queue was full.", double(m.requests_rejected));
    counter("prompt_tokens_total", "Prompt tokens of accepted requests.", double(m.prompt_tokens));
    counter("generation_tokens_total", "Tokens generated.", double(m.generated_tokens));
    counter("preemptions_total", "Sequences preempted for KV blocks.", double(m.preemptions));
    gauge("queue_depth", "Requests waiting to start.", m.queue_depth);
    gauge("http_requests_admitted", "Generation requests the server holds: running, queued, or being read or written.",
          admitted.load());
    gauge("http_connections_waiting", "Connections accepted and waiting for an HTTP thread.", connections_waiting.load());
    counter("client_disconnects_total", "Requests cancelled because their client went away (stop strings not counted).",
            double(client_disconnects.load()));
    gauge("running_batch_size", "Sequences in the running batch.", m.running);
    gauge("kv_cache_blocks_used", "KV-cache blocks in use.", m.kv_blocks_used);
    gauge("kv_cache_blocks_free", "KV-cache blocks free.", m.kv_blocks_free);
    hist("time_to_first_token_seconds", "Time to first token.", m.ttft);
    hist("inter_token_latency_seconds", "Time between consecutive tokens of a request.", m.itl);
    return s;
  }

  // ------------------------------------------------------------------ wiring
  template <typename F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        (this->*f)(req, res);
      } catch (const ApiError& e) {
        res.status = e.status;
        if (e.status == 429) res.set_header("Retry-After", "1");
        res.set_content(dump(error_body(e.what(), e.type, e.param, e.code)), "application/json");
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(dump(error_body(std::string("internal error: ") + e.what(), "server_error", "", "")), "application/json");
      }
    };
  }

  void routes() {
    const int threads = cfg.http_threads > 0 ? cfg.http_threads
                                             : engine.config().max_batch + engine.config().max_queue + 64;
    http.new_task_queue = [this, threads] { return new CountingPool(size_t(threads), connections_waiting); };
    // SO_REUSEADDR alone (cpp-httplib's default adds SO_REUSEPORT, which lets a second server bind
    // the same port and take half the traffic): a port in use fails to bind.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    http.set_payload_max_length(cfg.max_body_bytes);
    http.set_read_timeout(cfg.read_timeout_s, 0);
    http.set_keep_alive_timeout(cfg.read_timeout_s);
    http.set_write_timeout(30, 0);
    // A declared body over the limit is refused before any of it is read (cpp-httplib itself would
    // read and discard it first).
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const std::string len = req.get_header_value("Content-Length");
      if (!len.empty() && (len.size() > 18 || std::stoull(len) > cfg.max_body_bytes)) {
        res.status = 413;
        res.set_header("Connection", "close");
        res.set_content(dump(error_body(fmt::format("the request body is {} bytes; the limit is {}", len, cfg.max_body_bytes),
                                        "invalid_request_error", "", "")),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\":\"ok\"}", "application/json"); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json m = {{"object", "list"},
                {"data", json::array({{{"id", cfg.model_id}, {"object", "model"}, {"created", unix_now()},
                                       {"owned_by", "osprey"}, {"max_model_len", engine.config().max_seq_len}}})}};
      res.set_content(dump(m), "application/json");
    });
    http.Post("/v1/chat/completions", guarded(&Impl::chat));
    http.Post("/v1/completions", guarded(&Impl::completions));
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    // Errors that httplib raises itself (unknown route 404, oversized body 413, ...) get an
    // OpenAI-style body too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = res.status == 404   ? fmt::format("no route for {} {}", req.method, req.path)
                        : res.status == 413 ? std::string("the request body is too large")
                                            : fmt::format("HTTP error {}", res.status);
      res.set_content(dump(error_body(msg, "invalid_request_error", "", "")), "application/json");
    });
  }
};

OpenAiServer::OpenAiServer(Engine& engine, const harmony::Tokenizer& tok, ServerConfig cfg)
    : impl_(std::make_unique<Impl>(engine, tok, std::move(cfg))) {
  impl_->routes();
}

OpenAiServer::~OpenAiServer() { stop(); }

bool OpenAiServer::bind() {
  if (impl_->cfg.port == 0) {
    const int port = impl_->http.bind_to_any_port(impl_->cfg.host);
    if (port <= 0) return false;
    impl_->cfg.port = port;
    return true;
  }
  return impl_->http.bind_to_port(impl_->cfg.host, impl_->cfg.port);
}

bool OpenAiServer::listen() { return impl_->http.listen_after_bind(); }

void OpenAiServer::stop() { impl_->http.stop(); }

int OpenAiServer::bound_port() const { return impl_->cfg.port; }

}  // namespace osprey::server
