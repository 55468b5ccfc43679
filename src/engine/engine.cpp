#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"

#include <omp.h>

namespace osprey {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    default: return "none";
  }
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

std::vector<int32_t> ModelRunner::run_select(const StepPlan&, std::span<const TokenChoice>, const StepMasks*) {
  fail("this model runner does not select tokens itself");
}

std::vector<std::vector<float>> CpuModelRunner::run(const StepPlan& plan) {
  std::vector<SequenceChunk> chunks;
  for (const ScheduledChunk& c : plan.chunks)
    chunks.push_back({std::span(c.seq->tokens).subspan(c.start, c.count), c.seq->kv.get(), /*all_logits=*/c.draft > 0});
  std::vector<float> hidden;
  std::vector<std::vector<float>> logits = model_.forward_batch(chunks, keep_hidden_ ? &hidden : nullptr);
  std::vector<std::vector<float>> out;
  const size_t V = size_t(model_.config().vocab), H = size_t(model_.config().hidden);
  hidden_.clear();
  size_t row = 0;  // forward_batch's output row (every chunk's last, every row of a verify chunk)
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const size_t rows = c.draft > 0 ? size_t(c.count) : 1;
    if (c.sample) {
      for (size_t r = 0; r < rows; ++r) {  // a verify chunk: every position's row
        if (c.draft == 0) out.push_back(std::move(logits[i]));
        else out.emplace_back(logits[i].begin() + long(r * V), logits[i].begin() + long((r + 1) * V));
        if (keep_hidden_) hidden_.insert(hidden_.end(), hidden.begin() + long((row + r) * H), hidden.begin() + long((row + r + 1) * H));
      }
    }
    row += rows;
  }
  return out;
}

std::vector<float> ModelRunner::hidden(size_t) const { fail("this model runner does not keep hidden states"); }

std::vector<float> CpuModelRunner::hidden(size_t row) const {
  const size_t H = size_t(model_.config().hidden);
  if ((row + 1) * H > hidden_.size()) fail("hidden: row {} of {} kept", row, hidden_.size() / H);
  return std::vector<float>(hidden_.begin() + long(row * H), hidden_.begin() + long((row + 1) * H));
}

std::vector<int32_t> CpuModelRunner::run_select(const StepPlan& plan, std::span<const TokenChoice> choices,
                                                const StepMasks* masks) {
  if (!selects_) return ModelRunner::run_select(plan, choices, masks);
  std::vector<std::vector<float>> logits = run(plan);
  if (logits.size() != choices.size()) fail("run_select: {} choices for {} sampling chunks", choices.size(), logits.size());
  std::vector<size_t> all(logits.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (masks) masks->compute(all);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (const uint32_t* m = masks ? masks->row(i) : nullptr)
      apply_token_mask(std::span(m, (logits[i].size() + 31) / 32), logits[i]);
    ids[i] = choose_token(logits[i], choices[i]);
  }
  return ids;
}

bool RequestHandle::next(TokenEvent& ev) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !events_.empty() || done_; });
  if (events_.empty()) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

