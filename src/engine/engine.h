// The serving engine: token ids in, token ids out. A queue of requests, the scheduler's step
// plans run by a model runner on one engine thread, per-request sampling, cancellation that
// frees KV blocks at once, and the counters /metrics reports. It knows nothing of Harmony.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <functional>
#include <memory>
#include <mutex>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "model/gpt_oss_forward.h"

namespace osprey {

// Token masks of a step's sampling rows, filled on the host by the engine. A runner that selects
// tokens itself calls compute(rows) for the rows it is about to select, as late as it can (a
// decode batch's after launching the step's forward on the GPU, so that the host work overlaps
// it), once per row, then reads row(i): (vocab + 31) / 32 words, bit t set: token t allowed;
// nullptr: no constraint on that row.
struct StepMasks {
  std::function<void(std::span<const size_t> rows)> compute;
  std::function<const uint32_t*(size_t)> row;
};

// What executes a step plan: logits for every chunk that samples (in plan order).
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::vector<std::vector<float>> run(const StepPlan& plan) = 0;
  virtual const GptOssConfig& config() const = 0;
  // The sequence finished, was cancelled or preempted: whatever the runner keeps for it goes.
  virtual void release(int64_t seq_id) {}
  // Whether the model reads and writes the engine's paged KV on the host (false: the blocks only
  // place the KV, which the model keeps in its own memory: the GPU).
  virtual bool uses_host_kv() const { return true; }
  // A runner whose model keeps the KV says how it is cut: positions per block and blocks in its
  // memory (0: the engine's configuration decides).
  virtual int kv_block_size() const { return 0; }
  virtual int kv_blocks() const { return 0; }
  // Runners that can select tokens themselves (on the GPU, without copying logits to the host)
  // say so and implement run_select: the token of every chunk that samples, in plan order, as
  // choose_token would pick it from that chunk's logits with choices[i]. The engine uses it for
  // steps whose sampling sequences have no logit constraint.
  virtual bool selects_tokens() const { return false; }
  // masks (optional): the sampling rows' token masks, which the selection must obey.
  virtual std::vector<int32_t> run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                          const StepMasks* masks = nullptr);
  // Draft heads (MTP, EAGLE) read the target's hidden states. A runner that can keep them says so;
  // after keep_hidden(true), hidden(i) is the last layer's hidden state (the final norm's input,
  // [hidden]) of the i-th sampling row of the last step.
  virtual bool provides_hidden() const { return false; }
  virtual void keep_hidden(bool) {}
  virtual std::vector<float> hidden(size_t row) const;
};

// The CPU model over the engine's paged KV: one batched forward per step. selects = true: it
// also selects tokens itself (on the host, from the same logits), which tests use to check the
// engine's selecting path without a GPU.
class CpuModelRunner final : public ModelRunner {
 public:
  explicit CpuModelRunner(const GptOssCpuModel& m, bool selects = false) : model_(m), selects_(selects) {}
  std::vector<std::vector<float>> run(const StepPlan& plan) override;
  const GptOssConfig& config() const override { return model_.config(); }
  bool selects_tokens() const override { return selects_; }
  std::vector<int32_t> run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                  const StepMasks* masks = nullptr) override;
  bool provides_hidden() const override { return true; }
  void keep_hidden(bool on) override { keep_hidden_ = on; }
  std::vector<float> hidden(size_t row) const override;

 private:
  const GptOssCpuModel& model_;
  bool selects_;
  bool keep_hidden_ = false;
  std::vector<float> hidden_;  // the last step's sampling rows, [rows][hidden]
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);

// Per-request logit constraint (grammars, forced tool calls): sees the tokens generated so far
// and says which tokens may come next, as a bitmask over the vocabulary (bit t % 32 of word
// t / 32); false: no restriction this step (mask left as it was). Called by the engine, for
// different requests on different threads at once.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool fill_mask(std::span<const int32_t> generated, std::span<uint32_t> mask) = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  std::shared_ptr<TokenConstraint> constraint;  // optional
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
  LogitAdjust adjust;                // logit_bias and penalties
  int logprobs = -1;                 // -1: none; k in [0, 20]: log probabilities with the top k
  // Speculative decoding for this request: unset: the engine's default; true: refused (Error)
  // when the engine has no proposer or the request needs logits on the host (logprobs,
  // logit_bias, penalties) or has a constraint, which speculation does not combine with.
  std::optional<bool> speculative;
};

struct TokenEvent {
  int32_t token = -1;               // -1: no token (an error or a cancellation)
  FinishReason finish = FinishReason::None;
  std::string error;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
};

