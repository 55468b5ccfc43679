// Per-sequence KV cache for the CPU engine: fp32 post-RoPE keys and values per layer.
// Sliding-window layers keep a ring of `window` slots; full layers grow with the sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey {

class KvCache {
 public:
  // layer_window[l] = 0 for full attention, else the window (slots kept).
  KvCache(std::vector<int> layer_window, int num_kv_heads, int head_dim);

  int length() const { return length_; }  // positions stored (the next token's position)
  // Keys/values of absolute position pos (must still be held) for one KV head: [head_dim].
  const float* key(int layer, int pos, int kv_head) const { return row(layers_[layer].k, layer, pos) + kv_head * head_dim_; }
  const float* value(int layer, int pos, int kv_head) const { return row(layers_[layer].v, layer, pos) + kv_head * head_dim_; }
  // Append T consecutive positions starting at length() to one layer: k, v [T][kv_heads][head_dim].
  void append(int layer, const float* k, const float* v, int T);
  void advance(int T) { length_ += T; }  // after every layer has appended
  size_t bytes() const;

 private:
  struct Layer {
    int window;
    std::vector<float> k, v;  // [slots][kv_heads][head_dim]
  };
  const float* row(const std::vector<float>& buf, int layer, int pos) const {
    const int w = layers_[layer].window;
    const size_t slot = w ? size_t(pos % w) : size_t(pos);
    return buf.data() + slot * row_size_;
  }
  std::vector<Layer> layers_;
  int head_dim_;
  size_t row_size_;
  int length_ = 0;
};

}  // namespace osprey
