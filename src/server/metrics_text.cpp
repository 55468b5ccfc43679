#include "server/metrics_text.h"

#include <fmt/format.h>

namespace osprey::server {

namespace {

// The names the Gateway API Inference Extension's model-server protocol and vLLM dashboards
// read (vLLM v1's, with its labels): queue, running batch, KV usage as a fraction, prefix cache
// counters in tokens, the latency histograms with vLLM's bounds, token counters, cache config.
void vllm_metrics(const EngineMetrics& m, const std::string& model_id, const CacheConfigInfo& cache, std::string& s) {
  const std::string labels = fmt::format("model_name=\"{}\",engine=\"0\"", model_id);
  auto one = [&](const char* name, const char* type, const char* help, double v) {
    s += fmt::format("# HELP vllm:{0} {1}\n# TYPE vllm:{0} {2}\nvllm:{0}{{{3}}} {4}\n", name, help, type, labels, v);
  };
  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    s += fmt::format("# HELP vllm:{0} {1}\n# TYPE vllm:{0} histogram\n", name, help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      s += fmt::format("vllm:{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.bounds[i], cum);
    }
    s += fmt::format("vllm:{0}_bucket{{{1},le=\"+Inf\"}} {2}\nvllm:{0}_sum{{{1}}} {3}\nvllm:{0}_count{{{1}}} {2}\n", name,
                     labels, h.count, h.sum);
  };
  one("num_requests_running", "gauge", "Number of requests in model execution batches.", m.running);
  one("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", m.queue_depth);
  one("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", m.kv_usage);
  one("gpu_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage (the name before vLLM 0.9).", m.kv_usage);
  one("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
      double(m.prefix.queries));
  one("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", double(m.prefix.hits));
  one("prompt_tokens_total", "counter", "Number of prefill tokens processed.", double(m.prompt_tokens));
  one("generation_tokens_total", "counter", "Number of generation tokens processed.", double(m.generated_tokens));
  one("num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.", double(m.preemptions));
  hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft);
  hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl);
  hist("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e);
  one("spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", double(m.spec_drafts));
  one("spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", double(m.spec_draft_tokens));
  one("spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", double(m.spec_accepted_tokens));
  if (!m.spec_accepted_per_pos.empty()) {
    s += "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.\n"
         "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t i = 0; i < m.spec_accepted_per_pos.size(); ++i)
      s += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", labels, i,
                       m.spec_accepted_per_pos[i]);
  }
  s += fmt::format("# HELP vllm:cache_config_info Information of the KV cache.\n# TYPE vllm:cache_config_info gauge\n"
                   "vllm:cache_config_info{{block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"{}\",engine=\"0\"}} 1\n",
                   cache.block_size, cache.blocks, cache.prefix_caching ? "True" : "False");
}

}  // namespace

std::string prometheus_text(const EngineMetrics& m, const ServerCounters& srv, const grammar::MaskStats& gs,
                            const std::string& model_id, const CacheConfigInfo& cache) {
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
        srv.admitted);
  gauge("http_connections_waiting", "Connections accepted and waiting for an HTTP thread.", srv.connections_waiting);
  counter("client_disconnects_total", "Requests cancelled because their client went away (stop strings not counted).",
          double(srv.client_disconnects));
  gauge("running_batch_size", "Sequences in the running batch.", m.running);
  gauge("kv_cache_blocks_used", "KV-cache blocks in use.", m.kv_blocks_used);
  gauge("kv_cache_blocks_free", "KV-cache blocks free.", m.kv_blocks_free);
  hist("time_to_first_token_seconds", "Time to first token.", m.ttft);
  hist("engine_step_seconds", "Wall time of an engine step (scheduling, the model, token selection).", m.step);
  hist("constraint_mask_seconds", "Host time computing the token masks of a step's constrained rows.", m.mask);
  counter("constraint_masked_rows_total", "Rows whose next token a constraint masked.", double(m.masked_rows));
  counter("grammar_masks_cached_total", "Grammar token masks served from the per-state cache.", double(gs.cached));
  counter("grammar_masks_computed_total", "Grammar token masks computed (cache misses).", double(gs.computed));
  hist("inter_token_latency_seconds", "Time between consecutive tokens of a request.", m.itl);
  hist("e2e_request_latency_seconds", "Time from a request's arrival to its last token (finished by stop or length).", m.e2e);
  gauge("kv_cache_blocks_cached", "KV-cache blocks that only the prefix cache holds (reusable, evictable).", m.kv_blocks_cached);
  gauge("kv_cache_usage_ratio", "Fraction of KV-cache blocks held by sequences (0-1; cached-only blocks count as free).",
        m.kv_usage);
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", double(m.prefix.queries));
  counter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not computed).", double(m.prefix.hits));
  counter("prefix_cache_evictions_total", "Cached KV blocks evicted for new ones.", double(m.prefix.evictions));
  gauge("prefix_cache_hit_rate", "Prompt tokens found in the prefix cache / looked up, since start.",
        m.prefix.queries ? double(m.prefix.hits) / double(m.prefix.queries) : 0.0);
  counter("spec_decode_num_drafts_total", "Speculative verify chunks (a sequence's drafts checked in one step).",
          double(m.spec_drafts));
  counter("spec_decode_num_draft_tokens_total", "Draft tokens verified.", double(m.spec_draft_tokens));
  counter("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", double(m.spec_accepted_tokens));
  counter("spec_decode_emitted_tokens_total", "Tokens emitted by verify chunks (accepted drafts and the target's own).",
          double(m.spec_emitted));
  counter("spec_decode_steps_total", "Engine steps that verified drafts.", double(m.spec_steps));
  counter("spec_decode_propose_seconds_total", "Host time spent proposing drafts.", m.spec_propose_seconds);
  gauge("spec_decode_acceptance_rate", "Draft tokens accepted / verified, since start.",
        m.spec_draft_tokens ? double(m.spec_accepted_tokens) / double(m.spec_draft_tokens) : 0.0);
  gauge("spec_decode_mean_acceptance_length", "Tokens per verify chunk (1 + accepted drafts), since start.",
        m.spec_drafts ? double(m.spec_emitted) / double(m.spec_drafts) : 0.0);
  vllm_metrics(m, model_id, cache, s);
  return s;
}

}  // namespace osprey::server
