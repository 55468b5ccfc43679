// The ranks of one CPU layout (sharded_cpu.h) as threads of this process, run together on every
// forward (each rank must enter the same collectives in the same order): one sequence through a
// tensor- and expert-parallel gpt-oss, behind `generate --tp N --ep M` on the CPU.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/sharded_cpu.h"
#include "parallel/sharding.h"

namespace osprey {

class ShardedCpuGroup {
 public:
  // Throws Error (before any rank runs) when the layout does not fit the model (plan_shards' and
  // ShardedCpuRank's checks).
  ShardedCpuGroup(const GptOssWeights& w, const ParallelLayout& L);
  ~ShardedCpuGroup();

  // The tokens appended to the sequence on every rank at once; rank 0's logits (every rank's are
  // the same bits): [vocab] of the last token, or [T][vocab] of every one. An Error of any rank is
  // rethrown after all have returned.
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits);
  // An empty sequence again (every rank's KV cache).
  void reset();
  int length() const;
  const ParallelLayout& layout() const { return layout_; }

 private:
  const GptOssWeights& w_;
  ParallelLayout layout_;
  std::unique_ptr<LocalGroup> group_;
  std::vector<std::unique_ptr<ShardedCpuRank>> ranks_;
};

}  // namespace osprey
