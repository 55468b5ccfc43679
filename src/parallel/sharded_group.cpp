#include "parallel/sharded_group.h"

#include <exception>
#include <thread>

#include "core/error.h"
#include "model/gpt_oss_forward.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

ShardedCpuGroup::ShardedCpuGroup(const GptOssWeights& w, const ParallelLayout& L) : w_(w), layout_(L) {
  plan_shards(w.config, L);  // every constraint the layout breaks, named, before any rank is built
  group_ = std::make_unique<LocalGroup>(L.world());
  for (int r = 0; r < L.world(); ++r) ranks_.push_back(std::make_unique<ShardedCpuRank>(w, L, group_->rank(r)));
}

ShardedCpuGroup::~ShardedCpuGroup() = default;

std::vector<float> ShardedCpuGroup::forward(std::span<const int32_t> tokens, bool all_logits) {
  // The checks a rank would make, here: a rank that threw alone would leave the others waiting
  // in a collective.
  if (tokens.empty()) fail("forward: no tokens");
  check_token_ids(tokens, w_.config);
  const int n = int(ranks_.size());
  std::vector<std::vector<float>> logits(static_cast<size_t>(n));
  std::vector<std::exception_ptr> failed(static_cast<size_t>(n));
  auto run = [&](int r) {
    try {
      logits[size_t(r)] = ranks_[size_t(r)]->forward(tokens, all_logits);
    } catch (...) {
      failed[size_t(r)] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> others;
    for (int r = 1; r < n; ++r) others.emplace_back(run, r);
    run(0);
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  return std::move(logits[0]);
}

void ShardedCpuGroup::reset() {
  for (auto& r : ranks_) r->reset();
}

int ShardedCpuGroup::length() const { return ranks_.front()->length(); }

}  // namespace osprey
