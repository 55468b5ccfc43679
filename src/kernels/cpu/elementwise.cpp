// RMSNorm, router top-k softmax, clamped SwiGLU, embedding gather.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace osprey::cpu {

void f32_bf16w_rmsnorm(const float* x, const bf16* gain, float* y, int T, int H, float eps) {
#pragma omp parallel for schedule(static) if (T > 4)
  for (int t = 0; t < T; ++t) {
    const float* xt = x + size_t(t) * H;
    float* yt = y + size_t(t) * H;
    double ss = 0;
    for (int i = 0; i < H; ++i) ss += double(xt[i]) * xt[i];
    const float r = 1.0f / std::sqrt(float(ss / H) + eps);
    for (int i = 0; i < H; ++i) yt[i] = bf16_to_f32(gain[i]) * (xt[i] * r);
  }
}

void f32_topk_softmax(const float* logits, int32_t* idx, float* weight, int T, int E, int k) {
  std::vector<int32_t> order(E);
  for (int t = 0; t < T; ++t) {
    const float* l = logits + size_t(t) * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    const float m = l[order[0]];
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      idx[t * k + j] = order[j];
      weight[t * k + j] = std::exp(l[order[j]] - m);
      sum += weight[t * k + j];
    }
    for (int j = 0; j < k; ++j) weight[t * k + j] /= sum;
  }
}

void f32_swiglu_clamped(const float* t, float* a, int T, int I, float alpha, float limit) {
  for (size_t i = 0; i < size_t(T) * I; ++i) {
    const float g = std::min(t[2 * i], limit);
    const float u = std::clamp(t[2 * i + 1], -limit, limit);
    a[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

void bf16_embedding(const bf16* table, const int32_t* tokens, float* out, int T, int H) {
  for (int t = 0; t < T; ++t) {
    const bf16* row = table + size_t(tokens[t]) * H;
    for (int i = 0; i < H; ++i) out[size_t(t) * H + i] = bf16_to_f32(row[i]);
  }
}

}  // namespace osprey::cpu
