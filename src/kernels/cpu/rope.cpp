// YaRN rotary embedding (gpt-oss: unrounded correction range, concentration on cos and sin).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/ops.h"

namespace osprey::cpu {

RopeTable make_rope_table(const RopeParams& p) {
  RopeTable t;
  t.head_dim = p.head_dim;
  const int half = p.head_dim / 2;
  t.inv_freq.resize(half);
  double low = 0, high = 0;
  if (p.yarn) {
    auto correction_dim = [&](double rotations) {
      return p.head_dim * std::log(p.original_max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(p.theta));
    };
    low = correction_dim(p.beta_fast);
    high = correction_dim(p.beta_slow);
    if (p.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(p.head_dim - 1));
    if (low == high) high += 0.001;
    t.concentration = float(0.1 * std::log(p.factor) + 1.0);
  }
  for (int i = 0; i < half; ++i) {
    // float32, as the references compute it
    const float freq = std::pow(float(p.theta), float(2 * i) / float(p.head_dim));
    const float extrapolation = 1.0f / freq;
    if (!p.yarn) {
      t.inv_freq[i] = extrapolation;
      continue;
    }
    const float interpolation = 1.0f / (float(p.factor) * freq);
    const float ramp = std::clamp(float((i - low) / (high - low)), 0.0f, 1.0f);
    const float mask = 1.0f - ramp;  // 1: keep the original frequency
    t.inv_freq[i] = interpolation * (1.0f - mask) + extrapolation * mask;
  }
  return t;
}

void f32_rope(float* x, const int32_t* positions, const RopeTable& table, int T, int heads) {
  const int d = table.head_dim, half = d / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const float theta = float(positions[t]) * table.inv_freq[i];
      cos_t[i] = std::cos(theta) * table.concentration;
      sin_t[i] = std::sin(theta) * table.concentration;
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (size_t(t) * heads + h) * d;
      for (int i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cos_t[i] - x2 * sin_t[i];
        v[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
      }
    }
  }
}

}  // namespace osprey::cpu
