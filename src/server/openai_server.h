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
  size_t max_body_bytes = 8 << 20;
  int http_threads = 0;          // 0: max_batch + max_queue/4 + 8
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, const harmony::Tokenizer& tok, ServerConfig cfg);
  ~OpenAiServer();
  // Binds and serves until stop(); returns false if the address cannot be bound.
  bool listen();
  void stop();
  int bound_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey::server
