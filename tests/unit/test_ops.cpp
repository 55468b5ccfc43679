// Per-op checks with hand-computed values, and the fast matmuls against plain double loops.
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <random>

#include "core/fp16.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"

namespace osprey {
namespace {

using namespace osprey::cpu;

RopeParams gpt_oss_rope() {
  return {.head_dim = 64, .theta = 150000, .factor = 32, .beta_fast = 32, .beta_slow = 1, .original_max_pos = 4096,
          .yarn = true, .truncate = false};
}

TEST(Rope, YarnInvFreqTableMatchesReference) {
  RopeTable t = make_rope_table(gpt_oss_rope());
  // Values from the reference math (unrounded correction range 8.0928 .. 17.3980).
  const std::pair<int, double> expected[] = {{0, 1.0},           {1, 0.6890443},     {2, 0.4747821},
                                             {4, 0.2254180},     {8, 5.081327e-2},   {9, 3.170570e-2},
                                             {10, 1.933500e-2},  {12, 6.794959e-3},  {14, 2.093792e-3},
                                             {16, 4.564839e-4},  {17, 1.293187e-4},  {18, 3.830881e-5},
                                             {24, 4.099978e-6},  {31, 3.023511e-7}};
  for (auto [i, v] : expected) EXPECT_NEAR(t.inv_freq[i], v, v * 2e-6) << "i=" << i;
  EXPECT_NEAR(t.concentration, 1.3465735902799727, 1e-7);
}

TEST(Rope, TruncatedRangeDiffers) {
  RopeParams p = gpt_oss_rope();
  p.truncate = true;  // generic YaRN rounds to 8 and 18: wrong for gpt-oss, kept for other configs
  RopeTable t = make_rope_table(p), ref = make_rope_table(gpt_oss_rope());
  EXPECT_NE(t.inv_freq[9], ref.inv_freq[9]);
  EXPECT_EQ(t.inv_freq[8], ref.inv_freq[8]);
}

TEST(Rope, HalfSplitRotationWithConcentrationOnBoth) {
  RopeTable t = make_rope_table(gpt_oss_rope());
  std::vector<float> x(64, 0.0f);
  x[1] = 1.0f;  // pairs with x[33]
  int32_t pos = 3;
  f32_rope(x.data(), &pos, t, 1, 1);
  const float th = 3 * t.inv_freq[1];
  EXPECT_NEAR(x[1], std::cos(th) * 1.3465736f, 1e-6);
  EXPECT_NEAR(x[33], std::sin(th) * 1.3465736f, 1e-6);  // x2*cos + x1*sin with x2 = 0
  EXPECT_EQ(x[2], 0.0f);                                  // not interleaved pairs
}

struct VecKv final : KvSource {
  std::vector<std::vector<float>> k, v;  // [pos][d] (one KV head)
  const float* key(int pos, int) const override { return k[pos].data(); }
  const float* value(int pos, int) const override { return v[pos].data(); }
};

TEST(Attention, SinkTakesItsShareOfTheMass) {
  VecKv kv;
  kv.k = {{1.0f, 0.0f}};
  kv.v = {{2.0f, -4.0f}};
  std::vector<float> q = {0.5f, 7.0f};  // s = scale * 0.5
  bf16 sink = f32_to_bf16(1.0f);        // unscaled
  std::vector<float> out(2);
  int32_t pos = 0;
  f32_bf16sink_attention(q.data(), &pos, kv, &sink, out.data(), 1,
                         {.num_heads = 1, .num_kv_heads = 1, .head_dim = 2, .window = 0, .scale = 2.0f});
  const double p = std::exp(1.0) / (std::exp(1.0) + std::exp(1.0));  // s = 2 * 0.5 = 1 = sink
  EXPECT_NEAR(out[0], 2.0 * p, 1e-6);
  EXPECT_NEAR(out[1], -4.0 * p, 1e-6);
}

TEST(Attention, WindowOf128KeysIncludesTheCurrentToken) {
  VecKv kv;
  for (int j = 0; j <= 200; ++j) {
    kv.k.push_back({0.0f});
    kv.v.push_back({1.0f});
  }
  std::vector<float> q = {0.0f};  // every score 0: weights 1 / (n + e^sink)
  bf16 sink = f32_to_bf16(0.0f);
  int32_t pos = 200;
  float out;
  f32_bf16sink_attention(q.data(), &pos, kv, &sink, &out, 1,
                         {.num_heads = 1, .num_kv_heads = 1, .head_dim = 1, .window = 128, .scale = 0.125f});
  EXPECT_NEAR(out, 128.0 / 129.0, 1e-6);  // keys 73..200
  f32_bf16sink_attention(q.data(), &pos, kv, &sink, &out, 1,
                         {.num_heads = 1, .num_kv_heads = 1, .head_dim = 1, .window = 0, .scale = 0.125f});
  EXPECT_NEAR(out, 201.0 / 202.0, 1e-6);  // keys 0..200
}

TEST(Attention, GqaHeadUsesItsGroupsKvHead) {
  struct TwoHeadKv final : KvSource {
    float k0[1] = {0}, k1[1] = {0}, v0[1] = {1}, v1[1] = {5};
    const float* key(int, int g) const override { return g ? k1 : k0; }
    const float* value(int, int g) const override { return g ? v1 : v0; }
  } kv;
  std::vector<float> q(6, 0.0f);  // 6 heads, 2 KV heads: heads 0-2 -> 0, 3-5 -> 1
  std::vector<bf16> sinks(6, f32_to_bf16(-100.0f));
  std::vector<float> out(6);
  int32_t pos = 0;
  f32_bf16sink_attention(q.data(), &pos, kv, sinks.data(), out.data(), 1,
                         {.num_heads = 6, .num_kv_heads = 2, .head_dim = 1, .window = 0, .scale = 1});
  EXPECT_FLOAT_EQ(out[2], 1.0f);
  EXPECT_FLOAT_EQ(out[3], 5.0f);
}

TEST(Router, SoftmaxOverTheTopKOnly) {
  std::vector<float> logits = {1, 5, 3, 4, 2, 0};
  int32_t idx[4];
  float w[4];
  f32_topk_softmax(logits.data(), idx, w, 1, 6, 4);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 3);
  EXPECT_EQ(idx[2], 2);
  EXPECT_EQ(idx[3], 4);
  const double z = std::exp(5) + std::exp(4) + std::exp(3) + std::exp(2);
  EXPECT_NEAR(w[0], std::exp(5) / z, 1e-6);
  EXPECT_NEAR(w[3], std::exp(2) / z, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2] + w[3], 1.0, 1e-6);
}

