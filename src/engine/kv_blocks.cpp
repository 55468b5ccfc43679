#include "engine/kv_blocks.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace osprey {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 of the running hash and one value
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

KvLayout kv_layout_of(const GptOssConfig& c) {
  KvLayout L;
  L.layer_sliding = c.layer_is_sliding;
  L.window = c.sliding_window;
  L.num_kv_heads = c.num_kv_heads, L.head_dim = c.head_dim;
  return L;
}

double kv_block_bytes(const GptOssConfig& c, int block_size, size_t value_bytes) {
  int per_group[2] = {0, 0};
  for (bool sl : c.layer_is_sliding) ++per_group[sl ? 1 : 0];
  return 2.0 * std::max(per_group[0], per_group[1]) * block_size * c.kv_dim() * double(value_bytes);
}

KvBlockManager::KvBlockManager(KvLayout layout) : L_(std::move(layout)) {
  if (L_.block_size <= 0 || L_.num_blocks <= 0) fail("the KV pool needs a positive block size and block count");
  int counts[2] = {0, 0};
  for (bool s : L_.layer_sliding) store_of_.push_back(counts[s ? 1 : 0]++);
  has_sliding_ = counts[1] > 0;
  if (has_sliding_ && L_.window <= 0) fail("sliding layers need a positive window");
  row_ = size_t(L_.num_kv_heads) * L_.head_dim;
  const int rows = std::max(counts[0], counts[1]);
  if (L_.storage) {
    k_.resize(rows), v_.resize(rows);
    for (int r = 0; r < rows; ++r) {
      k_[r].resize(size_t(L_.num_blocks) * L_.block_size * row_);
      v_[r].resize(size_t(L_.num_blocks) * L_.block_size * row_);
    }
  }
  blocks_.resize(L_.num_blocks);
  tokens_.resize(L_.num_blocks);
  for (int b = L_.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int KvBlockManager::first_window_block(int next) const {
  return std::max(0, next - L_.window + 1) / L_.block_size;
}

int KvBlockManager::peak_blocks(int positions, int chunk) const {
  const int full = blocks_for(positions);
  if (!has_sliding_) return full;
  // The widest span a chunk reads in the sliding layers: its window back and its own tokens.
  return full + std::min(full, blocks_for(L_.window - 1 + std::min(chunk, positions)) + 1);
}

uint64_t KvBlockManager::chain(uint64_t parent, std::span<const int32_t> t) const {
  uint64_t h = mix(parent, uint64_t(t.size()));
  for (int32_t x : t) h = mix(h, uint32_t(x));
  return h;
}

int32_t KvBlockManager::lookup(int group, uint64_t hash, uint64_t parent, std::span<const int32_t> t) const {
  auto it = cached_[group].find(hash);
  if (it == cached_[group].end()) return -1;
  const Block& b = blocks_[it->second];
  const std::vector<int32_t>& stored = tokens_[it->second];
  if (b.parent != parent || !std::equal(stored.begin(), stored.end(), t.begin(), t.end())) return -1;
  return it->second;
}

int32_t KvBlockManager::allocate(int group) {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    Block& old = blocks_[b];
    cached_[old.group].erase(old.hash);
    old.registered = false;
    tokens_[b].clear();
    ++stats_.evictions;
  } else {
    return -1;
  }
  Block& nb = blocks_[b];
  nb.refs = 1, nb.group = group, nb.registered = false, nb.hash = nb.parent = 0;
  return b;
}

void KvBlockManager::take(int32_t b) {
  Block& k = blocks_[b];
  if (k.refs++ == 0) lru_.erase(k.lru);  // only registered blocks are held by nobody and not free
}

void KvBlockManager::drop(int32_t b) {
  Block& k = blocks_[b];
  if (k.refs <= 0) fail("KV block {} released more often than taken", b);
  if (--k.refs > 0) return;
  if (k.registered) k.lru = lru_.insert(lru_.end(), b);
  else free_.push_back(b);
}

int KvBlockManager::match_prefix(SeqKv& s, std::span<const int32_t> tokens) {
  if (!s.table_[0].empty() || s.length_ != 0) fail("match_prefix: the sequence already holds KV");
  stats_.queries += tokens.size();
  if (!L_.prefix_caching || tokens.size() < 2) return 0;
  const int bs = L_.block_size;
  const int max_blocks = int(tokens.size() - 1) / bs;
  std::vector<uint64_t> hashes;
  std::vector<int32_t> full;
  int best = 0;
  uint64_t parent = L_.salt;
  for (int i = 0; i < max_blocks; ++i) {
    const auto t = tokens.subspan(size_t(i) * bs, size_t(bs));
    const uint64_t h = chain(parent, t);
    const int32_t b = lookup(kFullGroup, h, parent, t);
    if (b < 0) break;
    hashes.push_back(h), full.push_back(b);
    parent = h;
    // A hit of i + 1 blocks also needs the sliding blocks the next position's window reads.
    bool window_ok = true;
    for (int j = first_window_block((i + 1) * bs); has_sliding_ && j <= i && window_ok; ++j)
      window_ok = lookup(kSlidingGroup, hashes[j], j ? hashes[j - 1] : L_.salt,
                         tokens.subspan(size_t(j) * bs, size_t(bs))) >= 0;
    if (window_ok) best = i + 1;
  }
  if (best == 0) return 0;
  for (int i = 0; i < best; ++i) {
    take(full[i]);
    s.table_[kFullGroup].push_back(full[i]);
  }
  if (has_sliding_) {
    const int first = first_window_block(best * bs);
    for (int i = 0; i < best; ++i) {
      int32_t b = -1;
      if (i >= first) {
        b = lookup(kSlidingGroup, hashes[i], i ? hashes[i - 1] : L_.salt, tokens.subspan(size_t(i) * bs, size_t(bs)));
        take(b);
      }
      s.table_[kSlidingGroup].push_back(b);
    }
  }
  hashes.resize(best);
  s.hashes_ = std::move(hashes);
  s.hashed_ = best;
  s.length_ = s.cached_ = best * bs;
  stats_.hits += uint64_t(best) * bs;
  return s.length_;
}

bool KvBlockManager::reserve(SeqKv& s, int positions) {
  const int want = blocks_for(positions);
  int need = std::max(0, want - int(s.table_[kFullGroup].size()));
  const int first = has_sliding_ ? first_window_block(s.length_) : 0;
  if (has_sliding_)
    for (int i = first; i < want; ++i) need += i >= int(s.table_[kSlidingGroup].size()) || s.table_[kSlidingGroup][i] < 0;
  if (need > available_blocks()) return false;
  while (int(s.table_[kFullGroup].size()) < want) s.table_[kFullGroup].push_back(allocate(kFullGroup));
  if (has_sliding_) {
    std::vector<int32_t>& t = s.table_[kSlidingGroup];
    if (int(t.size()) < want) t.resize(size_t(want), -1);
    for (int i = first; i < want; ++i)
      if (t[i] < 0) t[i] = allocate(kSlidingGroup);
  }
  return true;
}

void KvBlockManager::release_window(SeqKv& s, int next) {
  if (!has_sliding_) return;
  std::vector<int32_t>& t = s.table_[kSlidingGroup];
  const int first = std::min<int>(first_window_block(next), int(t.size()));
  for (int i = 0; i < first; ++i)
    if (t[i] >= 0) drop(t[i]), t[i] = -1;
}

void KvBlockManager::commit(SeqKv& s, std::span<const int32_t> tokens, int computed) {
  if (!L_.prefix_caching) return;
  const int bs = L_.block_size;
  const int complete = std::min<int>(computed, int(tokens.size())) / bs;
  for (int i = s.hashed_; i < complete && i < int(s.table_[kFullGroup].size()); ++i) {
    const uint64_t parent = i ? s.hashes_[i - 1] : L_.salt;
    const auto t = tokens.subspan(size_t(i) * bs, size_t(bs));
    const uint64_t h = chain(parent, t);
    s.hashes_.push_back(h);
    for (int g = 0; g < (has_sliding_ ? 2 : 1); ++g) {
      if (i >= int(s.table_[g].size())) continue;
      const int32_t b = s.table_[g][i];
      if (b < 0 || blocks_[b].registered || cached_[g].count(h)) continue;  // a twin is cached already
      Block& k = blocks_[b];
      k.registered = true, k.hash = h, k.parent = parent;
      tokens_[b].assign(t.begin(), t.end());
      cached_[g][h] = b;
    }
    s.hashed_ = i + 1;
  }
}

void KvBlockManager::release_all(SeqKv& s) {
  // Later blocks first into the LRU: a prefix's first blocks are the last to go.
  for (auto& t : s.table_) {
    for (auto it = t.rbegin(); it != t.rend(); ++it)
      if (*it >= 0) drop(*it);
    t.clear();
  }
  s.hashes_.clear();
  s.hashed_ = s.length_ = s.cached_ = 0;
}

void KvBlockManager::truncate(SeqKv& s, int positions) {
  if (positions < 0) fail("truncate: negative length");
  const int keep = blocks_for(positions);
  for (auto& t : s.table_)
    while (int(t.size()) > keep) {
      if (t.back() >= 0) drop(t.back());
      t.pop_back();
    }
  const int whole = positions / L_.block_size;
  if (s.hashed_ > whole) s.hashed_ = whole, s.hashes_.resize(size_t(whole));
  s.length_ = std::min(s.length_, positions);
  s.cached_ = std::min(s.cached_, positions);
}

SeqKv::~SeqKv() { m_.release_all(*this); }

const float* SeqKv::key(int layer, int pos, int kv_head) const {
  const int bs = m_.block_size(), b = table_[m_.group_of(layer)].at(size_t(pos / bs));
  if (b < 0) fail("KV of layer {} position {} was released (outside the window)", layer, pos);
  return const_cast<KvBlockManager&>(m_).k_row(layer, b, pos % bs) + size_t(kv_head) * m_.layout().head_dim;
}

const float* SeqKv::value(int layer, int pos, int kv_head) const {
  const int bs = m_.block_size(), b = table_[m_.group_of(layer)].at(size_t(pos / bs));
  if (b < 0) fail("KV of layer {} position {} was released (outside the window)", layer, pos);
  return const_cast<KvBlockManager&>(m_).v_row(layer, b, pos % bs) + size_t(kv_head) * m_.layout().head_dim;
}

void SeqKv::append(int layer, const float* k, const float* v, int T) {
  const int bs = m_.block_size();
  const std::vector<int32_t>& t = table_[m_.group_of(layer)];
  if (m_.blocks_for(length_ + T) > int(t.size())) fail("SeqKv: append beyond the reserved blocks");
  const size_t row = m_.row_floats();
  for (int i = 0; i < T; ++i) {
    const int pos = length_ + i, b = t[size_t(pos / bs)];
    if (b < 0) fail("SeqKv: append into a released block");
    std::memcpy(m_.k_row(layer, b, pos % bs), k + size_t(i) * row, row * sizeof(float));
    std::memcpy(m_.v_row(layer, b, pos % bs), v + size_t(i) * row, row * sizeof(float));
  }
}

}  // namespace osprey