std::optional<bool> RequestHandle::next_for(TokenEvent& ev, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty() || done_; })) return std::nullopt;
  if (events_.empty()) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestHandle::push(TokenEvent ev) {
  {
    std::lock_guard lk(mu_);
    if (ev.finish != FinishReason::None) done_ = true;
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

namespace {
// The block pool: the runner's when its model keeps the KV (GPU memory decides), else enough
// for max_batch sequences of max_seq_len unless configured.
KvLayout kv_layout(const ModelRunner& r, const EngineConfig& c) {
  const GptOssConfig& m = r.config();
  KvLayout L = kv_layout_of(m);
  L.block_size = r.kv_block_size() > 0 ? r.kv_block_size() : c.kv_block_size;
  const int per_seq = (c.max_seq_len + L.block_size - 1) / L.block_size;
  L.num_blocks = r.kv_blocks() > 0 ? r.kv_blocks() : c.kv_blocks > 0 ? c.kv_blocks : c.max_batch * per_seq;
  L.storage = r.uses_host_kv();
  L.prefix_caching = c.prefix_caching;
  // The model's identity in every block hash (one engine serves one model; this keeps caches
  // that might be shared later apart).
  uint64_t salt = 0x6f737072657931ull;
  for (int64_t v : {int64_t(m.vocab), int64_t(m.hidden), int64_t(m.num_layers), int64_t(m.num_experts),
                    int64_t(m.num_heads), int64_t(m.num_kv_heads), int64_t(m.head_dim), int64_t(m.sliding_window)})
    salt = (salt ^ uint64_t(v)) * 0x100000001b3ull;
  L.salt = salt;
  return L;
}
}  // namespace

Engine::Engine(std::unique_ptr<ModelRunner> runner, EngineConfig cfg)
    : runner_(std::move(runner)),
      cfg_(cfg),
      kv_(kv_layout(*runner_, cfg)),
      scheduler_(kv_, {.max_batch = cfg.max_batch, .max_batched_tokens = cfg.max_batched_tokens}) {
  metrics_.kv_blocks_free = kv_.available_blocks();
  metrics_.kv_blocks_total = kv_.num_blocks();
  int lo = 0, hi = cfg_.max_seq_len;  // the largest n in [0, max_seq_len] whose peak fits
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (kv_.peak_blocks(mid, cfg_.max_batched_tokens) <= kv_.num_blocks()) lo = mid;
    else hi = mid - 1;
  }
  max_positions_ = lo;
  if (cfg_.proposer && cfg_.spec_k > 0) {
    if (cfg_.proposer->wants_hidden()) {
      if (!runner_->provides_hidden())
        fail("the {} proposer reads the target's hidden states, which this model runner does not give",
             cfg_.proposer->name());
      runner_->keep_hidden(true);
    }
    policy_ = std::make_unique<SpecPolicy>(cfg_.spec_k, cfg_.spec_adaptive);
    metrics_.spec_accepted_per_pos.assign(size_t(cfg_.spec_k), 0);
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& [id, a] : active_) a.handle->push({-1, FinishReason::Cancelled, "server shutting down"});
}

std::shared_ptr<RequestHandle> Engine::submit(GenerationRequest req) {
  const GptOssConfig& mc = runner_->config();
  if (req.prompt.empty()) fail("the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= mc.vocab) fail("prompt token {} is outside the vocabulary [0, {})", t, mc.vocab);
  if (req.max_tokens < 1) fail("max_tokens must be at least 1");
  const int total = int(req.prompt.size()) + req.max_tokens;
  if (int(req.prompt.size()) >= cfg_.max_seq_len)
    fail("the prompt has {} tokens; the context is {} (--max-seq-len)", req.prompt.size(), cfg_.max_seq_len);
  if (total > cfg_.max_seq_len) req.max_tokens = cfg_.max_seq_len - int(req.prompt.size());
  if (std::min(total, cfg_.max_seq_len) > max_positions_)
    fail("the request needs {} positions of KV (prompt and output); the KV cache holds {} for one sequence",
         std::min(total, cfg_.max_seq_len), max_positions_);
  req.sampling.validate();
  auto seq = std::make_unique<Sequence>();
  seq->tokens = req.prompt;
  seq->prompt_len = int(req.prompt.size());
  seq->max_tokens = req.max_tokens;
  seq->stop_tokens = req.stop_tokens;
  seq->sampler = std::make_unique<Sampler>(req.sampling);
  seq->constraint = req.constraint;
  if (req.logprobs > 20) fail("at most 20 top log probabilities per token");
  seq->logprobs = req.logprobs;
  seq->adjust = req.adjust;
  const bool host_logits = seq->needs_host_logits() || seq->constraint;
  if (req.speculative.value_or(false)) {
    if (!policy_) fail("speculative decoding is not enabled (start the server with --speculative)");
    if (host_logits)
      fail("speculative decoding does not combine with logprobs, logit_bias, penalties or constrained output "
           "(response_format, tools); leave it unset or false for this request");
  }
  seq->speculate = policy_ && !host_logits && req.speculative.value_or(cfg_.spec_default);
  auto handle = std::make_shared<RequestHandle>();
  {
    std::lock_guard lk(mu_);
    // Every request not finished (running, waiting, or not yet seen by the engine thread) counts:
    // the scheduler's own counts lag behind submissions (and belong to the engine thread), so a
    // burst that fits max_batch + max_queue was refused before the engine had started any of it.
    if (int(active_.size()) >= cfg_.max_batch + cfg_.max_queue) {
      ++metrics_.requests_rejected;
      throw QueueFull("the request queue is full");
    }
    seq->id = handle->id_ = next_id_++;
    active_[seq->id] = {handle, now_s()};
    ++metrics_.requests_total;
    metrics_.prompt_tokens += req.prompt.size();
    incoming_.push_back(std::move(seq));
  }
  cv_.notify_all();
  return handle;
}

EngineMetrics Engine::metrics() {
  std::lock_guard lk(mu_);
  return metrics_;
}

void Engine::release_state(int64_t id) {
  runner_->release(id);
  if (cfg_.proposer) cfg_.proposer->release(id);
}

void Engine::finish(int64_t id, FinishReason r, const std::string& error) {
  scheduler_.remove(id);  // frees the blocks now
  release_state(id);
  std::shared_ptr<RequestHandle> h;
  {
    std::lock_guard lk(mu_);
    auto it = active_.find(id);
    if (it == active_.end()) return;
    h = it->second.handle;
    if (r == FinishReason::Stop || r == FinishReason::Length) metrics_.e2e.observe(now_s() - it->second.submitted);
    active_.erase(it);
    ++metrics_.requests_finished;
    if (r == FinishReason::Cancelled) ++metrics_.requests_cancelled;
  }
  h->push({-1, r, error});
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !incoming_.empty() || scheduler_.running() + scheduler_.waiting() > 0; });
      if (stop_) return;
      for (auto& s : incoming_) scheduler_.add(std::move(s));
      incoming_.clear();
    }
    step();
  }
}

