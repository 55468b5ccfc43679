#include "server/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "harmony/chat_request.h"
#include "harmony/o200k.h"
#include "harmony/renderer.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/metrics_text.h"
#include "server/request_fields.h"
#include "server/request_json.h"
#include "server/responses_api.h"
#include "server/structured_output.h"

namespace osprey::server {

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The top-level request field an error message of the request mapping names ("tools[0]..." -> tools).
std::string field_of(const std::string& message, const std::string& fallback) {
  const size_t end = message.find_first_of("[. '");
  const std::string head = message.substr(0, end);
  for (const char* f : {"messages", "tools", "tool_choice", "reasoning_effort", "reasoning", "response_format"})
    if (head == f) return head;
  return fallback;
}

// Bytes of prompt text a context of `ctx` tokens can hold at most (o200k's longest token is 128 bytes).
constexpr size_t kMaxBytesPerToken = 128;
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }
const std::string kSseDone = "data: [DONE]\n\n";
const std::string kSseKeepAlive = ": \n\n";  // an SSE comment: clients skip it
// While an answer waits for its next event (a long prompt's prefill), its client is probed this
// often: a write to a client that went away fails, and the generation is cancelled.
constexpr std::chrono::milliseconds kProbeEvery{250};

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

}  // namespace

struct OpenAiServer::Impl {
  Engine& engine;
  const harmony::Tokenizer& tok;
  ServerConfig cfg;
  httplib::Server http;

  GrammarRegistry grammars;
  StructuredSettings structured;

  Impl(Engine& e, const harmony::Tokenizer& t, ServerConfig c)
      : engine(e), tok(t), cfg(std::move(c)), grammars(t), structured{cfg.reasoning_budget} {}

