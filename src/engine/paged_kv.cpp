#include "engine/paged_kv.h"

#include <cstring>

#include "core/error.h"

namespace osprey {

KvBlockPool::KvBlockPool(int num_layers, int num_kv_heads, int head_dim, int block_size, int num_blocks, bool storage)
    : block_size_(block_size), num_blocks_(num_blocks), head_dim_(head_dim), row_(size_t(num_kv_heads) * head_dim) {
  if (block_size <= 0 || num_blocks <= 0) fail("KV pool needs positive block size and count");
  k_.resize(num_layers);
  v_.resize(num_layers);
  for (int l = 0; l < num_layers && storage; ++l) {
    k_[l].resize(size_t(num_blocks) * block_size * row_);
    v_[l].resize(size_t(num_blocks) * block_size * row_);
  }
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int KvBlockPool::allocate() {
  if (free_.empty()) return -1;
  int b = free_.back();
  free_.pop_back();
  return b;
}

void KvBlockPool::release(int block) { free_.push_back(block); }

bool PagedKv::reserve(int positions) {
  const int need = pool_.blocks_for(positions) - int(table_.size());
  if (need <= 0) return true;
  if (need > pool_.free_blocks()) return false;
  for (int i = 0; i < need; ++i) table_.push_back(pool_.allocate());
  return true;
}

void PagedKv::release_all() {
  for (int b : table_) pool_.release(b);
  table_.clear();
  length_ = 0;
}

const float* PagedKv::key(int layer, int pos, int kv_head) const {
  const int bs = pool_.block_size();
  return pool_.k_row(layer, table_[pos / bs], pos % bs) + size_t(kv_head) * pool_.head_dim();
}

const float* PagedKv::value(int layer, int pos, int kv_head) const {
  const int bs = pool_.block_size();
  return pool_.v_row(layer, table_[pos / bs], pos % bs) + size_t(kv_head) * pool_.head_dim();
}

void PagedKv::append(int layer, const float* k, const float* v, int T) {
  const int bs = pool_.block_size();
  if (pool_.blocks_for(length_ + T) > int(table_.size())) fail("PagedKv: append beyond the reserved blocks");
  const size_t row = pool_.row_floats();
  for (int t = 0; t < T; ++t) {
    const int pos = length_ + t;
    std::memcpy(pool_.k_row(layer, table_[pos / bs], pos % bs), k + size_t(t) * row, row * sizeof(float));
    std::memcpy(pool_.v_row(layer, table_[pos / bs], pos % bs), v + size_t(t) * row, row * sizeof(float));
  }
}

}  // namespace osprey