int Engine::propose() {
  if (!policy_) return 0;
  std::vector<Sequence*> seqs;
  scheduler_.for_each_decoding([&](Sequence& s) { seqs.push_back(&s); });
  if (seqs.empty()) return 0;
  const int k = policy_->choose(int(seqs.size()));
  if (k == 0) return 0;
  const double t0 = now_s();
  std::vector<DraftRequest> reqs;
  std::vector<Sequence*> asked;
  for (Sequence* s : seqs) {
    // Drafts never run past max_tokens: at most k, and one token less than the request has left.
    const int room = std::min(k, s->max_tokens - s->generated() - 1);
    if (!s->speculate || room < 1) continue;
    reqs.push_back({s->id, s->tokens, room, s->hidden});
    asked.push_back(s);
  }
  if (reqs.empty()) return 0;
  std::vector<std::vector<int32_t>> drafts;
  try {
    drafts = cfg_.proposer->propose(reqs);
  } catch (const std::exception& e) {  // a proposer's failure costs speed, never a request
    log_info("speculative proposer failed, decoding without drafts this step: {}", e.what());
    return 0;
  }
  const int vocab = runner_->config().vocab;
  for (size_t i = 0; i < asked.size() && i < drafts.size(); ++i) {
    std::vector<int32_t>& d = drafts[i];
    if (int(d.size()) > reqs[i].k) d.resize(size_t(reqs[i].k));
    // A draft model with a larger vocabulary must not hand the target ids it does not have.
    auto bad = std::find_if(d.begin(), d.end(), [&](int32_t t) { return t < 0 || t >= vocab; });
    d.erase(bad, d.end());
    asked[i]->draft = std::move(d);
  }
  std::lock_guard lk(mu_);
  metrics_.spec_propose_seconds += now_s() - t0;
  return k;
}