  // ------------------------------------------------------------------ admission
  // Every generation request holds a ticket from its handler's first line to its last byte
  // (streams: until the stream ends). At most max_batch + max_queue are held at once; one more
  // gets a 429 with Retry-After at once. Connections accepted but waiting for an HTTP thread are
  // counted too, so /metrics sees every request the server holds.
  // A request with n choices holds n.
  std::atomic<int> admitted{0}, connections_waiting{0};
  // The listening socket (set_socket_options sees it before cpp-httplib binds it), whose accept
  // queue bind() widens.
  std::atomic<int> listen_fd{-1};
  struct Ticket {
    Impl& srv;
    int count = 0;
    void add(int k) {
      const int limit = srv.engine.config().max_batch + srv.engine.config().max_queue;
      // Taken only if it fits: a refused request never holds a ticket, not even for a moment (an
      // add-then-undo let a burst of refusals crowd out requests that fitted).
      int held = srv.admitted.load();
      do {
        if (held + k > limit)
          throw ApiError(429, fmt::format("The server is at capacity ({} sequences running or waiting); retry shortly", limit),
                         "rate_limit_error", "", "queue_full");
      } while (!srv.admitted.compare_exchange_weak(held, held + k));
      count += k;
    }
    ~Ticket() { srv.admitted -= count; }
  };
  // drain(): set (from a signal handler, so only a lock-free store) when the server is to stop once
  // the requests it holds are done; listen()'s watcher then stops it.
  std::atomic<bool> draining{false};
  // stop() (also from a signal handler), or the end of a drain: the responses in flight end at
  // their next event or probe (within kProbeEvery), and listen()'s watcher closes the listener.
  std::atomic<bool> stopping{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
  // Refused while draining. Checked again after the ticket is taken: a request that passes that
  // check was counted before the drain began, so the watcher waits for it.
  std::shared_ptr<Ticket> admit() {
    auto refuse_if_draining = [this] {
      if (draining.load())
        throw ApiError(503, "The server is shutting down and takes no new requests; retry on another replica",
                       "server_error", "", "shutting_down");
    };
    refuse_if_draining();
    auto t = std::make_shared<Ticket>(Ticket{*this});
    t->add(1);
    refuse_if_draining();
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

  // A streaming answer's wait for its next event, the same in every SSE provider: the event into
  // ev (nullopt: go on with it); or what the provider returns now: without an event in kProbeEvery
  // a keep-alive comment that probes the client (true while it is there; a client that left
  // cancels the generation), and false at the end of the events.
  template <class Send>
  std::optional<bool> await_event(RequestHandle& handle, TokenEvent& ev, const Send& send) {
    if (stopping.load()) {
      handle.cancel();
      return false;
    }
    const std::optional<bool> got = handle.next_for(ev, kProbeEvery);
    if (!got) return send(kSseKeepAlive) || client_left(handle);
    if (!*got) return false;
    return std::nullopt;
  }

  // A non-streaming answer: one JSON object when generation ends (all n choices). The first event
  // is awaited here for up to a second, so a failure before any token is still a 500. Then the body
  // goes out chunked, one space per token event ahead of the object (JSON allows leading
  // whitespace) and one every kProbeEvery while an event is awaited (a long prompt's prefill): a
  // client that went away fails a write within a step or two and its generation is cancelled, not
  // run on. A failure after that is an error object in the 200's body.
  using Handles = std::vector<std::shared_ptr<RequestHandle>>;
  static void cancel_all(const Handles& hs) {
    for (auto& h : hs) h->cancel();
  }
  void answer_when_done(httplib::Response& res, Handles handles, std::shared_ptr<Ticket> ticket,
                        std::function<void(size_t, const TokenEvent&)> on_event, std::function<json()> body) {
    TokenEvent first;
    const std::optional<bool> got = handles[0]->next_for(first, std::chrono::seconds(1));
    if (got && *got && first.finish == FinishReason::Error) {
      cancel_all(handles);
      throw ApiError(500, "generation failed: " + first.error, "server_error");
    }
    if (got && *got) on_event(0, first);  // else the provider awaits it, probing the client
    res.set_chunked_content_provider(
        "application/json",
        [=, this](size_t, httplib::DataSink& sink) {
          TokenEvent ev;
          std::string error;
          for (size_t i = 0; i < handles.size(); ++i)
            for (std::optional<bool> e; !(e = handles[i]->next_for(ev, kProbeEvery)) || *e;) {
              if (e) {
                if (ev.finish == FinishReason::Error) error = ev.error;
                else on_event(i, ev);
              }
              if (!sink.write(" ", 1)) {
                cancel_all(handles);
                return client_left(*handles[i]);
              }
              if (stopping.load()) {  // the server stops: the response is cut
                cancel_all(handles);
                return false;
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
  json parse_body(const httplib::Request& req, Endpoint endpoint) {
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
    check_identifier_fields(b);
    if (endpoint != Endpoint::Responses) refuse_unknown_fields(b, endpoint), refuse_unhonoured_fields(b);
    return b;
  }

  // One token's chat logprob entry: token text, logprob, bytes, and the alternatives.
  json logprob_entry(int32_t t, float lp, const std::vector<std::pair<int32_t, float>>* top) const {
    const std::string_view bytes = tok.token_bytes(t);
    json bs = json::array();
    for (unsigned char c : bytes) bs.push_back(int(c));
    json e = {{"token", std::string(bytes)}, {"logprob", lp}, {"bytes", bs}};
    if (top) {
      json alts = json::array();
      for (auto [a, alp] : *top) alts.push_back(logprob_entry(a, alp, nullptr));
      e["top_logprobs"] = alts;
    }
    return e;
  }

  // The context: the model's (--max-seq-len) or, if smaller, what the KV cache holds for one sequence.
  int context() const { return std::min(engine.config().max_seq_len, engine.max_positions()); }

  GenerationRequest generation(const json& b, std::vector<int32_t> prompt, bool chat) {
    GenerationRequest g;
    const int ctx = context();
    if (int(prompt.size()) >= ctx)
      throw ApiError(400, fmt::format("This model's maximum context length is {} tokens; the prompt has {}", ctx, prompt.size()),
                     "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded");
    const int64_t room = ctx - int64_t(prompt.size());
    // max_completion_tokens, or max_tokens (its older name); both only if they agree.
    const int64_t mct = get_field<int64_t>(b, "max_completion_tokens", -1), mt = get_field<int64_t>(b, "max_tokens", -1);
    const bool has_mct = b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null();
    const bool has_mt = b.contains("max_tokens") && !b["max_tokens"].is_null();
    if (has_mct && has_mt && mct != mt)
      throw ApiError(400, "'max_tokens' and 'max_completion_tokens' disagree; give one (max_tokens is the older name)",
                     "invalid_request_error", "max_tokens");
    const char* key = has_mct ? "max_completion_tokens" : "max_tokens";
    const int64_t max_tokens = has_mct ? mct : has_mt ? mt : room;
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
    const int64_t top_k = get_field<int64_t>(b, "top_k", 0);
    if (top_k < 0 || top_k > std::numeric_limits<int32_t>::max())
      throw ApiError(400, "'top_k' must be an integer between 0 (no limit) and 2147483647", "invalid_request_error", "top_k");
    g.sampling.top_k = int(top_k);
    g.sampling.seed = uint64_t(get_field<int64_t>(b, "seed", int64_t(std::random_device{}())));
    if (g.sampling.temperature < 0 || g.sampling.temperature > 2)
      throw ApiError(400, "'temperature' must be between 0 and 2", "invalid_request_error", "temperature");
    if (!(g.sampling.top_p > 0 && g.sampling.top_p <= 1))
      throw ApiError(400, "'top_p' must be in (0, 1]", "invalid_request_error", "top_p");
    g.adjust = logit_adjust_fields(b, engine.model_config().vocab);
    g.logprobs = logprobs_field(b, chat);
    // osprey's extension: speculative decoding for this request (the server's --speculative-default
    // when absent); the engine refuses true where it cannot run it, with the reason.
    if (auto it = b.find("speculative"); it != b.end() && !it->is_null()) {
      if (!it->is_boolean()) throw ApiError(400, "'speculative' must be true or false", "invalid_request_error", "speculative");
      g.speculative = it->get<bool>();
    }
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
    json b = parse_body(req, Endpoint::Chat);
    run_chat(b, conversation(b, "messages"), res, ticket);
  }

  // A chat-form request as a Harmony conversation; errors name the field (`input_field` where
  // the mapping blames the messages: "messages" for chat, "input" for responses).
  std::vector<harmony::Message> conversation(const json& chat, const char* input_field) {
    try {
      return harmony::conversation_from_chat_request(
          chat, {.current_date = harmony::today_utc(), .max_prompt_bytes = size_t(engine.config().max_seq_len) * kMaxBytesPerToken});
    } catch (const harmony::PromptTooLong& e) {
      throw ApiError(400, e.what(), "invalid_request_error", input_field, "context_length_exceeded");
    } catch (const Error& e) {
      const std::string f = field_of(e.what(), "messages");
      throw ApiError(400, e.what(), "invalid_request_error", f == "messages" ? input_field : f);
    }
  }

  // A chat request's conversation rendered, constrained and submitted (n choices).
  struct Prepared {
    std::set<std::string> declared;
    std::vector<std::string> stops;
    int prompt_len = 0, n = 1;
    bool want_logprobs = false;
    Handles handles;
  };
  Prepared prepare_chat(const json& b, const std::vector<harmony::Message>& conv, Ticket& ticket) {
    Prepared p;
    for (auto& m : conv)
      if (auto* d = std::get_if<harmony::DeveloperContent>(&m.content))
        if (auto it = d->tools.find("functions"); it != d->tools.end())
          for (auto& t : it->second.tools) p.declared.insert(t.name);
    const std::set<std::string>& declared = p.declared;
    if (auto tc = b.find("tool_choice"); tc != b.end() && tc->is_object()) {
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object() || !fn->contains("name") || !declared.count((*fn)["name"].get<std::string>()))
        throw ApiError(400, "tool_choice names a function that is not in 'tools'", "invalid_request_error", "tool_choice");
    }
    if (auto tc = b.find("tool_choice"); tc != b.end() && *tc == "required" && declared.empty())
      throw ApiError(400, "tool_choice 'required' needs at least one tool", "invalid_request_error", "tool_choice");
    std::vector<int32_t> prompt = harmony::Renderer(tok).render_for_completion(conv, {.auto_drop_analysis = false});
    GenerationRequest g = generation(b, std::move(prompt), /*chat=*/true);
    // Structured outputs, forced calls and the reasoning budget are enforced while decoding. One
    // constraint per choice: it follows its own sequence's tokens.
    std::function<std::shared_ptr<TokenConstraint>()> constraint;
    try {
      if (auto spec = structured_spec(b, declared, grammars, structured, g.max_tokens))
        constraint = [this, spec = *spec] { return std::make_shared<HarmonyConstraint>(tok, spec); };
    } catch (const FieldError& e) {
      throw ApiError(400, e.what(), "invalid_request_error", e.param);
    }
    p.prompt_len = int(g.prompt.size());
    p.n = int(get_field<int64_t>(b, "n", 1));
    p.want_logprobs = g.logprobs >= 0;
    p.stops = stop_field(b);
    p.handles = submit_choices(std::move(g), p.n, ticket, constraint);
    return p;
  }

  // The rendered conversation of a chat request, generated and answered in chat.completion form.
  void run_chat(const json& b, const std::vector<harmony::Message>& conv, httplib::Response& res,
                std::shared_ptr<Ticket> ticket) {
    const bool stream = get_field<bool>(b, "stream", false), include_usage = wants_usage(b);
    Prepared p = prepare_chat(b, conv, *ticket);
    const std::set<std::string>& declared = p.declared;
    const int prompt_len = p.prompt_len, n = p.n;
    const bool want_logprobs = p.want_logprobs;
    const std::vector<std::string>& stops = p.stops;
    const Handles handles = p.handles;
    struct Choice {
      std::shared_ptr<ChatOutputBuilder> builder;
      json logprobs = json::array();
      int completion = 0;
      std::string reason = "stop";
    };
    auto choices = std::make_shared<std::vector<Choice>>();
    for (int i = 0; i < n; ++i) choices->push_back({std::make_shared<ChatOutputBuilder>(tok, declared, stops)});
    const Envelope env{new_id("chatcmpl-"), cfg.model_id, unix_now()};
    // One token event of choice i: its deltas, and its logprob entry when it was answer content.
    auto on_token = [this, choices, want_logprobs](size_t i, const TokenEvent& ev, json* lp_out) {
      Choice& c = (*choices)[i];
      std::vector<json> deltas;
      if (ev.token >= 0) {
        ++c.completion;
        deltas = c.builder->push(ev.token);
        if (want_logprobs && ev.logprobs && c.builder->last_was_content()) {
          json e = logprob_entry(ev.token, ev.logprobs->logprob, &ev.logprobs->top);
          c.logprobs.push_back(e);
          if (lp_out) *lp_out = e;
        }
      }
      if (ev.finish != FinishReason::None) c.reason = finish_reason_name(ev.finish);
      return deltas;
    };
    auto total_usage = [choices, prompt_len] {
      int completion = 0, reasoning = 0;
      for (const Choice& c : *choices) completion += c.completion, reasoning += c.builder->reasoning_tokens();
      return usage(prompt_len, completion, reasoning);
    };

    if (!stream) {
      answer_when_done(
          res, handles, ticket,
          [=](size_t i, const TokenEvent& ev) {
            on_token(i, ev, nullptr);
            if ((*choices)[i].builder->stopped()) handles[i]->cancel();
          },
          [=] {
            json out_choices = json::array();
            for (int i = 0; i < n; ++i) {
              Choice& c = (*choices)[size_t(i)];
              c.builder->finish();
              out_choices.push_back({{"index", i}, {"message", c.builder->message()},
                                     {"logprobs", want_logprobs ? json{{"content", c.logprobs}} : json()},
                                     {"finish_reason", c.builder->finish_reason(c.reason)}});
            }
            json out = env.make("chat.completion", out_choices);
            out["usage"] = total_usage();
            return out;
          });
      return;
    }
    // Streaming: the choices one after another (each chunk names its index); all of them run in
    // the same batch, so a later choice's events are already waiting when its turn comes.
    struct State {
      size_t cur = 0;
      bool sent_role = false;
    };
    auto st = std::make_shared<State>();
    auto chunk = [env](size_t index, const json& delta, const json& finish, const json& logprobs) {
      return sse(env.make("chat.completion.chunk",
                          json::array({{{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}}})));
    };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          const size_t i = st->cur;
          const auto& handle = handles[i];
          Choice& c = (*choices)[i];
          if (!st->sent_role) {
            st->sent_role = true;
            if (!send(chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return client_left(*handle);
          }
          TokenEvent ev;
          if (const std::optional<bool> now = await_event(*handle, ev, send)) return *now;
          if (ev.token >= 0) {
            json lp;
            const std::vector<json> deltas = on_token(i, ev, want_logprobs ? &lp : nullptr);
            for (size_t k = 0; k < deltas.size(); ++k) {
              const json lpj = want_logprobs && k == 0 && !lp.is_null() ? json{{"content", json::array({lp})}} : json();
              if (!send(chunk(i, deltas[k], nullptr, lpj))) return client_left(*handle);
            }
            // A token that gives no delta yet (a tool call's name, held-back text) still probes the
            // connection with an SSE comment, so a client that left is noticed now.
            if (deltas.empty() && !send(kSseKeepAlive)) return client_left(*handle);
            if (c.builder->stopped()) handle->cancel();
          } else if (ev.finish != FinishReason::None) {
            on_token(i, ev, nullptr);
          }
          if (ev.finish != FinishReason::None) {
            for (auto& d : c.builder->finish())
              if (!send(chunk(i, d, nullptr, nullptr))) return false;
            if (ev.finish == FinishReason::Error) {
              send(sse(error_body("generation failed: " + ev.error, "server_error", "", "")));
              send(kSseDone);
              sink.done();
              return true;
            }
            send(chunk(i, json::object(), c.builder->finish_reason(finish_reason_name(ev.finish)), nullptr));
            if (++st->cur < size_t(n)) {
              st->sent_role = false;
              return true;
            }
            if (include_usage) {
              json u = env.make("chat.completion.chunk", json::array());
              u["usage"] = total_usage();
              send(sse(u));
            }
            send(kSseDone);
            sink.done();
          }
          return true;
        },
        [handles, ticket](bool) { cancel_all(handles); });  // a finished request ignores it; a dropped client frees its blocks
  }

  // ------------------------------------------------------------------ completions
  void completions(const httplib::Request& req, httplib::Response& res) {
    auto ticket = admit();
    json b = parse_body(req, Endpoint::Completions);
    if (auto rf = b.find("response_format"); rf != b.end() && !rf->is_null() && !(rf->is_object() && rf->value("type", json()) == "text"))
      throw ApiError(400, "'response_format' applies to chat completions and responses, not to raw completions",
                     "invalid_request_error", "response_format");
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
    const bool want_logprobs = g.logprobs >= 0;
    const std::vector<std::string> stops = stop_field(b);  // checked before anything runs
    const Handles handles = submit_choices(std::move(g), n, *ticket, nullptr);
    const Envelope env{new_id("cmpl-"), cfg.model_id, unix_now()};
    // Per choice: its text as it decodes, cut at the stop strings, and its logprobs (OpenAI's
    // completions form: parallel arrays).
    struct Text {
      harmony::Utf8StreamDecoder utf8;
      StopStringFilter stops;
      std::string text = {}, reason = "stop";
      int completion = 0;
      json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
           text_offset = json::array();
    };
    auto texts = std::make_shared<std::vector<Text>>();
    for (int i = 0; i < n; ++i) texts->push_back(Text{{}, StopStringFilter(stops)});
    // The text an event adds to choice i (at the end, the held-back tail too); its logprobs
    // arrays grow by the token (lp: this event's arrays, for a stream chunk).
    auto push = [this, texts, want_logprobs](size_t i, const TokenEvent& ev, json* lp) {
      Text& t = (*texts)[i];
      std::string piece;
      if (ev.token >= 0 && !t.stops.stopped()) {
        ++t.completion;
        piece = t.stops.push(t.utf8.push(tok.token_bytes(ev.token)));
        if (want_logprobs && ev.logprobs) {
          json top = json::object();
          for (auto [a, alp] : ev.logprobs->top) top[std::string(tok.token_bytes(a))] = alp;
          const std::string token(tok.token_bytes(ev.token));
          t.tokens.push_back(token), t.token_logprobs.push_back(ev.logprobs->logprob), t.top_logprobs.push_back(top);
          t.text_offset.push_back(t.text.size());
          if (lp)
            *lp = {{"tokens", {token}}, {"token_logprobs", {ev.logprobs->logprob}}, {"top_logprobs", {top}},
                   {"text_offset", {t.text.size()}}};
        }
      }
      if (ev.finish != FinishReason::None) {
        piece += t.stops.push(t.utf8.flush());
        piece += t.stops.flush();
        t.reason = t.stops.stopped() ? "stop" : finish_reason_name(ev.finish);
      }
      t.text += piece;
      return piece;
    };
    auto logprobs_of_choice = [want_logprobs](const Text& t) {
      return want_logprobs ? json{{"tokens", t.tokens}, {"token_logprobs", t.token_logprobs},
                                  {"top_logprobs", t.top_logprobs}, {"text_offset", t.text_offset}}
                           : json();
    };
    auto choice = [](size_t index, const std::string& text, const json& finish, const json& logprobs) {
      return json{{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}};
    };
    auto total_completion = [texts] {
      int c = 0;
      for (const Text& t : *texts) c += t.completion;
      return c;
    };
    if (!stream) {
      answer_when_done(
          res, handles, ticket,
          [=](size_t i, const TokenEvent& ev) {
            push(i, ev, nullptr);
            if ((*texts)[i].stops.stopped()) handles[i]->cancel();
          },
          [=] {
            json choices = json::array();
            for (size_t i = 0; i < size_t(n); ++i) {
              const Text& t = (*texts)[i];
              choices.push_back(choice(i, t.text, t.reason, logprobs_of_choice(t)));
            }
            json out = env.make("text_completion", choices);
            out["usage"] = usage(prompt_len, total_completion(), 0);
            return out;
          });
      return;
    }
    auto cur = std::make_shared<size_t>(0);  // streamed one choice after another
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          const size_t i = *cur;
          const auto& handle = handles[i];
          TokenEvent ev;
          if (const std::optional<bool> now = await_event(*handle, ev, send)) return *now;
          const bool last = ev.finish != FinishReason::None;
          json lp;
          const std::string piece = push(i, ev, want_logprobs ? &lp : nullptr);
          const Text& t = (*texts)[i];
          if (!send(sse(env.make("text_completion", json::array({choice(i, piece, last ? json(t.reason) : json(), lp)})))))
            return client_left(*handle);
          if (t.stops.stopped()) handle->cancel();
          if (last) {
            if (++*cur < size_t(n)) return true;
            if (include_usage) {
              json u = env.make("text_completion", json::array());
              u["usage"] = usage(prompt_len, total_completion(), 0);
              send(sse(u));
            }
            send(kSseDone);
            sink.done();
          }
          return true;
        },
        [handles, ticket](bool) { cancel_all(handles); });
  }

  // ------------------------------------------------------------------ responses
  ResponseStore store{cfg.max_stored_responses};

  // The response object of a Responses request (the request's settings echoed, as OpenAI does).
  json response_object(const json& b, const std::string& id, int64_t created, const std::string& status,
                       const json& output, const json& usage_obj, const json& incomplete) const {
    auto or_default = [&](const char* k, json d) { return b.contains(k) && !b[k].is_null() ? b[k] : d; };
    json reasoning = {{"effort", b.contains("reasoning") && b["reasoning"].is_object() ? b["reasoning"].value("effort", json("medium")) : json("medium")},
                      {"summary", nullptr}};
    json text = {{"format", b.contains("text") && b["text"].is_object() && b["text"].contains("format") ? b["text"]["format"]
                                                                                                          : json{{"type", "text"}}}};
    return {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status}, {"error", nullptr},
            {"incomplete_details", incomplete}, {"instructions", or_default("instructions", nullptr)},
            {"max_output_tokens", or_default("max_output_tokens", nullptr)}, {"model", cfg.model_id}, {"output", output},
            {"parallel_tool_calls", or_default("parallel_tool_calls", true)},
            {"previous_response_id", or_default("previous_response_id", nullptr)}, {"reasoning", reasoning},
            {"store", or_default("store", true)}, {"temperature", or_default("temperature", 1.0)}, {"text", text},
            {"tool_choice", or_default("tool_choice", "auto")}, {"tools", or_default("tools", json::array())},
            {"top_p", or_default("top_p", 1.0)}, {"truncation", "disabled"}, {"usage", usage_obj},
            {"user", or_default("user", nullptr)}, {"metadata", or_default("metadata", json::object())}};
  }

  void responses(const httplib::Request& req, httplib::Response& res) {
    auto ticket = admit();
    json b = parse_body(req, Endpoint::Responses);
    json history = json::array();
    if (auto prev = b.find("previous_response_id"); prev != b.end() && !prev->is_null()) {
      if (!prev->is_string()) throw ApiError(400, "'previous_response_id' must be a string", "invalid_request_error", "previous_response_id");
      auto e = store.get(prev->get<std::string>());
      if (!e)
        throw ApiError(404, fmt::format("Previous response with id '{}' not found (the store keeps the last {})",
                                        prev->get<std::string>(), store.capacity()),
                       "invalid_request_error", "previous_response_id", "previous_response_not_found");
      history = e->messages;
    }
    json chat, messages;
    try {
      chat = chat_request_from_responses(b, history, messages);
    } catch (const FieldError& e) {
      throw ApiError(400, e.what(), "invalid_request_error", e.param);
    }
    // Every field is read before the generation starts: a refusal after it would leave it running.
    const bool stream = get_field<bool>(b, "stream", false), keep = get_field<bool>(b, "store", true);
    // The chat request's checks name chat fields: their Responses names go back to the client.
    Prepared p;
    try {
      p = prepare_chat(chat, conversation(chat, "input"), *ticket);
    } catch (ApiError& e) {
      static const std::map<std::string, std::string> kResponsesName = {
          {"messages", "input"}, {"max_tokens", "max_output_tokens"}, {"response_format", "text.format"},
          {"reasoning_effort", "reasoning.effort"}};
      if (auto it = kResponsesName.find(e.param); it != kResponsesName.end()) e.param = it->second;
      throw;
    }
    const std::string id = new_id("resp_");
    const int64_t created = unix_now();
    auto out = std::make_shared<ResponsesOutput>(tok, p.declared);
    struct Tally {
      int completion = 0;
      FinishReason finish = FinishReason::None;
      std::string error;
      uint64_t seq = 0;  // stream events' sequence_number
    };
    auto tally = std::make_shared<Tally>();
    const int prompt_len = p.prompt_len;
    // The finished response (stored unless store is false).
    auto final_object = [=, this] {
      const bool incomplete = tally->finish == FinishReason::Length;
      json u = {{"input_tokens", prompt_len}, {"input_tokens_details", {{"cached_tokens", 0}}},
                {"output_tokens", tally->completion},
                {"output_tokens_details", {{"reasoning_tokens", out->reasoning_tokens()}}},
                {"total_tokens", prompt_len + tally->completion}};
      json r = response_object(b, id, created, incomplete ? "incomplete" : "completed", out->items(), u,
                               incomplete ? json{{"reason", "max_output_tokens"}} : json());
      if (keep) {
        json conversation = messages;
        for (const json& m : out->messages()) conversation.push_back(m);
        store.put(id, {r, conversation});
      }
      return r;
    };
    const auto handle = p.handles[0];
    if (!stream) {
      answer_when_done(
          res, p.handles, ticket,
          [=](size_t, const TokenEvent& ev) {
            if (ev.token >= 0) ++tally->completion, out->push(ev.token);
            if (ev.finish != FinishReason::None) tally->finish = ev.finish;
          },
          [=] {
            out->finish();
            return final_object();
          });
      return;
    }
    auto event = [tally](json e) {
      e["sequence_number"] = tally->seq++;
      return "event: " + e["type"].get<std::string>() + "\ndata: " + dump(e) + "\n\n";
    };
    auto started = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!*started) {
            *started = true;
            const json r = response_object(b, id, created, "in_progress", json::array(), nullptr, nullptr);
            if (!send(event({{"type", "response.created"}, {"response", r}})) ||
                !send(event({{"type", "response.in_progress"}, {"response", r}})))
              return client_left(*handle);
          }
          TokenEvent ev;
          if (const std::optional<bool> now = await_event(*handle, ev, send)) return *now;
          std::vector<json> evs;
          if (ev.token >= 0) {
            ++tally->completion;
            evs = out->push(ev.token);
            if (evs.empty() && !send(kSseKeepAlive)) return client_left(*handle);
          }
          for (json& e : evs)
            if (!send(event(std::move(e)))) return client_left(*handle);
          if (ev.finish != FinishReason::None) {
            tally->finish = ev.finish;
            for (json& e : out->finish()) send(event(std::move(e)));
            if (ev.finish == FinishReason::Error) {
              json r = response_object(b, id, created, "failed", out->items(), nullptr, nullptr);
              r["error"] = {{"code", "server_error"}, {"message", "generation failed: " + ev.error}};
              send(event({{"type", "response.failed"}, {"response", r}}));
            } else {
              const json r = final_object();
              send(event({{"type", r["status"] == "completed" ? "response.completed" : "response.incomplete"}, {"response", r}}));
            }
            sink.done();
          }
          return true;
        },
        [handle, ticket](bool) { handle->cancel(); });
  }