TEST(Router, TiesPickTheLowerIndex) {
  std::vector<float> logits = {2, 2, 2, 2, 2};
  int32_t idx[2];
  float w[2];
  f32_topk_softmax(logits.data(), idx, w, 1, 5, 2);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
}

TEST(SwiGlu, ClampsGateFromAboveOnlyAndUpBothWays) {
  auto act = [](float g, float u) {
    float t[2] = {g, u}, a;
    f32_swiglu_clamped(t, &a, 1, 1, 1.702f, 7.0f);
    return a;
  };
  auto ref = [](double g, double u) { return g / (1 + std::exp(-1.702 * g)) * (u + 1); };
  EXPECT_NEAR(act(10, 0.5f), ref(7, 0.5), 1e-5);     // gate clamped to 7
  EXPECT_NEAR(act(-10, 0.5f), ref(-10, 0.5), 1e-7);  // not clamped from below
  EXPECT_NEAR(act(1, 10), ref(1, 7), 1e-5);          // up clamped to 7 (then +1 = 8)
  EXPECT_NEAR(act(1, -10), ref(1, -7), 1e-5);        // up clamped to -7
  EXPECT_NEAR(act(2, -1), 0.0, 1e-7);                // the +1 on the linear branch
}

TEST(RmsNorm, HandValues) {
  float x[4] = {1, 2, 3, 4}, y[4];
  bf16 g[4] = {f32_to_bf16(1), f32_to_bf16(2), f32_to_bf16(0.5f), f32_to_bf16(1)};
  f32_bf16w_rmsnorm(x, g, y, 1, 4, 1e-5f);
  const double r = 1 / std::sqrt(30.0 / 4 + 1e-5);
  EXPECT_NEAR(y[0], 1 * r, 1e-6);
  EXPECT_NEAR(y[1], 4 * r, 1e-6);
  EXPECT_NEAR(y[2], 1.5 * r, 1e-6);
}

