// The MXFP4 expert GEMMs (kernels/cuda/moe_gemm_mxfp4.cuh) against their CPU twin: the exact
// MXFP4 matmul (kernels/cpu) over BF16-rounded activations, at awkward sizes (1, 3, 129 and 600
// tokens; K = N = 2880, 22.5 blocks of 128), with an expert that gets no tokens and one that gets
// every token, through both the decode and the tiled path.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm_fp8.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"

namespace osprey {
namespace {

// E experts of random MXFP4 weights [N][K]: every E2M1 code, scales 2^(S - 127) with S in
// [lo, hi] (above 128 the decode multiplies twice; below 127 the subnormal code stays exact).
struct HostExperts {
  int E, N, K;
  std::vector<uint8_t> blocks, scales, relaid;  // [E][N][K/2], [E][N][K/32], the kernels' tiles
  std::vector<bf16> bias;                       // [E][N]
  HostExperts(int e, int n, int k, uint32_t seed, int lo = 118, int hi = 131) : E(e), N(n), K(k) {
    std::mt19937 rng(seed);
    blocks.resize(size_t(E) * N * K / 2);
    scales.resize(size_t(E) * N * K / 32);
    for (auto& b : blocks) b = uint8_t(rng());
    for (auto& s : scales) s = uint8_t(lo + int(rng() % unsigned(hi - lo + 1)));
    relaid.resize(mxfp4_tiles_bytes(N, K) * E);
    mxfp4_relayout_experts(blocks.data(), scales.data(), E, N, K, relaid.data());
    bias = randbf(size_t(E) * N, seed + 1);
  }
};

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
  return v;
}

// Choices [T][4] over E experts: choice 0 is always expert 0 (it gets every token), the others
// are distinct experts in [1, E - 1) (expert E - 1 gets none).
std::vector<int32_t> skewed_choices(int T, int E, uint32_t seed, int k = 4) {
  std::mt19937 rng(seed);
  std::vector<int32_t> idx;
  for (int t = 0; t < T; ++t) {
    std::vector<int> e(E - 2);
    std::iota(e.begin(), e.end(), 1);
    std::shuffle(e.begin(), e.end(), rng);
    idx.push_back(0);
    for (int j = 0; j < k - 1; ++j) idx.push_back(e[j]);
  }
  return idx;
}

// The worst relative error, over every (token, choice), of a grouped GEMM's output got [rows][N]
// (rows sorted by expert: pair_row) against the CPU twin, the exact MXFP4 matmul of the
// BF16-rounded input with the expert's bias; bias_after: got lacks the bias (it is added here).
double worst_against_cpu_twin(const HostExperts& W, const std::vector<int32_t>& idx, const std::vector<float>& x,
                              const std::vector<int32_t>& pair_row, const std::vector<float>& got, int T, int k,
                              bool bias_after = false) {
  const int N = W.N, K = W.K;
  const auto xr = round_bf16(x);
  std::vector<float> ref(N), row(N);
  double worst = 0;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = idx[size_t(t) * k + j], r = pair_row[size_t(t) * k + j];
      cpu::f32_mxfp4w_matmul(&xr[size_t(t) * K], &W.blocks[size_t(e) * N * K / 2], &W.scales[size_t(e) * N * K / 32],
                             &W.bias[size_t(e) * N], ref.data(), 1, N, K);
      for (int n = 0; n < N; ++n)
        row[n] = got[size_t(r) * N + n] + (bias_after ? bf16_to_f32(W.bias[size_t(e) * N + n]) : 0.0f);
      worst = std::max(worst, rel_err(row, ref));
    }
  return worst;
}

class MoeMxfp4 : public ::testing::TestWithParam<std::tuple<int, bool>> {};
INSTANTIATE_TEST_SUITE_P(Awkward, MoeMxfp4,
                         ::testing::Values(std::tuple{1, false}, std::tuple{3, false}, std::tuple{129, false},
                                           std::tuple{3, true}, std::tuple{129, true}, std::tuple{600, true}));

