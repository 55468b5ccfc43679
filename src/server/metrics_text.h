// GET /metrics: the engine's and the server's counters in the Prometheus text format, under
// osprey's names and under vLLM v1's (with its labels), which the Gateway API Inference
// Extension's model-server protocol and vLLM dashboards read.
#pragma once
#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "grammar/token_mask.h"

namespace osprey::server {

// What the HTTP layer counts beside the engine.
struct ServerCounters {
  int admitted = 0;             // generation requests held: running, queued, or being read or written
  int connections_waiting = 0;  // accepted, waiting for an HTTP thread
  uint64_t client_disconnects = 0;
};

// The KV cache's shape, for vllm:cache_config_info.
struct CacheConfigInfo {
  int block_size = 0, blocks = 0;
  bool prefix_caching = false;
};

std::string prometheus_text(const EngineMetrics& m, const ServerCounters& srv, const grammar::MaskStats& grammar,
                            const std::string& model_id, const CacheConfigInfo& cache);

}  // namespace osprey::server
