// Helpers of the CUDA kernel tests: device buffers (poisoned on allocation), random inputs,
// relative error.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.cuh"

namespace osprey {

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    OSPREY_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    OSPREY_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit Dev(size_t count) : n(count) {
    OSPREY_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    OSPREY_CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(T)));  // poison: every element must be written
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
    OSPREY_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};
template <typename T>
cuda::bf16* as_dev_bf16(const Dev<T>& d) { return reinterpret_cast<cuda::bf16*>(d.p); }

inline std::vector<float> randf(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
inline std::vector<bf16> randbf(size_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<bf16> v;
  for (float f : randf(n, seed, scale)) v.push_back(f32_to_bf16(f));
  return v;
}
// BF16 values as the fp32 they are exactly.
inline std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> f;
  for (bf16 b : v) f.push_back(bf16_to_f32(b));
  return f;
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}


// Random MXFP4 weights for `values` values: packed E2M1 bytes [values/2] and E8M0 scales
// [values/32] drawn from [scale_lo, scale_lo + spread).
inline std::pair<std::vector<uint8_t>, std::vector<uint8_t>> random_mxfp4(size_t values, uint32_t seed, int scale_lo,
                                                                          int spread) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> blocks(values / 2), scales(values / 32);
  for (auto& b : blocks) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(scale_lo + int(rng() % unsigned(spread)));
  return {std::move(blocks), std::move(scales)};
}

// Keys and values from host vectors [positions][kv_heads][d], for the CPU attention.
struct HostKv final : cpu::KvSource {
  const std::vector<float>& k;
  const std::vector<float>& v;
  int kv_heads, d;
  HostKv(const std::vector<float>& k_, const std::vector<float>& v_, int kvh, int dd) : k(k_), v(v_), kv_heads(kvh), d(dd) {}
  const float* key(int pos, int g) const override { return &k[(size_t(pos) * kv_heads + g) * d]; }
  const float* value(int pos, int g) const override { return &v[(size_t(pos) * kv_heads + g) * d]; }
};

}  // namespace osprey