// The requester's end of one generation: a queue of events, and cancellation.
class RequestHandle {
 public:
  // Waits for the next event; false once the request is finished and drained.
  bool next(TokenEvent& ev);
  // As next, waiting at most `timeout`: nullopt when it ran out first (a long prompt's prefill),
  // so a waiter can probe its client meanwhile.
  std::optional<bool> next_for(TokenEvent& ev, std::chrono::milliseconds timeout);
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  int64_t id() const { return id_; }

 private:
  friend class Engine;
  void push(TokenEvent ev);
  int64_t id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
};

struct EngineConfig {
  int max_batch = 64;
  int max_batched_tokens = 512;
  int max_queue = 256;        // requests beyond max_batch + max_queue unfinished are refused (HTTP 429)
  int max_seq_len = 4096;     // prompt + generated tokens
  int kv_block_size = 16;     // unless the runner's model decides (the GPU's pages)
  int kv_blocks = 0;          // 0: the runner's, else enough for max_batch sequences of max_seq_len
  bool prefix_caching = true;
  // Speculative decoding (engine/speculative.h): no proposer, off. At most spec_k drafts per
  // sequence and step; spec_adaptive: a SpecPolicy picks the step's draft length from measured
  // rates (0 where speculation does not pay), else always spec_k. spec_default: whether requests
  // that do not say speculate.
  std::shared_ptr<Proposer> proposer;
  int spec_k = 0;
  bool spec_adaptive = true;
  bool spec_default = true;
};

struct Histogram {
  std::vector<double> bounds;  // upper bounds in seconds
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct EngineMetrics {
  uint64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, preemptions = 0, steps = 0;
  int queue_depth = 0, running = 0, kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_cached = 0, kv_blocks_total = 0;
  double kv_usage = 0;  // blocks held by sequences / all blocks (cached-only blocks count as free)
  PrefixCacheStats prefix;
  // vLLM's bucket bounds, so that dashboards and gateways built for it read these unchanged.
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                  40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram itl{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0}};
  Histogram step{{0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.1, 0.25, 1}};
  // Host time computing token masks per step that had constrained rows (overlapping the GPU step
  // when the runner selects tokens itself), and the rows masked.
  Histogram mask{{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}};
  uint64_t masked_rows = 0;
  // Speculative decoding: verify chunks, drafts verified, drafts accepted (by position in the
  // draft), steps that verified drafts, tokens those chunks emitted, host time proposing.
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_steps = 0, spec_emitted = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  double spec_propose_seconds = 0;
};

struct QueueFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Engine {
 public:
  Engine(std::unique_ptr<ModelRunner> runner, EngineConfig cfg);
  ~Engine();  // stops the engine thread; pending requests end as cancelled

  // Throws QueueFull when the queue is full, Error when the request cannot ever fit.
  std::shared_ptr<RequestHandle> submit(GenerationRequest req);
  EngineMetrics metrics();
  const EngineConfig& config() const { return cfg_; }
  const GptOssConfig& model_config() const { return runner_->config(); }
  int kv_block_size() const { return kv_.block_size(); }
  // The longest sequence (prompt + output) the KV pool can hold at all: the context a request
  // can have is the smaller of this and max_seq_len.
  int max_positions() const { return max_positions_; }
  int kv_blocks() const { return kv_.num_blocks(); }

 private:
  struct Active {
    std::shared_ptr<RequestHandle> handle;
    double submitted, last_token = 0;
  };
  void loop();
  void step();
  void finish(int64_t id, FinishReason r, const std::string& error = {});
  // What the runner and the proposer keep for a sequence goes (finished, cancelled, preempted).
  void release_state(int64_t id);
  void update_gauges();
  // Drafts for the sequences about to decode (their Sequence::draft); the step's draft length.
  int propose();
  std::unique_ptr<SpecPolicy> policy_;
  // Token masks of the sampling rows whose sequence has a constraint (the runner calls compute).
  StepMasks step_masks(const std::vector<Sequence*>& rows);
  std::vector<std::vector<uint32_t>> mask_bufs_;
  std::vector<uint8_t> mask_has_;
  std::vector<std::string> mask_error_;
  std::vector<uint8_t> mask_done_;  // rows whose compute() ran this step
  double mask_seconds_ = -1;  // this step's mask time (-1: none)
  uint64_t mask_rows_ = 0;

  std::unique_ptr<ModelRunner> runner_;
  EngineConfig cfg_;
  KvBlockManager kv_;
  int max_positions_ = 0;
  Scheduler scheduler_;
  std::mutex mu_;  // guards incoming_, active_, metrics_
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  std::unordered_map<int64_t, Active> active_;
  EngineMetrics metrics_;
  int64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace osprey
