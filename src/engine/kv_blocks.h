// The engine's KV blocks, the one owner of every sequence's KV placement (CPU and GPU).
//
// One pool of fixed-size blocks that two groups of layers share: the full-attention layers, which
// keep every block of a sequence, and the sliding-window layers, which keep only the blocks their
// window can still read. A block belongs to one group at a time and holds block_size positions of
// every layer of that group (layer i of a group lives in storage row i), so both groups draw from
// the same memory. On the CPU the pool stores the keys and values itself; on the GPU it only
// places them (block b is the model's page b + 1; page 0 is the padding rows' dummy).
//
// Prefix caching: a block whose positions are all computed is registered under the hash of its
// tokens chained to the hash of the blocks before it (salted with the model), so a later sequence
// with the same token prefix takes the same blocks by reference instead of computing them. A
// registered block whose last holder lets go stays cached (least recently used first out) until its
// memory is needed. A hit covers whole blocks of full layers from position 0 and the sliding
// layers' blocks that the next position's window reads; the last prompt token is always computed.
// Entries keep their parent hash and tokens, so a hash collision is a miss, never a wrong hit.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "formats/gpt_oss_config.h"

namespace osprey {

struct KvLayout {
  std::vector<bool> layer_sliding;  // [num_layers]
  int window = 0;                   // the sliding layers' window (keys pos - window + 1 .. pos)
  int num_kv_heads = 0, head_dim = 0;
  int block_size = 16, num_blocks = 0;
  bool storage = true;              // the pool stores K/V (CPU); false: it only places them
  bool prefix_caching = true;
  uint64_t salt = 0;                // the model's identity, mixed into every block hash
};

// A model's layer groups, window and KV head shape (block size, count and the rest left as default).
KvLayout kv_layout_of(const GptOssConfig& c);
// Memory of one block of `block_size` positions: K and V of every layer of the larger group, at
// value_bytes per element (4 in the CPU pool, 2 for the GPU's BF16 pages).
double kv_block_bytes(const GptOssConfig& c, int block_size, size_t value_bytes);

enum KvGroup : int { kFullGroup = 0, kSlidingGroup = 1 };

class KvBlockManager;

// One sequence's blocks: a table per group (entry i: the block of positions [i bs, (i+1) bs),
// -1 when not held: a sliding block that left the window) and, for the CPU forward, the
// SequenceKv view of them.
class SeqKv final : public SequenceKv {
 public:
  explicit SeqKv(KvBlockManager& m) : m_(m) {}
  ~SeqKv() override;
  SeqKv(const SeqKv&) = delete;
  SeqKv& operator=(const SeqKv&) = delete;

  const std::vector<int32_t>& table(int group) const { return table_[group]; }
  int cached_positions() const { return cached_; }  // positions taken from the prefix cache

  int length() const override { return length_; }
  const float* key(int layer, int pos, int kv_head) const override;
  const float* value(int layer, int pos, int kv_head) const override;
  void append(int layer, const float* k, const float* v, int T) override;
  void advance(int T) override { length_ += T; }
  void set_length(int n) { length_ = n; }  // runners that keep K/V themselves (the GPU)

 private:
  friend class KvBlockManager;
  KvBlockManager& m_;
  std::vector<int32_t> table_[2];
  int length_ = 0, cached_ = 0;
  int hashed_ = 0;                // leading blocks whose chain hash is known (registered or taken)
  std::vector<uint64_t> hashes_;  // chain hash of blocks 0 .. hashed_ - 1
};

struct PrefixCacheStats {
  uint64_t queries = 0, hits = 0;  // prompt tokens looked up, and found
  uint64_t evictions = 0;          // cached blocks whose memory was taken for new ones
};

class KvBlockManager {
 public:
  explicit KvBlockManager(KvLayout layout);

  const KvLayout& layout() const { return L_; }
  int block_size() const { return L_.block_size; }
  int num_blocks() const { return L_.num_blocks; }
  bool has_sliding() const { return has_sliding_; }
  int blocks_for(int positions) const { return (positions + L_.block_size - 1) / L_.block_size; }
  // Blocks held by sequences (not free, not merely cached); what a new block can come from.
  int used_blocks() const { return L_.num_blocks - available_blocks(); }
  int available_blocks() const { return int(free_.size() + lru_.size()); }
  int cached_blocks() const { return int(lru_.size()); }  // registered, held by nobody
  double usage() const { return double(used_blocks()) / L_.num_blocks; }
  // The most blocks one sequence of `positions` positions holds at once while computing chunks
  // of up to `chunk` tokens (a request that needs more than the pool can never run).
  int peak_blocks(int positions, int chunk) const;
  const PrefixCacheStats& stats() const { return stats_; }

  // Takes the longest cached prefix of `tokens` (at most tokens.size() - 1 positions) for a
  // sequence that holds nothing yet; returns the positions it covers (its KV length becomes that).
  int match_prefix(SeqKv& s, std::span<const int32_t> tokens);
  // Makes room for `positions` positions in total (both groups); false, with nothing changed, if
  // the pool is short. Sliding blocks are reserved from the window of s.length() on.
  bool reserve(SeqKv& s, int positions);
  // Lets go of the sliding blocks that no position from `next` on can read.
  void release_window(SeqKv& s, int next);
  // Registers the blocks that positions [0, computed) now fill completely (tokens: the
  // sequence's tokens, at least `computed` of them).
  void commit(SeqKv& s, std::span<const int32_t> tokens, int computed);
  void release_all(SeqKv& s);  // finish, cancel, preemption: cached blocks stay cached
  // Rolls the sequence back to its first `positions` positions (speculative decoding's rejected
  // drafts): the blocks of both groups past them go back, its length is at most `positions`.
  void truncate(SeqKv& s, int positions);

  // CPU storage: row r of layer `layer` in block b.
  float* k_row(int layer, int block, int slot) { return k_[store_of_[layer]].data() + row_at(block, slot); }
  float* v_row(int layer, int block, int slot) { return v_[store_of_[layer]].data() + row_at(block, slot); }
  size_t row_floats() const { return row_; }
  int group_of(int layer) const { return L_.layer_sliding[layer] ? kSlidingGroup : kFullGroup; }

 private:
  struct Block {
    int refs = 0;
    int group = kFullGroup;
    bool registered = false;
    uint64_t hash = 0, parent = 0;
    std::list<int32_t>::iterator lru;
  };
  size_t row_at(int block, int slot) const { return (size_t(block) * L_.block_size + slot) * row_; }
  int32_t allocate(int group);  // -1 when nothing is free or evictable
  void take(int32_t b);         // one more holder of a block (out of the LRU if it was cached)
  void drop(int32_t b);         // one holder fewer
  uint64_t chain(uint64_t parent, std::span<const int32_t> block_tokens) const;
  // The cached block of `group` for this chain entry, or -1.
  int32_t lookup(int group, uint64_t hash, uint64_t parent, std::span<const int32_t> block_tokens) const;
  int first_window_block(int next) const;  // the first block a position >= next can read (sliding)

  KvLayout L_;
  bool has_sliding_ = false;
  size_t row_ = 0;
  std::vector<int> store_of_;  // layer -> its storage row within its group
  std::vector<std::vector<float>> k_, v_;
  std::vector<Block> blocks_;
  std::vector<std::vector<int32_t>> tokens_;  // registered blocks' tokens (verifies hits)
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // registered blocks nobody holds, least recently used first
  std::unordered_map<uint64_t, int32_t> cached_[2];
  PrefixCacheStats stats_;
};

}  // namespace osprey
