// KV storage for the CPU engine: fp32 post-RoPE keys and values per layer. SequenceKv is what
// the forward pass reads and appends to; KvCache is one sequence's contiguous cache (sliding
// layers keep a ring of `window` slots), SeqKv (engine/kv_blocks.h) a view into the engine's shared blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey {

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  virtual int length() const = 0;  // positions stored (the next token's position)
  // Keys/values of absolute position pos (still held) for one KV head: [head_dim].
  virtual const float* key(int layer, int pos, int kv_head) const = 0;
  virtual const float* value(int layer, int pos, int kv_head) const = 0;
  // Append T consecutive positions starting at length() to one layer: k, v [T][kv_heads][head_dim].
  virtual void append(int layer, const float* k, const float* v, int T) = 0;
  virtual void advance(int T) = 0;  // after every layer has appended
};

class KvCache final : public SequenceKv {
 public:
  // layer_window[l] = 0 for full attention, else the window (slots kept).
  KvCache(std::vector<int> layer_window, int num_kv_heads, int head_dim);

  int length() const override { return length_; }
  const float* key(int layer, int pos, int kv_head) const override {
    return row(layers_[layer].k, layer, pos) + kv_head * head_dim_;
  }
  const float* value(int layer, int pos, int kv_head) const override {
    return row(layers_[layer].v, layer, pos) + kv_head * head_dim_;
  }
  void append(int layer, const float* k, const float* v, int T) override;
  void advance(int T) override { length_ += T; }
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