TEST(Mxfp4, DecodingConventions) {
  // Group 0: byte 0 = 0x71 -> col 0 code 1 (+0.5), col 1 code 7 (+6); byte 1 = 0xF8 -> -0, -6.
  uint8_t blocks[32] = {0x71, 0xF8};
  blocks[16] = 0x2A;  // group 1, cols 32 (code 0xA = -1) and 33 (code 2 = +1)
  uint8_t scales[2] = {127, 129};
  float out[64];
  mxfp4_decode_row(blocks, scales, 64, out);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[2], -0.0f);
  EXPECT_EQ(out[3], -6.0f);
  EXPECT_EQ(out[32], -4.0f);  // -1 * 2^2
  EXPECT_EQ(out[33], 4.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
}

class MatmulShapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MatmulShapes, Bf16AndMxfp4MatchDoubleReference) {
  auto [T, N, K] = GetParam();
  std::mt19937 rng(T * 1000 + N * 10 + K);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(size_t(T) * K);
  for (auto& v : x) v = u(rng);
  std::vector<bf16> W(size_t(N) * K), bias(N);
  for (auto& v : W) v = f32_to_bf16(u(rng));
  for (auto& v : bias) v = f32_to_bf16(u(rng));
  std::vector<float> y(size_t(T) * N, NAN);
  f32_bf16w_matmul(x.data(), W.data(), bias.data(), y.data(), T, N, K);
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double ref = bf16_to_f32(bias[n]);
      for (int k = 0; k < K; ++k) ref += double(bf16_to_f32(W[size_t(n) * K + k])) * x[size_t(t) * K + k];
      ASSERT_NEAR(y[size_t(t) * N + n], ref, 1e-4 * (1 + std::abs(ref))) << t << "," << n;
    }
  if (K % 32) return;
  std::vector<uint8_t> blocks(size_t(N) * K / 2), scales(size_t(N) * K / 32);
  for (auto& b : blocks) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(120 + rng() % 10);
  std::fill(y.begin(), y.end(), NAN);
  f32_mxfp4w_matmul(x.data(), blocks.data(), scales.data(), nullptr, y.data(), T, N, K);
  std::vector<float> row(K);
  for (int n = 0; n < N; ++n) {
    mxfp4_decode_row(&blocks[size_t(n) * K / 2], &scales[size_t(n) * K / 32], K, row.data());
    for (int t = 0; t < T; ++t) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(row[k]) * x[size_t(t) * K + k];
      ASSERT_NEAR(y[size_t(t) * N + n], ref, 1e-4 * (1 + std::abs(ref))) << t << "," << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AwkwardSizes, MatmulShapes,
                         ::testing::Values(std::make_tuple(1, 7, 96), std::make_tuple(3, 17, 100),
                                           std::make_tuple(5, 33, 2880), std::make_tuple(9, 5, 64),
                                           std::make_tuple(129, 3, 160), std::make_tuple(1, 1, 8)));

}  // namespace
}  // namespace osprey

#include "formats/fp8.h"
#include "formats/kv_fp8.h"

