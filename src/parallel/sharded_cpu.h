// One rank of a tensor- and expert-parallel gpt-oss on the CPU (issue 17): the rank's slice of
// every layer (sharding.h), the cache of its KV heads, and a forward whose partial results meet
// through a Communicator (communicator.h).
//
// The layout's collectives per layer, as on the GPUs:
// - the row-parallel output projection's partial sums are all-reduced over the tp group (tp rank
//   0 adds the bias);
// - every rank routes every token (the router is replicated) and runs its experts' slices (its
//   intermediate range) on the tokens that chose them: the dispatch;
// - the weighted partial outputs are all-reduced over the world: the combine (moe_tp rank 0 adds
//   the down bias);
// - the vocabulary-parallel unembedding's rows are all-gathered.
//
// Every rank returns the same logits. They equal the unsharded CPU forward (GptOssCpuModel, fp32)
// up to the order of those sums. Data parallelism (dp > 1) runs independent attention replicas
// over other requests and is not a forward of one sequence: this class takes dp 1.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_cache.h"
#include "kernels/cpu/ops.h"
#include "parallel/communicator.h"
#include "parallel/sharding.h"

namespace osprey {

struct GptOssWeights;

class ShardedCpuRank {
 public:
  // comm: this rank's communicator, of size L.world(); the weights stay mapped (the shards copy
  // only this rank's slices).
  ShardedCpuRank(const GptOssWeights& w, const ParallelLayout& L, Communicator& comm);

  // The next tokens of the sequence: logits [vocab] of the last one, or [T][vocab] of every one.
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits);
  int length() const { return cache_.length(); }
  void reset();  // an empty sequence again (this rank's KV cache)
  const RankShard& shard() const { return shard_; }

 private:
  void attention(int layer, float* x, const int32_t* pos, int T);
  void moe(int layer, float* x, int T);

  const GptOssWeights& w_;
  Communicator& comm_;
  RankShard shard_;
  std::vector<LayerShard> layers_;
  cpu::RopeTable rope_;
  KvCache cache_;
};

}  // namespace osprey