void Engine::step() {
  // Cancellations first: their blocks go back before this step is planned.
  std::vector<int64_t> cancelled;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, a] : active_)
      if (a.handle->cancelled()) cancelled.push_back(id);
  }
  for (int64_t id : cancelled) finish(id, FinishReason::Cancelled);
  if (!cancelled.empty()) update_gauges();

  const double step_start = now_s();
  const int k_step = propose();
  StepPlan plan = scheduler_.schedule();
  for (int64_t id : plan.preempted) release_state(id);  // recomputed from the start later
  if (plan.empty()) {
    update_gauges();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  // The runner selects the tokens when it can: no sampling sequence needs its logits on the host
  // (log probabilities, penalties, logit_bias); constraints go to it as token masks. The choices
  // carry each sequence's draw, taken in the order sample() would take it; a verify chunk's rows
  // take the draws of the next positions without consuming them (only emitted tokens do).
  const bool runner_selects =
      runner_->selects_tokens() && std::none_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) {
        return c.sample && c.seq->needs_host_logits();
      });
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> selected;
  size_t sampled_rows = 0;
  for (const ScheduledChunk& c : plan.chunks) sampled_rows += size_t(c.sampled_rows());
  try {
    if (runner_selects) {
      std::vector<TokenChoice> choices;
      std::vector<Sequence*> rows;
      bool constrained = false;
      for (const ScheduledChunk& c : plan.chunks) {
        if (!c.sample) continue;
        if (c.draft > 0) {
          for (const TokenChoice& ch : c.seq->sampler->peek_choices(c.sampled_rows()))
            choices.push_back(ch), rows.push_back(c.seq);
          continue;
        }
        choices.push_back(c.seq->sampler->next_choice());
        rows.push_back(c.seq);
        constrained |= c.seq->constraint != nullptr;
      }
      StepMasks masks;
      if (constrained) masks = step_masks(rows);
      selected = runner_->run_select(plan, choices, constrained ? &masks : nullptr);
      for (size_t i = 0; constrained && i < rows.size(); ++i)
        if (rows[i]->constraint && !mask_done_[i]) fail("the model runner selected tokens without computing their masks");
      if (constrained) mask_rows_ = uint64_t(std::count(mask_has_.begin(), mask_has_.end(), uint8_t(1)));
      if (selected.size() != choices.size())
        fail("the model runner selected {} tokens for {} sampling rows", selected.size(), choices.size());
    } else {
      logits = runner_->run(plan);
      if (logits.size() != sampled_rows)
        fail("the model runner gave {} rows of logits for {} sampling rows", logits.size(), sampled_rows);
    }
  } catch (const std::exception& e) {
    log_info("engine step failed: {}", e.what());
    for (auto& c : plan.chunks) finish(c.seq->id, FinishReason::Error, e.what());
    return;
  }

  // Each sampling chunk's tokens: one, or for a verify chunk the target's token at every
  // position up to the first that disagrees with the draft (accepted drafts, then the target's own).
  struct Emitted {
    Sequence* seq;
    std::vector<int32_t> tokens;
    std::optional<TokenLogprobs> logprobs;
    FinishReason finish = FinishReason::None;
    std::string error;  // a constraint threw: the request ends with it
  };
  std::vector<Emitted> emitted;
  const bool heads = policy_ && cfg_.proposer->wants_hidden();
  size_t li = 0;
  for (ScheduledChunk& c : plan.chunks) {
    if (!c.sample) continue;
    Sequence& s = *c.seq;
    Emitted e{&s, {}, std::nullopt, FinishReason::None, {}};
    const int rows = c.sampled_rows();
    std::vector<int32_t> y(static_cast<size_t>(rows), -1);
    if (runner_selects) {
      if (li < mask_error_.size() && !mask_error_[li].empty()) e.error = mask_error_[li];
      std::copy(selected.begin() + long(li), selected.begin() + long(li) + rows, y.begin());
    } else if (c.draft > 0) {
      const std::vector<TokenChoice> ch = s.sampler->peek_choices(rows);
      for (int r = 0; r < rows; ++r) y[size_t(r)] = choose_token(logits[li + size_t(r)], ch[size_t(r)]);
    } else {
      std::vector<float>& lg = logits[li];
      const std::span<const int32_t> gen = std::span(s.tokens).subspan(size_t(s.prompt_len));
      if (!s.adjust.empty()) s.adjust.apply(gen, lg);
      if (s.constraint) {
        std::vector<uint32_t> mask((lg.size() + 31) / 32, ~0u);
        try {
          if (s.constraint->fill_mask(gen, mask)) apply_token_mask(mask, lg);
        } catch (const std::exception& ex) {
          e.error = ex.what();
        }
      }
      if (e.error.empty()) {
        y[0] = s.sampler->sample(lg);
        if (s.logprobs >= 0) e.logprobs = token_logprobs(lg, s.sampler->params().temperature, y[0], s.logprobs);
      }
    }
    const size_t row0 = li;
    li += size_t(rows);
    // The drafts occupy the chunk's last c.draft tokens; the known part ends before them.
    const size_t known = size_t(c.start + c.count - c.draft);
    int accepted = 0;
    while (accepted < c.draft && y[size_t(accepted)] == s.tokens[known + size_t(accepted)]) ++accepted;
    s.tokens.resize(known);
    if (e.error.empty())
      for (int r = 0; r <= accepted; ++r) {
        const int32_t tok = y[size_t(r)];
        s.tokens.push_back(tok), e.tokens.push_back(tok);
        if (std::count(s.stop_tokens.begin(), s.stop_tokens.end(), tok)) e.finish = FinishReason::Stop;
        else if (s.generated() >= s.max_tokens) e.finish = FinishReason::Length;
        if (e.finish != FinishReason::None) break;
      }
    if (heads && s.speculate && !e.tokens.empty()) {
      try {
        s.hidden = runner_->hidden(row0 + e.tokens.size() - 1);
      } catch (const std::exception& ex) {  // no hidden state: the head drafts nothing for it
        s.hidden.clear();
        log_info("hidden state of request {}: {}", s.id, ex.what());
      }
    }
    if (c.draft > 0) {
      s.sampler->skip(int(e.tokens.size()));
      c.accepted = std::max(0, int(e.tokens.size()) - 1);
      std::lock_guard lk(mu_);
      ++metrics_.spec_drafts;
      metrics_.spec_draft_tokens += uint64_t(c.draft);
      metrics_.spec_accepted_tokens += uint64_t(accepted);
      metrics_.spec_emitted += e.tokens.size();
      for (int r = 0; r < accepted && r < int(metrics_.spec_accepted_per_pos.size()); ++r)
        ++metrics_.spec_accepted_per_pos[size_t(r)];
    }
    emitted.push_back(std::move(e));
  }
  scheduler_.commit(plan);  // positions computed (drafts up to the accepted); completed blocks cached

  const double t = now_s();
  std::vector<std::pair<int64_t, FinishReason>> done;
  std::vector<std::pair<int64_t, std::string>> failed;
  for (Emitted& e : emitted) {
    Sequence& s = *e.seq;
    if (!e.error.empty()) {
      failed.push_back({s.id, e.error});
      continue;
    }
    std::shared_ptr<RequestHandle> h;
    {
      std::lock_guard lk(mu_);
      Active& a = active_[s.id];
      h = a.handle;
      const int first = s.generated() - int(e.tokens.size()) + 1;  // the 1-based index of the first of them
      for (size_t i = 0; i < e.tokens.size(); ++i) {
        // Tokens that arrive together share the interval since the last one.
        if (first + int(i) == 1) metrics_.ttft.observe(t - a.submitted);
        else metrics_.itl.observe((t - a.last_token) / double(e.tokens.size()));
      }
      a.last_token = t;
      metrics_.generated_tokens += e.tokens.size();
    }
    for (size_t i = 0; i < e.tokens.size(); ++i)
      h->push({e.tokens[i], FinishReason::None, {}, i + 1 == e.tokens.size() ? std::move(e.logprobs) : std::nullopt});
    if (e.finish != FinishReason::None) done.push_back({s.id, e.finish});
  }
  // A decode-only step measures its draft length's rate for the speculation policy.
  const bool decode_only = std::all_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) {
    return c.sample && c.count == 1 + c.draft && c.start > 0;
  });
  const double seconds = now_s() - step_start;
  if (policy_ && decode_only) {
    size_t tokens = 0;
    for (const Emitted& e : emitted) tokens += e.tokens.size();
    policy_->record(int(plan.chunks.size()), k_step, seconds, double(tokens) / double(plan.chunks.size()));
  }
  {
    std::lock_guard lk(mu_);
    ++metrics_.steps;
    if (std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const ScheduledChunk& c) { return c.draft > 0; }))
      ++metrics_.spec_steps;
    metrics_.step.observe(seconds);
    if (mask_seconds_ >= 0) metrics_.mask.observe(mask_seconds_), metrics_.masked_rows += mask_rows_;
    mask_seconds_ = -1, mask_rows_ = 0;
    metrics_.preemptions += plan.preempted.size();
  }
  // Finished requests last: whoever waits on them sees this step counted.
  for (auto& [id, r] : done) finish(id, r);
  for (auto& [id, why] : failed) finish(id, FinishReason::Error, "token constraint failed: " + why);
  mask_error_.clear();
  update_gauges();
}