namespace osprey {
namespace {

TEST(Fp8, E4m3RoundTripAndRounding) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const float v = fp8::to_f32(uint8_t(c));
    EXPECT_EQ(fp8::from_f32(v) & 0x7F, c & 0x7F) << c;
  }
  EXPECT_EQ(fp8::to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8::from_f32(1e6f), 0x7E);          // saturates
  EXPECT_EQ(fp8::from_f32(-1e6f), 0xFE);
  EXPECT_EQ(fp8::to_f32(fp8::from_f32(1.0625f)), 1.0f);  // halfway between 1 and 1.125: to even
  EXPECT_EQ(fp8::to_f32(fp8::from_f32(1.1875f)), 1.25f);
  EXPECT_EQ(fp8::to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
}

// scaled_quotient (v / sc by the block's reciprocal and one FMA correction, what the GPU's
// quantizers do) against the division, for every scale mantissa and over the range of scales it
// takes: the same float wherever the quotient reaches 2^-20, and always the same E4M3 code. The
// values include each code's rounding midpoints times the scale, nudged by a few ulps (where a
// quotient one ulp off would round to another code), and zeros of either sign.
TEST(Fp8, ScaledQuotientGivesTheDivisionsCodes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  long checked = 0;
  auto check = [&](float v, float sc) {
    ASSERT_TRUE(fp8::scaled_quotient_exact(sc)) << sc;
    const float inv = 1.0f / sc, q = fp8::scaled_quotient(v, sc, inv), d = v / sc;
    if (q != d || std::signbit(q) != std::signbit(d)) {
      ASSERT_LT(std::fabs(d), 0x1p-20f) << "v " << v << " sc " << sc;
    }
    ASSERT_EQ(fp8::from_f32(q), fp8::from_f32(d)) << "v " << v << " sc " << sc;
    ++checked;
  };
  std::vector<float> mids;  // the midpoints between neighbouring positive codes
  for (int c = 0; c < 0x7E; ++c) mids.push_back(0.5f * (fp8::to_f32(uint8_t(c)) + fp8::to_f32(uint8_t(c + 1))));
  for (uint32_t m = 0; m < (1u << 23); m += 1) {
    uint32_t bits = 0x3f800000u | m;
    float sc;
    std::memcpy(&sc, &bits, 4);
    check(448.0f * sc, sc);
    check(u(rng) * 448.0f * sc, sc);
    check(0.0f, sc), check(-0.0f, sc);  // a clamped SwiGLU's -0 (a very negative gate) keeps its code 0x80
    check(-0x1p-149f, sc);
    if (m % 64 == 0) {
      const float mid = mids[m / 64 % mids.size()];
      float v = mid * sc;
      for (int k = 0; k < 3; ++k) v = std::nextafter(v, 0.0f);
      for (int k = 0; k < 7; ++k, v = std::nextafter(v, 1e30f)) check(v, sc), check(-v, sc);
    }
  }
  // Scales over [2^-90, 2^100] and values down to 2^-60 of the block's largest.
  std::uniform_real_distribution<float> f01(0.0f, 1.0f);
  for (int i = 0; i < 4000000; ++i) {
    const float sc = std::ldexp(1.0f + f01(rng), int(f01(rng) * 189.0f) - 90);
    check(u(rng) * 448.0f * sc * std::ldexp(1.0f, -int(f01(rng) * 60.0f)), sc);
  }
  EXPECT_GT(checked, 20000000);
  EXPECT_FALSE(fp8::scaled_quotient_exact(0x1p-91f));
  EXPECT_FALSE(fp8::scaled_quotient_exact(INFINITY));
  EXPECT_FALSE(fp8::scaled_quotient_exact(NAN));
}

// The FP16 KV cache's store: IEEE round to nearest even, the compiler's _Float16 conversion
// being the reference, except that what would round to infinity is the largest finite value.
// Every FP16 value round-trips; random floats over every exponent and densely around FP16's
// subnormal and overflow edges convert as the reference does.
TEST(Fp16, SatfiniteRoundingIsIeeeClippedAtTheLargestFinite) {
  auto ref = [](float f) {
    const _Float16 x = static_cast<_Float16>(f);
    uint16_t h;
    std::memcpy(&h, &x, 2);
    if ((h & 0x7fffu) == 0x7c00u) h = uint16_t((h & 0x8000u) | 0x7bffu);
    return h;
  };
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    _Float16 x;
    const uint16_t hb = uint16_t(h);
    std::memcpy(&x, &hb, 2);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(float(x))) << h;
      ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16_satfinite(f)))) << h;
      continue;
    }
    ASSERT_EQ(f, float(x)) << h;
    if (!std::isinf(f)) ASSERT_EQ(f32_to_f16_satfinite(f), h) << h;
  }
  std::mt19937 rng(16);
  for (int i = 0; i < 4000000; ++i) {
    uint32_t u = rng();
    if (i & 1) u = (u & 0x8fffffffu) | 0x30000000u;  // magnitudes 2^-31 .. 2: the subnormal edge
    if (i % 4 == 3) u = (u & 0x807fffffu) | (uint32_t(127 + 14 + int(rng() % 3)) << 23);  // 2^14 .. 2^17
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16_satfinite(f), ref(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(1e9f)), kF16Max);
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(-INFINITY)), -kF16Max);
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(65519.0f)), kF16Max);  // rounds down to it
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(1.0f + 0x1p-11f)), 1.0f);  // halfway: to even
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(0x1p-25f)), 0.0f);  // halfway to the smallest subnormal: to even (0)
  EXPECT_EQ(f16_to_f32(f32_to_f16_satfinite(0x1.8p-25f)), 0x1p-24f);
}

