// The OpenAI-compatible HTTP server: /health, /v1/models, /v1/chat/completions,
// /v1/completions and /metrics over cpp-httplib, on top of the engine. Streaming is SSE in
// OpenAI's chunk format; a client that goes away cancels its request and frees its KV blocks.
#pragma once
#include <memory>
#include <string>

#include "engine/engine.h"
#include "harmony/tokenizer.h"

namespace osprey::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_id;          // the name /v1/models lists and requests must use
  // HTTP worker threads. cpp-httplib gives each connection a thread while it reads and answers
  // it, so the pool holds every admitted request (max_batch running + max_queue waiting) with room
  // to spare for /health, /metrics and slow clients, which a 5 s read timeout lets go.
  size_t max_body_bytes = 8 << 20;
  int http_threads = 0;          // 0: max_batch + max_queue + 64
  int read_timeout_s = 5;        // per read of headers or body; also the keep-alive idle limit
  // Requests a kept-alive connection serves before the server closes it (nginx's default;
  // cpp-httplib's own is 5, which made every sixth request of an SDK client open a connection).
  size_t keep_alive_requests = 1000;
  // drain(): how long the generations in flight may take to finish before the server stops anyway
  // (25 s: with read_timeout_s for idle kept-alive connections, within Kubernetes' default 30 s
  // grace period).
  int drain_timeout_s = 25;
  int reasoning_budget = 1024;   // analysis tokens of a constrained request (it may override)
  size_t max_stored_responses = 1024;  // /v1/responses kept for previous_response_id and GET (LRU)
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, const harmony::Tokenizer& tok, ServerConfig cfg);
  ~OpenAiServer();
  // Binds the address (port 0: any free port, then bound_port() says which); false if it cannot
  // (errno says why: EADDRINUSE for a port another server holds).
  bool bind();
  // Serves until stop() or the end of a drain(); bind() first.
  bool listen();
  // Stops (safe from a signal handler: it only sets a flag): the responses in flight are cut within
  // a quarter second, and listen() returns once cpp-httplib's threads are done (a kept-alive
  // connection idle in its read holds one up to read_timeout_s).
  void stop();
  // A graceful stop, safe to call from a signal handler (it only sets a flag): from now on new
  // generation requests get a 503 and /health answers 503 {"status":"draining"} (so load balancers
  // route elsewhere), while the generations in flight run to their end; the server stops when none
  // is left, or after cfg.drain_timeout_s with those still running cut.
  void drain();
  int bound_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey::server