// A grouped GEMM's first inputs on the device: E experts of random MXFP4 weights [N][K] (seed
// w_seed; scales 118 to scale_hi), T tokens' top-k choices (skewed_choices, seed) sorted by expert (moe_sort), the tokens
// (seed + 1) as BF16 in the activation layout, and the first GEMM's rows (each reads its token's
// row) with the hint rows_per_expert.
struct GroupedInputs {
  int T, E, k, N, K, P;
  HostExperts W;
  std::vector<int32_t> idx;
  std::vector<float> x;
  Dev<int32_t> di, seg, row_token, pair_row, active;
  Dev<uint8_t> tiles;
  Dev<bf16> bias;
  Dev<float> dx;
  Dev<bf16> xb;
  cuda::Mxfp4ExpertsView view;
  cuda::ExpertRows rows;
  GroupedInputs(int T_, int E_, int k_, int N_, int K_, uint32_t w_seed, uint32_t seed, int hint, int scale_hi = 131)
      : T(T_), E(E_), k(k_), N(N_), K(K_), P(cuda::moe_rows_max(T_, k_, E_)), W(E_, N_, K_, w_seed, 118, scale_hi),
        idx(skewed_choices(T_, E_, seed, k_)), x(randf(size_t(T_) * K_, seed + 1, 2.0f)), di(idx), seg(E_ + 1),
        row_token(P), pair_row(idx.size()), active(E_), tiles(W.relaid), bias(W.bias), dx(x),
        xb(size_t(T_) * mxfp4_act_cols(K_)), view{tiles.p, as_dev_bf16(bias), E_, N_, K_} {
    cuda::moe_sort(di.p, T, k, E, seg.p, row_token.p, pair_row.p, active.p, nullptr);
    cuda::to_bf16_mxfp4_layout(dx.p, T, K, as_dev_bf16(xb), nullptr);
    rows.seg = seg.p, rows.active = active.p, rows.active_max = std::min(E, T * k);
    rows.row_live = row_token.p, rows.x_rows = row_token.p, rows.rows = P, rows.rows_per_expert = hint;
  }
};

void GroupedGemmCase(int T, bool tiled, int E, int k, int N, int K) {
  SCOPED_TRACE("T " + std::to_string(T) + " N " + std::to_string(N) + " K " + std::to_string(K));
  // The path: the row path up to 16 rows an expert, the wide path up to 48, the tiled path past.
  const GroupedInputs in(T, E, k, N, K, 70 + T, 71, tiled ? 64 : std::min(16, 2 * T));
  Dev<float> y(size_t(in.P) * N);
  cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view, as_dev_bf16(in.xb), in.rows, y.p, nullptr);
  const auto got = y.get();
  const auto hpair = in.pair_row.get(), hrow = in.row_token.get(), hseg = in.seg.get();
  EXPECT_EQ(hseg[E] - hseg[E - 1], 0) << "expert E - 1 gets no rows";
  EXPECT_EQ((hseg[1] - hseg[0]) / 4, (T + 3) / 4) << "expert 0 gets every token";
  EXPECT_LT(worst_against_cpu_twin(in.W, in.idx, in.x, hpair, got, T, k), 5e-6) << "T " << T << (tiled ? " tiled" : " decode");
  // The other paths sum in the same order (the same K splits, the same MMA slots): the same bits,
  // so a row's result does not depend on how many rows its step has. Hints 1 and 2 also read the
  // routing before the PDL wait (ExpertRows::routed_early, as the second GEMM does); 8 takes the
  // row path's 8-row passes, 16 its 16-row passes, 32 the wide path, 64 the tiled one in 64-row
  // tiles, 256 in 128-row tiles (moe_gemm_mxfp4.cu tiled_mt).
  for (int hint : {1, 2, 8, 16, 32, 64, 256}) {
    if (hint == in.rows.rows_per_expert) continue;
    SCOPED_TRACE("against rows_per_expert " + std::to_string(hint));
    Dev<float> y2(size_t(in.P) * N);
    cuda::ExpertRows other = in.rows;
    other.rows_per_expert = hint;
    other.routed_early = hint <= 2;
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view, as_dev_bf16(in.xb), other, y2.p, nullptr);
    const auto got2 = y2.get();
    for (int r = 0; r < hseg[E]; ++r) {
      if (hrow[r] < 0) continue;
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(got2[size_t(r) * N + n], got[size_t(r) * N + n]) << "row " << r << " column " << n;
    }
  }
  // The decode path leaves padding rows as they were (poisoned: NaN); the tiled path computes them
  // from zero rows: the bias.
  for (int r = 0; r < hseg[E]; ++r)
    if (hrow[r] < 0) {
      if (tiled) {
        const int e = int(std::upper_bound(hseg.begin(), hseg.end(), r) - hseg.begin()) - 1;
        EXPECT_EQ(got[size_t(r) * N + 5], bf16_to_f32(in.W.bias[size_t(e) * N + 5]));
      } else {
        EXPECT_TRUE(std::isnan(got[size_t(r) * N + 5]));
      }
    }
}

TEST_P(MoeMxfp4, GroupedGemmEqualsCpuTwin) {
  const auto [T, tiled] = GetParam();
  GroupedGemmCase(T, tiled, 8, 4, 2880, 2880);
}