// The FP8 KV cache's row format: the exponent is the smallest e with amax <= 448 2^e (so no code
// saturates and none could use a smaller scale), found by bit arithmetic; code times 2^e is exact.
TEST(KvFp8, RowExponentIsTheSmallestThatHoldsTheRow) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-60, 60);
  for (int i = 0; i < 100000; ++i) {
    const float amax = std::ldexp(mant(rng), ex(rng));
    const int e = kv_fp8::row_exponent(amax);
    ASSERT_LE(amax, 448.0f * std::ldexp(1.0f, e)) << amax;
    ASSERT_GT(amax, 448.0f * std::ldexp(1.0f, e - 1)) << amax;
  }
  EXPECT_EQ(kv_fp8::row_exponent(448.0f), 0);   // exactly the largest code
  EXPECT_EQ(kv_fp8::row_exponent(449.0f), 1);
  EXPECT_EQ(kv_fp8::row_exponent(224.0f), -1);
  EXPECT_EQ(kv_fp8::row_exponent(1.75f), -8);   // 448 2^-8
  EXPECT_EQ(kv_fp8::row_exponent(1.7500001f), -7);
  EXPECT_EQ(kv_fp8::row_exponent(0.0f), kv_fp8::kExpMin);
  EXPECT_EQ(kv_fp8::row_exponent(1e-40f), kv_fp8::kExpMin);  // subnormal
  EXPECT_EQ(kv_fp8::row_exponent(1e-35f), kv_fp8::kExpMin);  // clamped
  EXPECT_EQ(kv_fp8::row_exponent(INFINITY), kv_fp8::kExpMax);
  EXPECT_EQ(kv_fp8::pow2(-100), std::ldexp(1.0f, -100));
  EXPECT_EQ(kv_fp8::pow2(100), std::ldexp(1.0f, 100));
}

