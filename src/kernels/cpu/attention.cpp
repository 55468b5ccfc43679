// Sink attention: one online-softmax core whose running max and denominator start from the
// head's sink logit (unscaled), so the sink is one extra column whose probability is dropped.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace osprey::cpu {

void f32_bf16sink_attention(const float* q, const int32_t* positions, const KvSource& kv, const bf16* sinks,
                            float* out, int T, const AttentionShape& s) {
  const int d = s.head_dim, group = s.num_heads / s.num_kv_heads;
#pragma omp parallel
  {
    std::vector<float> scores;
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < s.num_heads; ++h) {
        const int pos = positions[t], g = h / group;
        const int first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
        const float* qv = q + (size_t(t) * s.num_heads + h) * d;
        const float sink = bf16_to_f32(sinks[h]);
        scores.resize(size_t(pos - first + 1));
        float m = sink;
        for (int j = first; j <= pos; ++j) {
          const float* k = kv.key(j, g);
          float dot = 0;
          for (int i = 0; i < d; ++i) dot += qv[i] * k[i];
          scores[j - first] = dot * s.scale;
          m = std::max(m, scores[j - first]);
        }
        float denom = std::exp(sink - m);
        float* o = out + (size_t(t) * s.num_heads + h) * d;
        std::fill(o, o + d, 0.0f);
        for (int j = first; j <= pos; ++j) {
          const float p = std::exp(scores[j - first] - m);
          denom += p;
          const float* v = kv.value(j, g);
          for (int i = 0; i < d; ++i) o[i] += p * v[i];
        }
        const float inv = 1.0f / denom;
        for (int i = 0; i < d; ++i) o[i] *= inv;
      }
    }
  }
}

}  // namespace osprey::cpu