// The first GEMM's SwiGLU epilogue (SwigluOut): on every path, what moe_swiglu_bf16 writes from
// the fp32 product, bit for bit, over every position of the live rows (the zeros past N / 2
// included: the buffers start poisoned). The one-wave decode kernel computes it in its epilogue:
// 1 token top-4 of 8 experts (one pass), and 9 tokens top-1 of 4 (expert 0 gets all 9: two
// passes). 3 and 129 tokens take the other decode kernel, the wide and the tiled paths (both tile
// heights), which run the SwiGLU kernel after the product.
TEST(MoeMxfp4, SwigluEpilogueEqualsTheSwigluKernel) {
  const int N = 2 * 1440, K = 2880, I = N / 2, Ip = mxfp4_act_cols(I);
  struct Case {
    int E, k, T;
  };
  for (const Case cs : {Case{8, 4, 1}, Case{4, 1, 9}, Case{8, 4, 3}, Case{8, 4, 129}})
    for (int hint : {std::min(16, 2 * cs.T), 32, 64, 256}) {
      const int E = cs.E, k = cs.k, T = cs.T;
      SCOPED_TRACE("T " + std::to_string(T) + " top-" + std::to_string(k) + " of " + std::to_string(E) +
                   ", rows_per_expert " + std::to_string(hint));
      const GroupedInputs in(T, E, k, N, K, 170 + T, 171, hint);
      const int P = in.P;
      Dev<float> y(size_t(P) * N), y2(size_t(P) * N);
      Dev<bf16> want(size_t(P) * Ip), got(size_t(P) * Ip);
      cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view, as_dev_bf16(in.xb), in.rows, y.p, nullptr);
      cuda::moe_swiglu_bf16(y.p, in.seg.p + E, P, I, 1.702f, 7.0f, as_dev_bf16(want), nullptr);
      const cuda::SwigluOut sw{as_dev_bf16(got), 1.702f, 7.0f};
      cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view, as_dev_bf16(in.xb), in.rows, y2.p, nullptr, &sw);
      const auto hw = want.get(), hg = got.get();
      const auto hrow = in.row_token.get(), hseg = in.seg.get();
      for (int r = 0; r < hseg[E]; ++r) {
        if (hrow[r] < 0) continue;  // padding: the decode path leaves it
        for (int p = 0; p < Ip; ++p)
          ASSERT_EQ(hg[size_t(r) * Ip + p], hw[size_t(r) * Ip + p]) << "row " << r << " position " << p;
      }
    }
}

// The long prompt chunks' wgmma path (m_grouped_mxfp4_gemm_bf16_wgmma_contiguous, the weights
// decoded in registers, the rows gathered into the wgmma layout): the tiled path's bits on every
// row of the experts' runs (the padding rows too: zero rows, the bias), with and without scales
// above 128, at K = 2880 (22.5 blocks), N = 2880 (a last weight tile of 64 rows, two K splits on
// 132 SMs), N = 5760 and N = 160 (a warpgroup with one live warp); and its SwiGLU epilogue, moe_swiglu_bf16 of the tiled path's product
// moved to the wgmma layout (zeros past N / 2), on the live rows.
TEST(MoeMxfp4, WgmmaPathEqualsTheTiledPath) {
  struct Case {
    int T, E, k, N, scale_hi;
  };
  const int K = 2880, Kp = mxfp4_act_cols(K);
  for (const Case cs : {Case{129, 8, 4, 2880, 131}, Case{600, 8, 4, 2880, 128}, Case{300, 8, 4, 5760, 131},
                        Case{300, 4, 1, 5760, 128}, Case{200, 6, 3, 160, 131}}) {
    const int T = cs.T, E = cs.E, k = cs.k, N = cs.N;
    SCOPED_TRACE("T " + std::to_string(T) + " top-" + std::to_string(k) + " of " + std::to_string(E) + ", N " +
                 std::to_string(N) + ", scales to " + std::to_string(cs.scale_hi));
    GroupedInputs in(T, E, k, N, K, 270 + T, 271, 256, cs.scale_hi);
    in.view.big_scales = cs.scale_hi > kMxfp4OneMultiplyMaxScale;
    const int P = in.P, I = N / 2, Ip = mxfp4_act_cols(I);
    Dev<float> want(size_t(P) * N), got(size_t(P) * N), got2(size_t(P) * N);
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(in.view, as_dev_bf16(in.xb), in.rows, want.p, nullptr);
    Dev<bf16> xs(size_t(P) * Kp);
    cuda::mxfp4_rows_to_wgmma_layout(as_dev_bf16(in.xb), in.row_token.p, in.seg.p + E, P, K, as_dev_bf16(xs), nullptr);
    cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(in.view, as_dev_bf16(xs), in.rows, got.p, nullptr);
    const auto hw = want.get(), hg = got.get();
    const auto hrow = in.row_token.get(), hseg = in.seg.get();
    ASSERT_GT(hseg[E], 0);
    for (int r = 0; r < hseg[E]; ++r)
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(hg[size_t(r) * N + n], hw[size_t(r) * N + n]) << "row " << r << " (token " << hrow[r] << ") column " << n;
    if (N % 2) continue;
    Dev<bf16> a_want(size_t(P) * Ip), a_got(size_t(P) * Ip);
    cuda::moe_swiglu_bf16(want.p, in.seg.p + E, P, I, 1.702f, 7.0f, as_dev_bf16(a_want), nullptr);
    const cuda::SwigluOut sw{as_dev_bf16(a_got), 1.702f, 7.0f};
    cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(in.view, as_dev_bf16(xs), in.rows, got2.p, nullptr, &sw);
    const auto haw = a_want.get(), hag = a_got.get();
    for (int r = 0; r < hseg[E]; ++r) {
      if (hrow[r] < 0) continue;
      for (int o = 0; o < Ip; ++o)
        ASSERT_EQ(hag[size_t(r) * Ip + mxfp4_wgmma_position(o)], haw[size_t(r) * Ip + mxfp4_act_position(o)])
            << "row " << r << " output " << o;
    }
  }
}

