#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace osprey {

KvCache::KvCache(std::vector<int> layer_window, int num_kv_heads, int head_dim)
    : head_dim_(head_dim), row_size_(size_t(num_kv_heads) * head_dim) {
  for (int w : layer_window) {
    Layer l{w, {}, {}};
    if (w) {
      l.k.resize(size_t(w) * row_size_);
      l.v.resize(size_t(w) * row_size_);
    }
    layers_.push_back(std::move(l));
  }
}

void KvCache::append(int layer, const float* k, const float* v, int T) {
  Layer& l = layers_[layer];
  if (l.window == 0) {
    l.k.insert(l.k.end(), k, k + size_t(T) * row_size_);
    l.v.insert(l.v.end(), v, v + size_t(T) * row_size_);
    return;
  }
  // Only the last `window` positions can be read again.
  const int first = std::max(0, T - l.window);
  for (int t = first; t < T; ++t) {
    const size_t slot = size_t((length_ + t) % l.window);
    std::memcpy(l.k.data() + slot * row_size_, k + size_t(t) * row_size_, row_size_ * sizeof(float));
    std::memcpy(l.v.data() + slot * row_size_, v + size_t(t) * row_size_, row_size_ * sizeof(float));
  }
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (auto& l : layers_) n += (l.k.capacity() + l.v.capacity()) * sizeof(float);
  return n;
}

}  // namespace osprey
