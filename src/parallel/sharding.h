// How the GPUs of one node split gpt-oss (issue 17): which rank holds which heads, rows, experts
// and vocabulary rows, and each rank's slice of a layer's weights, cut from the published
// checkpoint (nothing else is read).
//
// Attention and the dense layers: tensor parallelism inside data-parallel groups, world = tp x dp.
// A rank of a tp group holds heads/tp query heads (qkv column-parallel, the sinks with them) and
// the KV heads they read: kv_heads/tp of them when kv_heads >= tp, else the one KV head its query
// heads share (replicated across tp / kv_heads ranks). The output projection is row-parallel (the
// columns of its query heads); tp rank 0 adds its bias before the all-reduce. The unembedding is
// vocabulary-parallel (rows split across the tp group; the argmax or sampling runs over the
// gathered row maxima), the embedding replicated.
//
// Experts: world = ep x moe_tp. Rank r holds experts [e0, e1) of ep rank r / moe_tp, and of each
// the intermediate range of moe_tp rank r % moe_tp: gate/up rows 2i and 2i + 1 (interleaved) and
// down-projection columns i for i in the range; moe_tp rank 0 adds the down bias. Dispatch picks
// the (token, expert) pairs of the held experts; combine sums the weighted outputs over all ranks.
// The router is replicated.
//
// Cuts fall on the quantization blocks the weights are stored in (`align`: 32 for MXFP4 columns,
// 128 for FP8 128x128 blocks), unevenly where a dimension is not a multiple of align x parts
// (2,880 = 90 blocks of 32: four moe_tp ranks get 23, 23, 22 and 22 blocks).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "formats/gpt_oss_config.h"

namespace osprey {

struct GptOssLayerWeights;

struct ParallelLayout {
  int tp = 1, dp = 1, ep = 1;
  int world() const { return tp * dp; }
  int moe_tp() const { return world() / ep; }
  std::string name() const;  // "tp2 dp1 ep2"
};

struct Range {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Part p of `parts` of n items cut on multiples of align (the last block may be partial); the
// parts differ by at most one block.
Range aligned_part(int n, int parts, int p, int align);

struct RankShard {
  int rank = 0, tp_rank = 0, dp_rank = 0, ep_rank = 0, moe_tp_rank = 0;
  Range q_heads, kv_heads, experts, intermediate, vocab;
  bool adds_o_bias = false, adds_down_bias = false;
};

// Every rank's share; throws Error naming the constraint a layout breaks (heads % tp, the KV heads'
// grouping, experts % ep, ep dividing the world, intermediate blocks for moe_tp).
std::vector<RankShard> plan_shards(const GptOssConfig& c, const ParallelLayout& L, int align = 32);

// A rank's slice of one layer, as host copies in the checkpoint's formats.
struct LayerShard {
  std::vector<bf16> q, k, v;                  // [rows][hidden]: the held heads' rows
  std::vector<bf16> q_bias, k_bias, v_bias, sinks;
  std::vector<bf16> o;                        // [hidden][held q heads x head_dim]: row-parallel
  std::vector<bf16> o_bias;                   // [hidden] on the rank that adds it, else empty
  // Experts [held][rows][cols / 32][16] blocks and [held][rows][cols / 32] scales, as stored.
  std::vector<uint8_t> mlp1_blocks, mlp1_scales, mlp2_blocks, mlp2_scales;
  std::vector<bf16> mlp1_bias;                // [held][2 x intermediate range]
  std::vector<bf16> mlp2_bias;                // [held][hidden] on the rank that adds it, else empty
  int mlp1_rows = 0, mlp2_cols = 0;           // per held expert: 2 x range, range
};
LayerShard shard_layer(const GptOssLayerWeights& w, const GptOssConfig& c, const RankShard& s);

}  // namespace osprey