// The gather into the wgmma layout: every row (src null), the rows src names (negative: zeros), and
// zeros past the device's row count.
TEST(MoeMxfp4, RowsToWgmmaLayoutMovesEveryColumn) {
  const int T = 5, K = 2880, Kp = mxfp4_act_cols(K);
  std::vector<bf16> h(size_t(T) * Kp);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(float(int(i % 1999) - 999));
  const Dev<bf16> x(h);
  const Dev<int32_t> src(std::vector<int32_t>{4, -1, 0, 2, 3, 1}), end(std::vector<int32_t>{4});
  Dev<bf16> all(size_t(T) * Kp), some(size_t(6) * Kp);
  cuda::mxfp4_rows_to_wgmma_layout(as_dev_bf16(x), nullptr, nullptr, T, K, as_dev_bf16(all), nullptr);
  cuda::mxfp4_rows_to_wgmma_layout(as_dev_bf16(x), src.p, end.p, 6, K, as_dev_bf16(some), nullptr);
  const auto ha = all.get(), hs = some.get();
  const int from[6] = {4, -1, 0, 2, -1, -1};  // rows 4 and 5 are past the count (4)
  for (int k = 0; k < Kp; ++k) {
    const int a = mxfp4_act_position(k), w = mxfp4_wgmma_position(k);
    for (int t = 0; t < T; ++t) ASSERT_EQ(ha[size_t(t) * Kp + w], h[size_t(t) * Kp + a]) << "row " << t << " column " << k;
    for (int r = 0; r < 6; ++r)
      ASSERT_EQ(hs[size_t(r) * Kp + w], from[r] < 0 ? bf16(0) : h[size_t(from[r]) * Kp + a])
          << "row " << r << " column " << k;
  }
}

// Weights without a scale above 128 (those of trained experts): the decode kernels that leave out
// the second multiply's test (Mxfp4ExpertsView::big_scales false) give the general kernels' bits,
// on the row path's one-wave (1 token) and two-chunk (40 tokens, 32 experts) 8-row passes and its
// 16-row passes, and stay at the CPU twin.
TEST(MoeMxfp4, OneMultiplyDecodeEqualsTheGeneralOne) {
  const int N = 2880, K = 2880, k = 4;
  struct Case {
    int T, E, hint;
  };
  for (const Case cs : {Case{1, 8, 1}, Case{40, 32, 8}, Case{40, 32, 16}}) {
    SCOPED_TRACE("T " + std::to_string(cs.T) + ", " + std::to_string(cs.E) + " experts, rows_per_expert " +
                 std::to_string(cs.hint));
    GroupedInputs in(cs.T, cs.E, k, N, K, 270 + cs.T, 271, cs.hint, /*scale_hi=*/128);
    ASSERT_FALSE(mxfp4_any_big_scale(in.W.scales.data(), in.W.scales.size()));
    cuda::Mxfp4ExpertsView general = in.view, one = in.view;
    general.big_scales = true, one.big_scales = false;
    Dev<float> y1(size_t(in.P) * N), y2(size_t(in.P) * N);
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(general, as_dev_bf16(in.xb), in.rows, y1.p, nullptr);
    cuda::m_grouped_mxfp4_gemm_bf16_contiguous(one, as_dev_bf16(in.xb), in.rows, y2.p, nullptr);
    const auto g1 = y1.get(), g2 = y2.get();
    const auto hrow = in.row_token.get(), hseg = in.seg.get(), hpair = in.pair_row.get();
    for (int r = 0; r < hseg[cs.E]; ++r) {
      if (hrow[r] < 0) continue;
      for (int n = 0; n < N; ++n) ASSERT_EQ(g2[size_t(r) * N + n], g1[size_t(r) * N + n]) << "row " << r << " column " << n;
    }
    EXPECT_LT(worst_against_cpu_twin(in.W, in.idx, in.x, hpair, g2, cs.T, k), 5e-6);
  }
}

// The parity-b shapes (hidden 160, intermediate 64: K of 1.25 and 0.5 blocks), 6 experts, top-3.
TEST(MoeMxfp4, SmallShapesEqualCpuTwin) {
  for (int T : {5, 48})
    for (bool tiled : {false, true}) {
      GroupedGemmCase(T, tiled, 6, 3, 128, 160);
      GroupedGemmCase(T, tiled, 6, 3, 160, 64);
    }
}