  void get_response(const httplib::Request& req, httplib::Response& res) {
    const std::string rid = req.matches[1];
    auto e = store.get(rid);
    if (!e) throw ApiError(404, fmt::format("No response with id '{}' (the store keeps the last {})", rid, store.capacity()),
                           "invalid_request_error", "response_id", "not_found");
    res.set_content(dump(e->response), "application/json");
  }

  void delete_response(const httplib::Request& req, httplib::Response& res) {
    const std::string rid = req.matches[1];
    if (!store.erase(rid)) throw ApiError(404, fmt::format("No response with id '{}'", rid), "invalid_request_error", "response_id", "not_found");
    res.set_content(dump(json{{"id", rid}, {"object", "response.deleted"}, {"deleted", true}}), "application/json");
  }

  // ------------------------------------------------------------------ metrics
  std::string metrics_text() {
    return prometheus_text(engine.metrics(),
                           {.admitted = admitted.load(), .connections_waiting = connections_waiting.load(),
                            .client_disconnects = client_disconnects.load()},
                           grammars.stats(), cfg.model_id,
                           {.block_size = engine.kv_block_size(), .blocks = engine.kv_blocks(),
                            .prefix_caching = engine.config().prefix_caching});
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
        if (e.status == 503) res.set_header("Connection", "close");
        res.set_content(dump(error_body(e.what(), e.type, e.param, e.code)), "application/json");
      } catch (const nlohmann::json::type_error& e) {
        // A request value of a type some reader did not check: the client's to fix, not a 500.
        res.status = 400;
        res.set_content(dump(error_body(std::string("the request holds a value of the wrong type: ") + e.what(),
                                        "invalid_request_error", "", "")),
                        "application/json");
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
    http.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd = int(sock);  // the last one it tries is the one it binds
    });
    // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each one
    // until the client acknowledges the one before, which a kept-alive connection's delayed ACK
    // can put off by up to 40 ms a chunk.
    http.set_tcp_nodelay(true);
    http.set_payload_max_length(cfg.max_body_bytes);
    http.set_read_timeout(cfg.read_timeout_s, 0);
    http.set_keep_alive_timeout(cfg.read_timeout_s);
    http.set_keep_alive_max_count(cfg.keep_alive_requests);
    http.set_write_timeout(30, 0);
    // A declared body over the limit is refused before any of it is read (cpp-httplib itself would
    // read and discard it first).
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const std::string len = req.get_header_value("Content-Length");
      if (!len.empty() && !std::all_of(len.begin(), len.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        res.status = 400;
        res.set_header("Connection", "close");
        res.set_content(dump(error_body(fmt::format("Content-Length '{}' is not a byte count", len), "invalid_request_error", "", "")),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
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
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const bool leaving = draining.load();  // one read: the status and the body agree
      if (leaving) res.status = 503;
      res.set_content(leaving ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}", "application/json");
    });
    auto model_card = [this] {
      return json{{"id", cfg.model_id}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "osprey"},
                  {"max_model_len", context()}, {"context_length", context()}};
    };
    http.Get("/v1/models", [model_card](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_card()})}}), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this, model_card](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != cfg.model_id) {
        res.status = 404;
        res.set_content(dump(error_body(fmt::format("The model '{}' does not exist; this server serves '{}'",
                                                    std::string(req.matches[1]), cfg.model_id),
                                        "invalid_request_error", "model", "model_not_found")),
                        "application/json");
        return;
      }
      res.set_content(dump(model_card()), "application/json");
    });
    http.Post("/v1/responses", guarded(&Impl::responses));
    http.Get(R"(/v1/responses/([A-Za-z0-9_\-]+))", guarded(&Impl::get_response));
    http.Delete(R"(/v1/responses/([A-Za-z0-9_\-]+))", guarded(&Impl::delete_response));
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

