// Paged KV cache: one pool of fixed-size blocks shared by all sequences, a free list, and per
// sequence a block table. Blocks hold every layer's keys and values for block_size positions.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/kv_cache.h"

namespace osprey {

class KvBlockPool {
 public:
  // storage = false: blocks are only counted (a runner whose model keeps the KV elsewhere, the GPU).
  KvBlockPool(int num_layers, int num_kv_heads, int head_dim, int block_size, int num_blocks, bool storage = true);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int free_blocks() const { return int(free_.size()); }
  int used_blocks() const { return num_blocks_ - free_blocks(); }
  int blocks_for(int positions) const { return (positions + block_size_ - 1) / block_size_; }

  int allocate();         // -1 when none is free
  void release(int block);

  float* k_row(int layer, int block, int slot) { return k_[layer].data() + (size_t(block) * block_size_ + slot) * row_; }
  float* v_row(int layer, int block, int slot) { return v_[layer].data() + (size_t(block) * block_size_ + slot) * row_; }
  size_t row_floats() const { return row_; }
  int head_dim() const { return head_dim_; }

 private:
  int block_size_, num_blocks_, head_dim_;
  size_t row_;
  std::vector<std::vector<float>> k_, v_;  // [layer][block][slot][kv_heads][head_dim]
  std::vector<int> free_;
};

// One sequence's view: positions map to (block_table[pos / block_size], pos % block_size).
class PagedKv final : public SequenceKv {
 public:
  explicit PagedKv(KvBlockPool& pool) : pool_(pool) {}
  ~PagedKv() override { release_all(); }
  PagedKv(const PagedKv&) = delete;
  PagedKv& operator=(const PagedKv&) = delete;

  // Makes room for `positions` positions in total; false (nothing changed) if the pool is short.
  bool reserve(int positions);
  void release_all();  // frees every block at once (finish, cancel, preemption)
  int blocks() const { return int(table_.size()); }

  int length() const override { return length_; }
  const float* key(int layer, int pos, int kv_head) const override;
  const float* value(int layer, int pos, int kv_head) const override;
  void append(int layer, const float* k, const float* v, int T) override;
  void advance(int T) override { length_ += T; }

 private:
  KvBlockPool& pool_;
  std::vector<int> table_;
  int length_ = 0;
};

}  // namespace osprey