// Every weight code at scales across the whole E8M0 range the decode handles in one or two
// multiplies, one GEMM row against a one-hot activation per column: exactly the decoded weight.
TEST(MoeMxfp4, DecodeIsExactForEveryCodeAndScale) {
  const int E = 1, N = 16, K = 256, T = 1;
  for (auto [lo, hi] : {std::pair{3, 40}, std::pair{100, 140}, std::pair{200, 250}}) {
    HostExperts W(E, N, K, 90 + lo, lo, hi);
    std::fill(W.bias.begin(), W.bias.end(), f32_to_bf16(0.0f));
    Dev<uint8_t> tiles(W.relaid);
    Dev<bf16> bias(W.bias);
    // Scales 3-40 have no second multiply: the decode without its test (big_scales false).
    const cuda::Mxfp4ExpertsView view{tiles.p, as_dev_bf16(bias), E, N, K,
                                      mxfp4_any_big_scale(W.scales.data(), W.scales.size())};
    EXPECT_EQ(view.big_scales, hi > 128);
    std::vector<int32_t> seg = {0, 1}, act = {0};
    Dev<int32_t> dseg(seg), dact(act);
    for (int col : {0, 5, 37, 100, 131, 255}) {
      std::vector<float> x(K, 0.0f);
      x[col] = 1.0f;
      Dev<float> dx(x), y{size_t(N)};
      Dev<bf16> xb(size_t(mxfp4_act_cols(K)));
      cuda::to_bf16_mxfp4_layout(dx.p, T, K, as_dev_bf16(xb), nullptr);
      cuda::ExpertRows rows;
      rows.seg = dseg.p, rows.active = dact.p, rows.active_max = 1, rows.rows = 1, rows.rows_per_expert = 1;
      cuda::m_grouped_mxfp4_gemm_bf16_contiguous(view, as_dev_bf16(xb), rows, y.p, nullptr);
      const auto got = y.get();
      std::vector<float> dec(K);
      for (int n = 0; n < N; ++n) {
        mxfp4_decode_row(&W.blocks[size_t(n) * K / 2], &W.scales[size_t(n) * K / 32], K, dec.data());
        ASSERT_EQ(got[n], dec[col]) << "row " << n << " column " << col << " scales [" << lo << ", " << hi << "]";
      }
    }
  }
}

TEST(MoeMxfp4, ActivationLayoutAndSwiglu) {
  const int T = 5, K = 2880, Kp = mxfp4_act_cols(K);
  const auto x = randf(size_t(T) * K, 80, 3.0f);
  Dev<float> dx(x);
  Dev<bf16> xb(size_t(T) * Kp);
  cuda::to_bf16_mxfp4_layout(dx.p, T, K, as_dev_bf16(xb), nullptr);
  const auto got = xb.get();
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < Kp; ++p) {
      const int c = mxfp4_act_column(p);
      const float want = c < K ? bf16_to_f32(f32_to_bf16(x[size_t(t) * K + c])) : 0.0f;
      ASSERT_EQ(bf16_to_f32(got[size_t(t) * Kp + p]), want) << "row " << t << " position " << p;
    }
  // SwiGLU: rows below the device count, each as the CPU twin then rounded to BF16 (expf may
  // differ by an ulp of fp32: compare to one BF16 ulp).
  const int I = 2880, rows_max = 7, live = 5;
  const auto t1 = randf(size_t(rows_max) * 2 * I, 81, 8.0f);
  Dev<float> dt(t1);
  Dev<int32_t> end(std::vector<int32_t>{live});
  Dev<bf16> a(size_t(rows_max) * Kp);
  cuda::moe_swiglu_bf16(dt.p, end.p, rows_max, I, 1.702f, 7.0f, as_dev_bf16(a), nullptr);
  const auto ga = a.get();
  std::vector<float> ref(size_t(rows_max) * I);
  cpu::f32_swiglu_clamped(t1.data(), ref.data(), rows_max, I, 1.702f, 7.0f);
  for (int r = 0; r < rows_max; ++r)
    for (int p = 0; p < Kp; ++p) {
      const uint16_t bits = ga[size_t(r) * Kp + p];
      if (r >= live) {
        ASSERT_EQ(bits, 0xFFFF) << "rows past the count are left as they were";
        continue;
      }
      const int c = mxfp4_act_column(p);
      const float want = c < I ? ref[size_t(r) * I + c] : 0.0f, v = bf16_to_f32(ga[size_t(r) * Kp + p]);
      ASSERT_LE(std::fabs(v - want), std::fabs(want) * (1.0f / 128) + 1e-30f) << "row " << r << " column " << c;
    }
  // With the experts' biases (the cuBLAS path's products lack them): rows 0-1 of expert 0, rows
  // 2-4 of expert 2 (expert 1 has none); each row's bias added to gate and up first.
  const int E = 3;
  const auto bias = randbf(size_t(E) * 2 * I, 83);
  Dev<bf16> db(bias), a2(size_t(rows_max) * Kp);
  Dev<int32_t> seg(std::vector<int32_t>{0, 2, 2, 5});
  cuda::moe_swiglu_bf16(dt.p, end.p, rows_max, I, 1.702f, 7.0f, as_dev_bf16(a2), nullptr, as_dev_bf16(db), seg.p, E);
  const auto gb = a2.get();
  std::vector<float> tb(t1);
  for (int r = 0; r < live; ++r)
    for (int j = 0; j < 2 * I; ++j) tb[size_t(r) * 2 * I + j] += bf16_to_f32(bias[size_t(r < 2 ? 0 : 2) * 2 * I + j]);
  cpu::f32_swiglu_clamped(tb.data(), ref.data(), rows_max, I, 1.702f, 7.0f);
  for (int r = 0; r < live; ++r)
    for (int p = 0; p < Kp; ++p) {
      const int c = mxfp4_act_column(p);
      const float want = c < I ? ref[size_t(r) * I + c] : 0.0f, v = bf16_to_f32(gb[size_t(r) * Kp + p]);
      ASSERT_LE(std::fabs(v - want), std::fabs(want) * (1.0f / 128) + 1e-30f) << "biased row " << r << " column " << c;
    }
}