// cpp-httplib (Debian's 0.11) listens with a backlog of 5 connections. A burst of clients then
// overflows the accept queue, and each connection dropped there waits on the client's SYN
// retransmissions (1, 3, 7, 15 s): 200 concurrent requests to the tiny model took 28 s, and under
// load a connection can pass a client's connect timeout (undici's is 10 s). Listening again on the
// bound socket widens the queue to what the kernel allows (net.core.somaxconn).
static bool widen_accept_queue(int fd) { return fd >= 0 && ::listen(fd, SOMAXCONN) == 0; }

bool OpenAiServer::bind() {
  if (impl_->cfg.port == 0) {
    const int port = impl_->http.bind_to_any_port(impl_->cfg.host);
    if (port <= 0) return false;
    impl_->cfg.port = port;
  } else if (!impl_->http.bind_to_port(impl_->cfg.host, impl_->cfg.port)) {
    return false;
  }
  if (!widen_accept_queue(impl_->listen_fd))
    log_info("warning: could not widen the listening socket's accept queue (backlog 5): bursts of connections will wait");
  return true;
}

// The watcher of a drain and of stop(): once drain() is called, it stops the server when no
// generation request is held any more (admitted counts them to their last byte) or at the drain's
// deadline; once stopping, it closes the listener as soon as cpp-httplib listens (its stop() before
// that would do nothing: a signal between bind and listen). cpp-httplib then waits for its worker
// threads: the responses in flight end within kProbeEvery, and a kept-alive connection idle in its
// read within read_timeout_s.
bool OpenAiServer::listen() {
  Impl& m = *impl_;
  std::atomic<bool> done{false};
  std::thread watcher([&m, &done] {
    using clock = std::chrono::steady_clock;
    auto nap = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
    std::optional<clock::time_point> deadline;
    while (!done.load() && !m.stopping.load()) {
      if (m.draining.load()) {
        if (!deadline) {
          deadline = clock::now() + std::chrono::seconds(m.cfg.drain_timeout_s);
          log_info("draining: {} generation requests in flight, at most {} s; new ones get 503", m.admitted.load(),
                   m.cfg.drain_timeout_s);
        }
        const int left = m.admitted.load();
        if (left == 0 || clock::now() >= *deadline) {
          if (left > 0)
            log_info("drain timeout: stopping with {} generation requests still running (their responses are cut)", left);
          m.stopping.store(true);
          break;
        }
      }
      nap();
    }
    while (!done.load() && !m.http.is_running()) nap();
    if (!done.load()) m.http.stop();
  });
  bool ok = false;
  try {
    ok = m.http.listen_after_bind();
  } catch (...) {
    done = true;
    watcher.join();
    throw;
  }
  done = true;
  watcher.join();
  return ok;
}

void OpenAiServer::stop() { impl_->stopping.store(true); }

void OpenAiServer::drain() { impl_->draining.store(true); }

int OpenAiServer::bound_port() const { return impl_->cfg.port; }

}  // namespace osprey::server