StepMasks Engine::step_masks(const std::vector<Sequence*>& rows) {
  const size_t words = (size_t(runner_->config().vocab) + 31) / 32;
  mask_bufs_.resize(std::max(mask_bufs_.size(), rows.size()));
  mask_has_.assign(rows.size(), 0);
  mask_done_.assign(rows.size(), 0);
  mask_error_.assign(rows.size(), std::string());
  mask_seconds_ = 0, mask_rows_ = 0;
  StepMasks m;
  m.compute = [this, rows, words](std::span<const size_t> which) {
    const double t0 = now_s();
    // Rows in parallel: each constraint is its own sequence's (mask caches are shared and locked).
    // Half the cores at most: the HTTP threads stream the step's tokens meanwhile.
    const int threads = std::max(1, std::min<int>(int(which.size()), omp_get_num_procs() / 2));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t k = 0; k < which.size(); ++k) {
      const size_t i = which[k];
      if (i >= rows.size() || mask_done_[i]) continue;
      mask_done_[i] = 1;
      Sequence& s = *rows[i];
      if (!s.constraint) continue;
      std::vector<uint32_t>& buf = mask_bufs_[i];
      buf.assign(words, ~0u);
      try {
        mask_has_[i] = s.constraint->fill_mask(std::span(s.tokens).subspan(size_t(s.prompt_len)), buf);
      } catch (const std::exception& e) {
        mask_has_[i] = 0;
        mask_error_[i] = e.what();  // the request ends with this error after the step
      }
    }
    mask_seconds_ += now_s() - t0;
  };
  m.row = [this](size_t i) -> const uint32_t* { return i < mask_has_.size() && mask_has_[i] ? mask_bufs_[i].data() : nullptr; };
  return m;
}

void Engine::update_gauges() {
  std::lock_guard lk(mu_);
  metrics_.queue_depth = scheduler_.waiting() + int(incoming_.size());
  metrics_.running = scheduler_.running();
  metrics_.kv_blocks_used = kv_.used_blocks();
  metrics_.kv_blocks_free = kv_.available_blocks();
  metrics_.kv_blocks_cached = kv_.cached_blocks();
  metrics_.kv_usage = kv_.usage();
  metrics_.prefix = kv_.stats();
}

}  // namespace osprey