// The BF16 decode for the prefill's cuBLAS path: every expert with rows exactly as the reference
// decode, each value where the activation layout puts its column (zeros past K = 2880); an
// expert without rows left as it was. Scales across the range, from 2^-127 (subnormal values).
TEST(MoeMxfp4, ExpertsToBf16AreExactInTheActivationLayout) {
  const int E = 3, N = 32, K = 2880, Kp = mxfp4_act_cols(K);
  for (auto [lo, hi] : {std::pair{0, 40}, std::pair{100, 140}, std::pair{200, 250}}) {
    HostExperts W(E, N, K, 95 + lo, lo, hi);
    Dev<uint8_t> tiles(W.relaid);
    Dev<int32_t> seg(std::vector<int32_t>{0, 4, 4, 12});  // expert 1 has no rows
    Dev<bf16> out(size_t(E) * N * Kp);
    OSPREY_CUDA_CHECK(cudaMemset(out.p, 0xFF, out.n * 2));
    cuda::mxfp4_experts_to_bf16({tiles.p, nullptr, E, N, K}, seg.p, as_dev_bf16(out), nullptr);
    const auto got = out.get();
    std::vector<float> dec(K);
    for (int e = 0; e < E; ++e)
      for (int n = 0; n < N; ++n) {
        const size_t row = size_t(e) * N + n;
        mxfp4_decode_row(&W.blocks[row * K / 2], &W.scales[row * K / 32], K, dec.data());
        for (int p = 0; p < Kp; ++p) {
          const uint16_t bits = got[row * Kp + p];
          if (e == 1) {
            ASSERT_EQ(bits, 0xFFFF) << "an expert without rows is not decoded";
            continue;
          }
          const int c = mxfp4_act_column(p);
          ASSERT_EQ(bf16_to_f32(bits), c < K ? dec[c] : 0.0f)
              << "expert " << e << " row " << n << " column " << c << " scales [" << lo << ", " << hi << "]";
        }
      }
  }
}

// The prefill's cuBLAS path end to end, as the model runs it: the experts decoded to BF16, the
// rows gathered by expert, one BF16 GEMM per expert with rows, the bias added after: each row as
// the CPU twin (the exact MXFP4 matmul of the BF16-rounded input), up to the order of sums.
TEST(MoeMxfp4, DecodedExpertsThroughCublasEqualCpuTwin) {
  const int T = 200, E = 5, k = 4, N = 64, K = 2880, Kp = mxfp4_act_cols(K);
  const HostExperts W(E, N, K, 97);
  const auto idx = skewed_choices(T, E, 98, k);
  const auto x = randf(size_t(T) * K, 99, 2.0f);
  const int P = cuda::moe_rows_max(T, k, E);
  Dev<int32_t> di(idx), seg(E + 1), row_token(P), pair_row(idx.size()), active(E);
  cuda::moe_sort(di.p, T, k, E, seg.p, row_token.p, pair_row.p, active.p, nullptr);
  const auto hseg = seg.get(), hpair = pair_row.get();
  Dev<uint8_t> tiles(W.relaid);
  Dev<float> dx(x), y(size_t(P) * N);
  Dev<bf16> xb(size_t(P) * Kp), wb(size_t(E) * N * Kp);
  cuda::mxfp4_experts_to_bf16({tiles.p, nullptr, E, N, K}, seg.p, as_dev_bf16(wb), nullptr);
  cuda::to_bf16_mxfp4_layout(dx.p, hseg[E], K, as_dev_bf16(xb), nullptr, row_token.p);
  cuda::Blas blas(nullptr);
  for (int e = 0; e < E; ++e)
    if (hseg[e + 1] > hseg[e])
      blas.gemm_bf16(as_dev_bf16(wb) + size_t(e) * N * Kp, as_dev_bf16(xb) + size_t(hseg[e]) * Kp,
                     y.p + size_t(hseg[e]) * N, hseg[e + 1] - hseg[e], N, Kp);
  EXPECT_LT(worst_against_cpu_twin(W, idx, x, hpair, y.get(), T, k, /*bias_after=*/true), 5e-6);
}

