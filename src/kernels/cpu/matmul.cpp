// y = x W^T + b over BF16 and MXFP4 weights. Parallel over output rows; each row's weights are
// decoded once per tile of up to 4 tokens and reused across the tile. AVX2+FMA with a scalar
// fallback; both accumulate in fp32.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>
#include <immintrin.h>

#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"

namespace osprey::cpu {

namespace {

constexpr int kTokenTile = 4;

// 2^(s-127) / 2: the scale of the doubled int8 E2M1 table.
inline float mxfp4_half_scale(uint8_t s) {
  static const auto table = [] {
    std::array<float, 256> t;
    for (int i = 0; i < 256; ++i) t[i] = 0.5f * e8m0_to_f32(uint8_t(i));
    return t;
  }();
  return table[s];
}
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

// out[t] = <W row, x[t]> for NT tokens. Each token's sum runs in the same order whatever NT is
// (U = 2 vectors per step for every NT), so a token's result does not depend on which other
// tokens share its batch: the engine's outputs are batch-invariant.
template <int NT>
void bf16_row_dot(const bf16* w, const float* x, int K, float* out) {
  constexpr int U = 2;
  __m256 acc[NT][U];
  for (int t = 0; t < NT; ++t)
    for (int u = 0; u < U; ++u) acc[t][u] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 * U <= K; k += 8 * U) {
    __m256 wv[U];
    for (int u = 0; u < U; ++u) wv[u] = load_bf16x8(w + k + 8 * u);
    for (int t = 0; t < NT; ++t)
      for (int u = 0; u < U; ++u)
        acc[t][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + size_t(t) * K + k + 8 * u), acc[t][u]);
  }
  for (; k + 8 <= K; k += 8) {
    __m256 wv = load_bf16x8(w + k);
    for (int t = 0; t < NT; ++t) acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + size_t(t) * K + k), acc[t][0]);
  }
  for (int t = 0; t < NT; ++t) {
    __m256 a = acc[t][0];
    for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[t][u]);
    float s = hsum(a);
    for (int kk = k; kk < K; ++kk) s += bf16_to_f32(w[kk]) * x[size_t(t) * K + kk];
    out[t] = s;
  }
}

// MXFP4 with few shuffles: the E2M1 table doubled to int8 (exact; halved back in the scale), one
// byte shuffle per group, then bytes sign-extended to int32 by shifts. That leaves the group's 32
// values in a fixed permuted order, so x is permuted once per call to match (mxfp4_permute_x).
// Vector k (0..3), lane L (0: low nibbles = even columns, 1: high nibbles = odd columns), dword d:
// packed byte 4d + k, column 2 (4d + k) + L.
constexpr bool kMxfp4PermutedX = true;
inline int mxfp4_perm_column(int i) {  // i: position in the permuted group -> column in the group
  const int k = i / 8, L = (i % 8) / 4, d = i % 4;
  return 2 * (4 * d + k) + L;
}

template <int NT>
void mxfp4_row_dot(const uint8_t* blocks, const uint8_t* scales, const float* xp, int K, float* out) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                                       0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i lane_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  const int G = K / kMxfp4Group;
  auto group = [&](int g, int parity) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + g * kMxfp4GroupBytes)));
    __m256i vals = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srlv_epi32(v, lane_shift), low4));
    __m256 w0 = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(vals, 24), 24));
    __m256 w1 = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(vals, 16), 24));
    __m256 w2 = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(vals, 8), 24));
    __m256 w3 = _mm256_cvtepi32_ps(_mm256_srai_epi32(vals, 24));
    __m256 s = _mm256_set1_ps(mxfp4_half_scale(scales[g]));
    for (int t = 0; t < NT; ++t) {
      const float* xg = xp + size_t(t) * K + g * kMxfp4Group;
      __m256 d01 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xg + 8), _mm256_mul_ps(w0, _mm256_loadu_ps(xg)));
      __m256 d23 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xg + 24), _mm256_mul_ps(w2, _mm256_loadu_ps(xg + 16)));
      acc[t][parity] = _mm256_fmadd_ps(_mm256_add_ps(d01, d23), s, acc[t][parity]);
    }
  };
  int g = 0;
  for (; g + 2 <= G; g += 2) {
    group(g, 0);
    group(g + 1, 1);
  }
  if (g < G) group(g, 0);
  for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}
#else
constexpr bool kMxfp4PermutedX = false;
inline int mxfp4_perm_column(int i) { return i; }
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
  // x in the kernel's per-group column order: built once, read by every row.
  std::vector<float> xp;
  if (kMxfp4PermutedX) {
    xp.resize(size_t(T) * K);
    for (int t = 0; t < T; ++t)
      for (int g = 0; g < G; ++g)
        for (int i = 0; i < kMxfp4Group; ++i)
          xp[size_t(t) * K + g * kMxfp4Group + i] = x[size_t(t) * K + g * kMxfp4Group + mxfp4_perm_column(i)];
    x = xp.data();
  }
  tiled_matmul(x, bias, y, T, N, K, [&]<int NT>(int n, const float* xt, float* out) {
    mxfp4_row_dot<NT>(blocks + size_t(n) * G * kMxfp4GroupBytes, scales + size_t(n) * G, xt, K, out);
  });
}

}  // namespace osprey::cpu

namespace osprey::cpu {

void f32_fp8w_matmul(const float* x, const uint8_t* Wq, const float* Ws, int ws_stride, const bf16* bias, float* y,
                     int T, int N, int K) {
  f32_fp8w_matmul(x, Wq, {Ws, fp8::kBlock, size_t(ws_stride), 1}, bias, y, T, N, K);
}

void f32_fp8w_matmul(const float* x, const uint8_t* Wq, const Fp8WeightScales& Ws, const bf16* bias, float* y, int T,
                     int N, int K) {
  const int KB = fp8::blocks(K);
  std::vector<uint8_t> xq(size_t(T) * K);
  std::vector<float> xs(size_t(KB) * T), xd(size_t(T) * K);
  fp8::quantize_activations(x, T, K, xq.data(), xs.data(), T);
  const float* table = fp8::decode_table().v;
  for (size_t i = 0; i < xq.size(); ++i) xd[i] = table[xq[i]];
#pragma omp parallel
  {
    std::vector<float> w(K);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const uint8_t* row = Wq + size_t(n) * K;
      for (int k = 0; k < K; ++k) w[k] = table[row[k]];
      const float* ws = Ws.s + size_t(n / Ws.rows_per_scale) * Ws.row_stride;
      const float b = bias ? bf16_to_f32(bias[n]) : 0.0f;
      for (int t = 0; t < T; ++t) {
        const float* xt = xd.data() + size_t(t) * K;
        float acc = 0;
        for (int kb = 0; kb < KB; ++kb) {
          const int k0 = kb * fp8::kBlock, k1 = std::min(K, k0 + fp8::kBlock);
          float part = 0;
#pragma omp simd reduction(+ : part)
          for (int k = k0; k < k1; ++k) part += w[k] * xt[k];
          acc += part * (ws[size_t(kb) * Ws.block_stride] * xs[size_t(kb) * T + t]);
        }
        y[size_t(t) * N + n] = acc + b;
      }
    }
  }
}

}  // namespace osprey::cpu
