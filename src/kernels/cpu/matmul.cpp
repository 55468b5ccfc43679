// y = x W^T + b over BF16 and MXFP4 weights. Parallel over output rows; each row's weights are
// decoded once per tile of up to 4 tokens and reused across the tile. AVX2+FMA with a scalar
// fallback; both accumulate in fp32.
#include <algorithm>
#include <cstring>
#include <vector>
#include <immintrin.h>

#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"

namespace osprey::cpu {

namespace {

constexpr int kTokenTile = 4;
constexpr int kRowBlock = 16;

#if defined(__AVX2__) && defined(__FMA__)
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}
inline __m256 load_bf16x8(const bf16* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// out[t] = <W row, x[t]> for NT tokens.
template <int NT>
void bf16_row_dot(const bf16* w, const float* x, int K, float* out) {
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 16 <= K; k += 16) {
    __m256 w0 = load_bf16x8(w + k), w1 = load_bf16x8(w + k + 8);
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + size_t(t) * K + k), acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + size_t(t) * K + k + 8), acc[t][1]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    float s = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
    for (int kk = k; kk < K; ++kk) s += bf16_to_f32(w[kk]) * x[size_t(t) * K + kk];
    out[t] = s;
  }
}

// MXFP4: the E2M1 table doubled to int8 (exact), halved back in the scale.
template <int NT>
void mxfp4_row_dot(const uint8_t* blocks, const uint8_t* scales, const float* x, int K, float* out) {
  static const float* half_scale = [] {
    static float t[256];
    for (int s = 0; s < 256; ++s) t[s] = 0.5f * e8m0_to_f32(uint8_t(s));
    return t;
  }();
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  const int G = K / kMxfp4Group;
  for (int g = 0; g < G; ++g) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + g * kMxfp4GroupBytes));
    __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, low4));
    __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    __m128i e0 = _mm_unpacklo_epi8(lo, hi);  // columns 0..15 of the group
    __m128i e1 = _mm_unpackhi_epi8(lo, hi);  // columns 16..31
    __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0));
    __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e0, 8)));
    __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1));
    __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e1, 8)));
    __m256 s = _mm256_set1_ps(half_scale[scales[g]]);
    for (int t = 0; t < NT; ++t) {
      const float* xg = x + size_t(t) * K + g * kMxfp4Group;
      __m256 d = _mm256_mul_ps(w0, _mm256_loadu_ps(xg));
      d = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + 8), d);
      d = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xg + 16), d);
      d = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xg + 24), d);
      acc[t] = _mm256_fmadd_ps(d, s, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
}
#else
template <int NT>
void bf16_row_dot(const bf16* w, const float* x, int K, float* out) {
  for (int t = 0; t < NT; ++t) {
    float s = 0;
    for (int k = 0; k < K; ++k) s += bf16_to_f32(w[k]) * x[size_t(t) * K + k];
    out[t] = s;
  }
}
template <int NT>
void mxfp4_row_dot(const uint8_t* blocks, const uint8_t* scales, const float* x, int K, float* out) {
  std::vector<float> wrow(K);
  mxfp4_decode_row(blocks, scales, K, wrow.data());
  for (int t = 0; t < NT; ++t) {
    float s = 0;
    for (int k = 0; k < K; ++k) s += wrow[k] * x[size_t(t) * K + k];
    out[t] = s;
  }
}
#endif

// Runs row_dot<NT>(n, x_tile, out) over all rows and token tiles, adding the bias.
template <typename RowDot>
void tiled_matmul(const float* x, const bf16* bias, float* y, int T, int N, int K, RowDot&& row_dot) {
  const int row_blocks = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int rb = 0; rb < row_blocks; ++rb) {
    const int n_end = std::min(N, (rb + 1) * kRowBlock);
    for (int t0 = 0; t0 < T; t0 += kTokenTile) {
      const int nt = std::min(kTokenTile, T - t0);
      const float* xt = x + size_t(t0) * K;
      for (int n = rb * kRowBlock; n < n_end; ++n) {
        float out[kTokenTile];
        switch (nt) {
          case 4: row_dot.template operator()<4>(n, xt, out); break;
          case 3: row_dot.template operator()<3>(n, xt, out); break;
          case 2: row_dot.template operator()<2>(n, xt, out); break;
          default: row_dot.template operator()<1>(n, xt, out); break;
        }
        const float b = bias ? bf16_to_f32(bias[n]) : 0.0f;
        for (int t = 0; t < nt; ++t) y[size_t(t0 + t) * N + n] = out[t] + b;
      }
    }
  }
}

}  // namespace

void f32_bf16w_matmul(const float* x, const bf16* W, const bf16* bias, float* y, int T, int N, int K) {
  tiled_matmul(x, bias, y, T, N, K, [&]<int NT>(int n, const float* xt, float* out) {
    bf16_row_dot<NT>(W + size_t(n) * K, xt, K, out);
  });
}

void f32_mxfp4w_matmul(const float* x, const uint8_t* blocks, const uint8_t* scales, const bf16* bias, float* y,
                       int T, int N, int K) {
  const int G = K / kMxfp4Group;
  tiled_matmul(x, bias, y, T, N, K, [&]<int NT>(int n, const float* xt, float* out) {
    mxfp4_row_dot<NT>(blocks + size_t(n) * G * kMxfp4GroupBytes, scales + size_t(n) * G, xt, K, out);
  });
}

}  // namespace osprey::cpu