// The gathered layout: row r of the output is input row in_rows[r] (zeros for padding, -1).
TEST(MoeMxfp4, ActivationLayoutGathersRows) {
  const int T = 4, K = 2880, Kp = mxfp4_act_cols(K);
  const auto x = randf(size_t(T) * K, 82, 3.0f);
  const std::vector<int32_t> rows = {2, -1, 0, 2, 3, -1};
  Dev<float> dx(x);
  Dev<int32_t> dr(rows);
  Dev<bf16> plain(size_t(T) * Kp), gathered(rows.size() * Kp);
  cuda::to_bf16_mxfp4_layout(dx.p, T, K, as_dev_bf16(plain), nullptr);
  cuda::to_bf16_mxfp4_layout(dx.p, int(rows.size()), K, as_dev_bf16(gathered), nullptr, dr.p);
  const auto a = plain.get(), b = gathered.get();
  for (size_t r = 0; r < rows.size(); ++r)
    for (int p = 0; p < Kp; ++p)
      ASSERT_EQ(b[r * Kp + p], rows[r] < 0 ? uint16_t(0) : a[size_t(rows[r]) * Kp + p]) << "row " << r;
}

// The W4A8 conversion of long chunks (mxfp4_experts_to_fp8) gives formats/mxfp4.h's codes and
// scales bit for bit, from the kernels' tiles, in blocks of 1 and of 128 rows: scales 2^(S - 127)
// with S over [100, 140], so that blocks span past 2^14 (their small values round) as well as
// within it; K = 2880 ends in half a block, N = 176 in a short row block. An expert without rows
// keeps what its buffers held, and so do the scales' padding entries; without segments every
// expert converts.
TEST(MoeMxfp4, Fp8ConversionEqualsItsCpuTwin) {
  const int E = 3, N = 176, K = 2880;
  const HostExperts W(E, N, K, 31, 100, 140);
  const std::vector<int32_t> seg = {0, 8, 12, 12};  // expert 2: no rows
  Dev<int32_t> dseg(seg);
  Dev<uint8_t> tiles(W.relaid);
  for (int rows : {1, 128}) {
    SCOPED_TRACE("blocks of " + std::to_string(rows) + " rows");
    size_t inexact = 0;
    for (int e = 0; e < E; ++e) inexact += mxfp4_fp8_inexact_blocks(&W.scales[size_t(e) * N * K / 32], N, K, rows);
    EXPECT_GT(inexact, 0u) << "the case should cover blocks that round";
    if (rows == 1) {
      EXPECT_LT(inexact, size_t(E) * N * 23) << "and blocks that convert exactly";
    }
    const size_t sper = mxfp4_fp8_scales_size(N, K, rows) + 5;
    const std::vector<uint8_t> smax = mxfp4_fp8_blocks(W.scales.data(), E, N, K).smax;
    Dev<uint8_t> codes(std::vector<uint8_t>(size_t(E) * N * K, 0xA5)), dsmax(smax);
    Dev<float> scales(std::vector<float>(size_t(E) * sper, -3.0f));
    cuda::mxfp4_experts_to_fp8({tiles.p, nullptr, E, N, K}, dseg.p, {codes.p, scales.p, sper, rows, dsmax.p}, nullptr);
    const auto gc = codes.get();
    const auto gs = scales.get();
    std::vector<uint8_t> rc(size_t(N) * K);
    for (int e = 0; e < E; ++e) {
      SCOPED_TRACE("expert " + std::to_string(e));
      std::vector<float> rs(sper, -3.0f);
      mxfp4_to_fp8(&W.blocks[size_t(e) * N * K / 2], &W.scales[size_t(e) * N * K / 32], N, K, rows, rc.data(), rs.data());
      for (size_t i = 0; i < rc.size(); ++i)
        ASSERT_EQ(int(gc[size_t(e) * N * K + i]), e == 2 ? 0xA5 : int(rc[i])) << "code " << i;
      for (size_t i = 0; i < sper; ++i) ASSERT_EQ(gs[size_t(e) * sper + i], e == 2 ? -3.0f : rs[i]) << "scale " << i;
    }
    // Without segments (the model converts a layer ahead, before its routing): every expert.
    cuda::mxfp4_experts_to_fp8({tiles.p, nullptr, E, N, K}, nullptr, {codes.p, scales.p, sper, rows, dsmax.p}, nullptr);
    const auto all = codes.get();
    std::vector<float> rs(sper, -3.0f);
    mxfp4_to_fp8(&W.blocks[size_t(2) * N * K / 2], &W.scales[size_t(2) * N * K / 32], N, K, rows, rc.data(), rs.data());
    for (size_t i = 0; i < rc.size(); ++i) ASSERT_EQ(all[size_t(2) * N * K + i], rc[i]) << "expert 2 without segments, code " << i;
    const auto alls = scales.get();
    for (size_t i = 0; i < sper; ++i) ASSERT_EQ(alls[size_t(2) * sper + i], rs[i]) << "expert 2 without segments, scale " << i;
  }
}