TEST(KvFp8, RowQuantizationKeepsE4m3PrecisionAndIsExactOnCodes) {
  std::mt19937 rng(10);
  for (float scale : {1e-20f, 3e-3f, 1.0f, 17.0f, 5000.0f}) {
    std::vector<float> x = [&] {
      std::uniform_real_distribution<float> u(-scale, scale);
      std::vector<float> v(64);
      for (float& f : v) f = u(rng);
      return v;
    }();
    std::vector<uint8_t> codes(64);
    const int e = kv_fp8::quantize_row(x.data(), 64, codes.data());
    float amax = 0;
    for (float f : x) amax = std::max(amax, std::fabs(f));
    std::vector<float> r = x;
    kv_fp8::round_row(r.data(), 64);
    for (int i = 0; i < 64; ++i) {
      const float d = kv_fp8::dequantize(codes[i], e);
      ASSERT_EQ(d, r[i]);
      ASSERT_EQ(d, fp8::to_f32(codes[i]) * std::ldexp(1.0f, e));  // exact: a power of two
      ASSERT_EQ(fp8::from_f32(x[i] / std::ldexp(1.0f, e)), codes[i]);
      // Relative error of E4M3 (2^-4) above its normal range, absolute 2^-10 of the scale below.
      ASSERT_LE(std::fabs(d - x[i]), std::max(std::fabs(x[i]) * 0.0625f, std::ldexp(1.0f, e - 10))) << scale;
    }
    ASSERT_LE(amax, 448.0f * std::ldexp(1.0f, e));
  }
  // A row's largest value that is itself a code times 2^e comes back exactly; zeros stay zero.
  std::vector<float> x(64, 0.0f);
  x[3] = -448.0f * 0.25f, x[7] = 1.0f;
  kv_fp8::round_row(x.data(), 64);
  EXPECT_EQ(x[3], -112.0f);
  EXPECT_EQ(x[7], 1.0f);
  EXPECT_EQ(x[0], 0.0f);
}

TEST(Fp8, BlockScaledMatmulMatchesDequantizedReference) {
  const int T = 3, N = 130, K = 2880;  // partial row block and a 64-column last block
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> w(size_t(N) * K), x(size_t(T) * K);
  for (auto& f : w) f = u(rng);
  for (auto& f : x) f = u(rng);
  fp8::Matrix m;
  m.allocate(1, N, K);
  fp8::quantize_row_blocks(m, 0, 0, fp8::blocks(N), [&](int r, float* out) { std::copy_n(&w[size_t(r) * K], K, out); });
  std::vector<uint8_t> xq(x.size());
  std::vector<float> xs(size_t(fp8::blocks(K)) * T);
  fp8::quantize_activations(x.data(), T, K, xq.data(), xs.data(), T);
  std::vector<float> y(size_t(T) * N);
  cpu::f32_fp8w_matmul(x.data(), m.data(), m.scale(), m.scale_stride(), nullptr, y.data(), T, N, K);
  double worst = 0, err2 = 0, ex2 = 0;
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      double ref = 0, exact = 0;
      for (int k = 0; k < K; ++k) {
        const double wd = fp8::to_f32(m.q[size_t(n) * K + k]) * m.scales[size_t(n / 128) * m.scale_stride() + k / 128];
        const double xd = fp8::to_f32(xq[size_t(t) * K + k]) * xs[size_t(k / 128) * T + t];
        ref += wd * xd;
        exact += double(w[size_t(n) * K + k]) * x[size_t(t) * K + k];
      }
      worst = std::max(worst, std::abs(y[size_t(t) * N + n] - ref) / (std::abs(ref) + 1.0));
      err2 += (ref - exact) * (ref - exact);
      ex2 += exact * exact;
    }
  EXPECT_LT(worst, 1e-5);  // the kernel computes exactly the quantized product (fp32 sums)
  const double werr = std::sqrt(err2 / ex2);
  EXPECT_LT(werr, 0.1);    // and the quantization stays close to the unquantized one
  EXPECT_GT(werr, 1e-4);   // ... but is not a no-op
}

// The scan behind Mxfp4ExpertsView::big_scales: a scale above 128 (2^1) anywhere, at either end.
TEST(Mxfp4, AnyBigScaleFindsAScaleAboveTwo) {
  std::vector<uint8_t> s(1000, 127);
  EXPECT_FALSE(mxfp4_any_big_scale(s.data(), s.size()));
  s[999] = 128;
  EXPECT_FALSE(mxfp4_any_big_scale(s.data(), s.size()));
  s[999] = 129;
  EXPECT_TRUE(mxfp4_any_big_scale(s.data(), s.size()));
  EXPECT_FALSE(mxfp4_any_big_scale(s.data(), 999));
  s[0] = 255;
  EXPECT_TRUE(mxfp4_any_big_scale(s.data(), 1));
  EXPECT_FALSE(mxfp4_any_big_scale(s.data(), 0));
}

}  // namespace
}  // namespace osprey