// W4A8 end to end as the model runs a long chunk's experts: the weights converted on the GPU, the
// rows quantized to FP8 in 1x128 blocks, cuBLASLt per expert with 1x128 and with 128x128 weight
// scales. Against the CPU twin (f32_fp8w_matmul over the converted weights) up to cuBLASLt's FP8
// accumulation; and the twin, the scales here spanning less than 2^14, against the exact MXFP4
// matmul of the same FP8-rounded rows up to the order of sums: the conversion loses nothing. Rows per expert 4, 12 and 200 (M % 4 == 0, as
// sorted); N = 320 ends in a short row block.
TEST(MoeMxfp4, W4a8ExpertsThroughCublasLtEqualCpuTwin) {
  const int E = 3, N = 320, K = 2880, KB = (K + 127) / 128;
  const HostExperts W(E, N, K, 57, 118, 131);
  ASSERT_EQ(mxfp4_fp8_blocks(W.scales.data(), E, N, K).block_rows, 128);
  const std::vector<int> rows = {4, 12, 200};
  std::vector<int32_t> seg = {0};
  for (int r : rows) seg.push_back(seg.back() + r);
  Dev<int32_t> dseg(seg);
  Dev<uint8_t> tiles(W.relaid);
  cuda::BlockFp8Gemm lt(nullptr);
  for (int block_rows : {1, 128}) {
    SCOPED_TRACE("blocks of " + std::to_string(block_rows) + " rows");
    const auto mode = block_rows == 1 ? cuda::WeightScales::Row1x128 : cuda::WeightScales::Block128x128;
    const size_t sper = mxfp4_fp8_scales_size(N, K, block_rows);
    const std::vector<uint8_t> smax = mxfp4_fp8_blocks(W.scales.data(), E, N, K).smax;
    Dev<uint8_t> codes(size_t(E) * N * K), dsmax(smax);
    Dev<float> scales(std::vector<float>(size_t(E) * sper, 1.0f));
    cuda::mxfp4_experts_to_fp8({tiles.p, nullptr, E, N, K}, dseg.p, {codes.p, scales.p, sper, block_rows, dsmax.p},
                               nullptr);
    std::vector<uint8_t> rc(size_t(N) * K);
    std::vector<float> rs(sper, 1.0f);
    for (int e = 0; e < E; ++e) {
      const int M = rows[e];
      SCOPED_TRACE("expert " + std::to_string(e) + ", " + std::to_string(M) + " rows");
      ASSERT_TRUE(lt.available(M, N, K, mode)) << "cuBLASLt: no algorithm for these weight scales";
      const auto x = randf(size_t(M) * K, 58 + e, 2.0f);
      std::vector<uint8_t> xq(size_t(M) * K);
      std::vector<float> xs(size_t(KB) * M);
      fp8::quantize_activations(x.data(), M, K, xq.data(), xs.data(), M);
      Dev<uint8_t> dxq(xq);
      Dev<float> dxs(xs), y(size_t(M) * N);
      lt.run(codes.p + size_t(e) * N * K, scales.p + size_t(e) * sper, dxq.p, dxs.p, y.p, M, N, K, mode);
      const auto got = y.get();
      mxfp4_to_fp8(&W.blocks[size_t(e) * N * K / 2], &W.scales[size_t(e) * N * K / 32], N, K, block_rows, rc.data(),
                   rs.data());
      const cpu::Fp8WeightScales ws = block_rows == 1 ? cpu::Fp8WeightScales{rs.data(), 1, 1, size_t(N)}
                                                      : cpu::Fp8WeightScales{rs.data(), 128, size_t(fp8::round4(KB)), 1};
      std::vector<float> twin(size_t(M) * N), exact(size_t(M) * N), xd(size_t(M) * K);
      cpu::f32_fp8w_matmul(x.data(), rc.data(), ws, nullptr, twin.data(), M, N, K);
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k)
          xd[size_t(m) * K + k] = fp8::to_f32(xq[size_t(m) * K + k]) * xs[size_t(k / 128) * M + m];
      cpu::f32_mxfp4w_matmul(xd.data(), &W.blocks[size_t(e) * N * K / 2], &W.scales[size_t(e) * N * K / 32], nullptr,
                             exact.data(), M, N, K);
      // cuBLASLt's FP8 products are ~1-2e-4 from exact fp32 sums (measured on the H200, as in
      // CudaFp8.CublasLtScaleLayout*); a wrong scale or layout gives O(1).
      EXPECT_LT(rel_err(got, twin), 5e-4);
      EXPECT_LT(rel_err(twin, exact), 1e-6) << "the conversion lost something";
    }
  }
}

}  // namespace
}  // namespace osprey
