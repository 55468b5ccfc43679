// The FP8 path's kernels against their CPU twins: the quantizers bit for bit, the skinny GEMM
// (dense and grouped by expert) and cuBLASLt's block-scaled GEMM against the CPU emulation,
// paged attention against the CPU attention over the same BF16 keys and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <tuple>

#include "cuda_test_util.h"
#include "formats/fp8.h"
#include "formats/kv_dtype.h"
#include "formats/kv_fp8.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm_fp8.cuh"
#include "kernels/cuda/moe_gemm_fp8.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/decode_persistent.cuh"

namespace osprey {
namespace {

class Fp8Tokens : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Awkward, Fp8Tokens, ::testing::Values(1, 3, 129));

// CPU reference quantization of a bf16 matrix.
fp8::Matrix cpu_quantize(const std::vector<bf16>& w, int rows, int cols) {
  fp8::Matrix m;
  m.allocate(1, rows, cols);
  fp8::quantize_row_blocks(m, 0, 0, fp8::blocks(rows), [&](int r, float* out) {
    for (int c = 0; c < cols; ++c) out[c] = bf16_to_f32(w[size_t(r) * cols + c]);
  });
  return m;
}

// The same matrix on the device.
struct DevFp8 {
  Dev<uint8_t> q;
  Dev<float> s;
  explicit DevFp8(const fp8::Matrix& m) : q(m.q), s(m.scales) {}
};

// E random expert matrices [E][N][K] (bf16 with seeds seed, seed + 1, ..), quantized on the host.
fp8::Matrix random_experts(int E, int N, int K, uint32_t seed) {
  fp8::Matrix all;
  all.allocate(E, N, K);
  for (int e = 0; e < E; ++e) {
    fp8::Matrix m = cpu_quantize(randbf(size_t(N) * K, seed + e), N, K);
    std::copy(m.q.begin(), m.q.end(), all.q.begin() + size_t(e) * N * K);
    std::copy(m.scales.begin(), m.scales.end(), all.scales.begin() + size_t(e) * all.scales_per_matrix());
  }
  return all;
}

// Choices [T][k] spread over E experts: token t's j-th expert is (a t + b j) mod E.
std::vector<int32_t> modular_choices(int T, int k, int E, int a, int b) {
  std::vector<int32_t> idx(size_t(T) * k);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) idx[size_t(t) * k + j] = (a * t + b * j) % E;
  return idx;
}

// The (token, choice) pairs `choices` [T][k] and their sort by expert on the device (moe_sort).
struct DevSortedPairs {
  Dev<int32_t> idx, seg, row_token, pair_row, active;
  DevSortedPairs(const std::vector<int32_t>& choices, int T, int k, int E)
      : idx(choices), seg(E + 1), row_token(cuda::moe_rows_max(T, k, E)), pair_row(choices.size()), active(E) {
    cuda::moe_sort(idx.p, T, k, E, seg.p, row_token.p, pair_row.p, active.p, nullptr);
  }
};

void expect_same_fp8(const fp8::Matrix& ref, const std::vector<uint8_t>& q, const std::vector<float>& s) {
  for (size_t i = 0; i < ref.q.size(); ++i) ASSERT_EQ(q[i], ref.q[i]) << "code " << i;
  for (int rb = 0; rb < fp8::blocks(ref.rows); ++rb)
    for (int cb = 0; cb < fp8::blocks(ref.cols); ++cb) {
      const size_t i = size_t(rb) * ref.scale_stride() + cb;
      ASSERT_EQ(s[i], ref.scales[i]) << "scale " << rb << "," << cb;
    }
}

// moe_sort against a host count: each expert's run starts at the sum of the runs before it
// (counts rounded up to 4), the active experts in order then -1, every pair in its expert's run
// once and the run's padding rows -1. E of one warp's width and past it, one that is not a
// multiple of 32, experts without pairs, and P below E (active's -1 tail ends at P).
TEST(CudaFp8, MoeSortLaysRunsOutAsTheHostCounts) {
  for (auto [T, k, E] : {std::tuple{1, 4, 32}, std::tuple{3, 4, 128}, std::tuple{64, 4, 37}, std::tuple{200, 4, 256},
                         std::tuple{1000, 4, 128}}) {
    SCOPED_TRACE("T " + std::to_string(T) + " E " + std::to_string(E));
    std::vector<int32_t> choices(size_t(T) * k);
    for (int t = 0; t < T; ++t)  // distinct experts a token, skewed so that some get none
      for (int j = 0; j < k; ++j) choices[size_t(t) * k + j] = (t * t % (E / 2 + 1) + j * (E / k)) % E;
    const DevSortedPairs d(choices, T, k, E);
    std::vector<int> cnt(E, 0);
    for (int e : choices) ++cnt[e];
    std::vector<int32_t> seg(E + 1, 0), active;
    for (int e = 0; e < E; ++e) {
      seg[e + 1] = seg[e] + (cnt[e] + 3) / 4 * 4;
      if (cnt[e]) active.push_back(e);
    }
    while (active.size() < size_t(std::min(E, T * k))) active.push_back(-1);
    EXPECT_EQ(d.seg.get(), seg);
    const auto act = d.active.get();
    EXPECT_EQ(std::vector<int32_t>(act.begin(), act.begin() + active.size()), active);
    const auto rt = d.row_token.get(), pr = d.pair_row.get();
    std::vector<int> used(static_cast<size_t>(seg[E]), 0);
    for (int p = 0; p < T * k; ++p) {
      const int r = pr[p], e = choices[p];
      ASSERT_TRUE(r >= seg[e] && r < seg[e] + cnt[e]) << "pair " << p;
      ASSERT_EQ(rt[r], p / k);
      ASSERT_EQ(used[r]++, 0);
    }
    for (int e = 0; e < E; ++e)
      for (int r = seg[e] + cnt[e]; r < seg[e + 1]; ++r) ASSERT_EQ(rt[r], -1) << "padding row " << r;
  }
}

TEST(CudaFp8, QuantizeBf16BitIdenticalToCpu) {
  const int R = 300, C = 2880;  // partial row block, 22.5 column blocks
  auto w = randbf(size_t(R) * C, 30, 3.0f);
  w[5] = f32_to_bf16(0.0f);
  fp8::Matrix ref = cpu_quantize(w, R, C);
  Dev<bf16> dw(w);
  Dev<uint8_t> q(ref.q.size());
  Dev<float> s(std::vector<float>(ref.scales.size(), 1.0f));
  cuda::quantize_bf16_block128(as_dev_bf16(dw), R, C, q.p, s.p, ref.scale_stride(), nullptr);
  expect_same_fp8(ref, q.get(), s.get());
}

TEST(CudaFp8, QuantizeMxfp4BitIdenticalToCpu) {
  const int R = 260, C = 2880;
  const auto [blocks, scales] = random_mxfp4(size_t(R) * C, 31, 112, 16);
  fp8::Matrix ref;
  ref.allocate(1, R, C);
  fp8::quantize_row_blocks(ref, 0, 0, fp8::blocks(R), [&](int r, float* out) {
    mxfp4_decode_row(&blocks[size_t(r) * C / 2], &scales[size_t(r) * C / 32], C, out);
  });
  Dev<uint8_t> db(blocks), ds(scales), q(ref.q.size());
  Dev<float> s(std::vector<float>(ref.scales.size(), 1.0f));
  cuda::quantize_mxfp4_block128(db.p, ds.p, R, C, q.p, s.p, ref.scale_stride(), nullptr);
  expect_same_fp8(ref, q.get(), s.get());
}

TEST_P(Fp8Tokens, QuantizeActivationsBitIdenticalToCpu) {
  const int T = GetParam(), K = 2880, ld = fp8::round4(T), KB = fp8::blocks(K);
  auto x = randf(size_t(T) * K, 32, 5.0f);
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(size_t(KB) * ld, 0.0f);
  fp8::quantize_activations(x.data(), T, K, q.data(), s.data(), ld);
  Dev<float> dx(x), ds(s.size());
  Dev<uint8_t> dq(q.size());
  cuda::quantize_act_1x128(dx.p, nullptr, T, K, dq.p, ds.p, cuda::ActScales::dense(ld), nullptr);
  EXPECT_EQ(dq.get(), q);
  auto gs = ds.get();
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < T; ++t) ASSERT_EQ(gs[size_t(kb) * ld + t], s[size_t(kb) * ld + t]);
}

void SkinnyCaseImpl(int T, int K, int N) {
  const int ld = fp8::round4(T);
  auto w = randbf(size_t(N) * K, 33);
  fp8::Matrix W = cpu_quantize(w, N, K);
  auto bias = randbf(N, 34);
  auto x = randf(size_t(T) * K, 35, 2.0f);
  std::vector<float> ref(size_t(T) * N);
  cpu::f32_fp8w_matmul(x.data(), W.data(), W.scale(), W.scale_stride(), bias.data(), ref.data(), T, N, K);
  DevFp8 dW(W);
  Dev<bf16> db(bias);
  Dev<float> dx(x), xs(size_t(fp8::blocks(K)) * ld), y(ref.size());
  Dev<uint8_t> xq(x.size());
  cuda::quantize_act_1x128(dx.p, nullptr, T, K, xq.p, xs.p, cuda::ActScales::dense(ld), nullptr);
  cuda::fp8_gemm_dense(dW.q.p, dW.s.p, W.scale_stride(), as_dev_bf16(db), xq.p, xs.p, ld, y.p, N, false, N, K, T, T, nullptr);
  EXPECT_LT(rel_err(y.get(), ref), 1e-5) << "T " << T << " K " << K << " N " << N;
  // Accumulate mode adds onto what is there.
  cuda::fp8_gemm_dense(dW.q.p, dW.s.p, W.scale_stride(), as_dev_bf16(db), xq.p, xs.p, ld, y.p, N, true, N, K, T, T, nullptr);
  std::vector<float> twice(ref);
  for (auto& v : twice) v *= 2;
  EXPECT_LT(rel_err(y.get(), twice), 1e-5) << "T " << T << " K " << K << " N " << N;
}

// The launcher splits K over 8, 4, 2 or 1 warps per 16-row tile, the fewest that give each of
// the H200's 132 SMs a block: N = 200 (13 tiles: 8 splits, or fewer when K has fewer
// 128-blocks), 3000 (188 tiles: 8), 5000 (313 tiles: 4), 9000 (563 tiles: 2), 33000 (no split, a
// partial last tile).
TEST_P(Fp8Tokens, SkinnyGemmMatchesCpuEmulation) {
  for (auto [K, N] : {std::pair{2880, 200}, {160, 200}, {96, 200}, {1024, 3000}, {1024, 5000}, {1024, 9000}, {256, 33000}})
    SkinnyCaseImpl(GetParam(), K, N);
}

TEST_P(Fp8Tokens, MoeSortAndGroupedSkinnyGemm) {
  const int T = GetParam(), E = 8, k = 4, N = 384, K = 2880;
  std::mt19937 rng(36);
  std::vector<int32_t> idx(size_t(T) * k);
  for (int t = 0; t < T; ++t) {
    std::vector<int> e(E);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    for (int j = 0; j < k; ++j) idx[size_t(t) * k + j] = e[j];
  }
  std::vector<fp8::Matrix> Ws;
  const fp8::Matrix all = random_experts(E, N, K, 40);
  auto bias = randbf(size_t(E) * N, 37);
  auto x = randf(size_t(T) * K, 38, 2.0f);
  const int P = cuda::moe_rows_max(T, k, E);
  DevSortedPairs sorted(idx, T, k, E);
  auto& [di, seg, row_token, pair_row, active] = sorted;
  {
    auto act = active.get();
    std::vector<int32_t> want;
    for (int e = 0; e < E; ++e)
      if (std::count(idx.begin(), idx.end(), e)) want.push_back(e);
    for (size_t i = 0; i < std::min<size_t>(E, idx.size()); ++i) EXPECT_EQ(act[i], i < want.size() ? want[i] : -1);
  }
  auto hseg = seg.get();
  auto hrow = row_token.get();
  auto hpair = pair_row.get();
  for (int e = 0; e < E; ++e) EXPECT_EQ((hseg[e + 1] - hseg[e]) % 4, 0);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = hpair[size_t(t) * k + j], e = idx[size_t(t) * k + j];
      ASSERT_EQ(hrow[r], t);
      ASSERT_TRUE(r >= hseg[e] && r < hseg[e + 1]);
    }
  DevFp8 dW(all);
  Dev<bf16> db(bias);
  Dev<float> dx(x), xs(size_t(P) * fp8::blocks(K) + 64), y(size_t(P) * N);
  Dev<uint8_t> xq(size_t(P) * K);
  const cuda::Fp8ExpertRows rows{.seg = seg.p, .experts = E, .rows = P, .active = active.p, .active_max = std::min(E, T * k)};
  cuda::quantize_act_1x128(dx.p, row_token.p, P, K, xq.p, xs.p, cuda::ActScales::by_expert(seg.p, E), nullptr);
  cuda::m_grouped_fp8_gemm_contiguous(dW.q.p, dW.s.p, all.scale_stride(), as_dev_bf16(db), xq.p, xs.p, rows, y.p, N, K,
                                      fp8::round4(T), nullptr);
  auto got = y.get();
  // The same GEMM reading each token's row through x_rows (quantized once per token, dense scales):
  // the same codes and scales reach the same MMAs, so the result is identical.
  {
    const int ld = fp8::round4(T);
    Dev<float> ts(size_t(fp8::blocks(K)) * ld), y2(size_t(P) * N);
    Dev<uint8_t> tq(size_t(T) * K);
    cuda::quantize_act_1x128(dx.p, nullptr, T, K, tq.p, ts.p, cuda::ActScales::dense(ld), nullptr);
    cuda::Fp8ExpertRows by_token = rows;
    by_token.x_rows = row_token.p, by_token.x_ld = ld;
    cuda::m_grouped_fp8_gemm_contiguous(dW.q.p, dW.s.p, all.scale_stride(), as_dev_bf16(db), tq.p, ts.p, by_token, y2.p,
                                        N, K, fp8::round4(T), nullptr);
    auto got2 = y2.get();
    for (int r = 0; r < hseg[E]; ++r)
      for (int n = 0; n < N; ++n) ASSERT_EQ(got2[size_t(r) * N + n], got[size_t(r) * N + n]) << "row " << r;
    // Padding rows skipped (row_live) with T real rows per expert at most (T = 1: the one-row
    // tile, whose K-split count may differ, so the sums may differ in order): the real rows agree.
    by_token.row_live = row_token.p, by_token.rows_max = T;
    Dev<float> y3(size_t(P) * N);
    cuda::m_grouped_fp8_gemm_contiguous(dW.q.p, dW.s.p, all.scale_stride(), as_dev_bf16(db), tq.p, ts.p, by_token, y3.p,
                                        N, K, fp8::round4(T), nullptr);
    auto got3 = y3.get();
    std::vector<float> live3, live;
    for (int r = 0; r < hseg[E]; ++r)
      if (hrow[r] >= 0)
        for (int n = 0; n < N; ++n) live3.push_back(got3[size_t(r) * N + n]), live.push_back(got[size_t(r) * N + n]);
    EXPECT_LT(rel_err(live3, live), 1e-6);
  }
  std::vector<float> ref(N), row(N);
  double worst = 0;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = idx[size_t(t) * k + j], r = hpair[size_t(t) * k + j];
      cpu::f32_fp8w_matmul(&x[size_t(t) * K], all.data(e), all.scale(e), all.scale_stride(), &bias[size_t(e) * N],
                           ref.data(), 1, N, K);
      std::copy_n(&got[size_t(r) * N], N, row.begin());
      worst = std::max(worst, rel_err(row, ref));
    }
  EXPECT_LT(worst, 1e-5);
}

class LtRows : public ::testing::TestWithParam<std::tuple<int, int>> {};
INSTANTIATE_TEST_SUITE_P(Shapes, LtRows,
                         ::testing::Values(std::make_tuple(4, 5120), std::make_tuple(132, 5120),
                                           std::make_tuple(1024, 2880), std::make_tuple(4, 201088)));

TEST_P(LtRows, CublasLtBlockScaledMatchesCpuEmulation) {
  const auto [M, N] = GetParam();
  const int K = 2880;
  fp8::Matrix W = cpu_quantize(randbf(size_t(N) * K, 50), N, K);
  auto x = randf(size_t(M) * K, 51, 2.0f);
  std::vector<float> ref(size_t(M) * N);
  cpu::f32_fp8w_matmul(x.data(), W.data(), W.scale(), W.scale_stride(), nullptr, ref.data(), M, N, K);
  DevFp8 dW(W);
  Dev<float> dx(x), xs(size_t(fp8::blocks(K)) * M), y(ref.size());
  Dev<uint8_t> xq(x.size());
  cuda::quantize_act_1x128(dx.p, nullptr, M, K, xq.p, xs.p, cuda::ActScales::dense(M), nullptr);
  cuda::BlockFp8Gemm lt(nullptr);
  lt.run(dW.q.p, dW.s.p, xq.p, xs.p, y.p, M, N, K);
  EXPECT_LT(rel_err(y.get(), ref), 4e-3);  // tolerance covers a BF16 output if cuBLASLt offers no fp32 one
}

// The grouped wgmma GEMM of prompt chunks (every expert in one launch) against the CPU twin,
// expert by expert, with both weight-scale layouts (the 1x128 scales hold the 128x128 blocks'
// values, so both twins are the same product). Awkward segments: an expert with one real row and
// three zero rows, experts without rows, partial row tiles (132, 260, 516 rows), one expert that
// gets every row, N = 320, 640 and 2,880 ending in partial column tiles (640: an odd count of
// 256-column tiles, 2,880: an odd count of row tiles, for blocks that pair them), K = 2,880 ending
// in a half K block, N = 328 whose I = 164 outputs are no multiple of 16 (the epilogue's byte-wise
// stores), and 1,604 rows at N = 2,880 (156 tiles: blocks that take a second tile reuse the
// epilogue's staging). Rows past the last segment stay as they were. The first GEMM's SwiGLU
// epilogue equals the SwiGLU kernel on the fp32 output, bit for bit.
TEST(CudaFp8, GroupedWgmmaGemmEqualsCpuTwinPerExpert) {
  const int K = 2880, KB = fp8::blocks(K);
  struct Case {
    int N;
    std::vector<int> lens;  // rows of each expert, multiples of 4 as sorted
  };
  for (const Case& c : {Case{320, {4, 0, 132, 260, 12}}, Case{2880, {0, 516, 0}}, Case{640, {132, 8}}, Case{328, {4, 136}},
                        Case{2880, {1600, 4}}}) {
    const int N = c.N, E = int(c.lens.size());
    std::vector<int32_t> seg = {0};
    for (int n : c.lens) seg.push_back(seg.back() + n);
    const int P = seg[E], rows = P + 8;
    SCOPED_TRACE("N " + std::to_string(N) + ", " + std::to_string(E) + " experts, " + std::to_string(P) + " rows");
    const fp8::Matrix W = random_experts(E, N, K, 70);
    auto x = randf(size_t(rows) * K, 71, 2.0f);
    if (c.lens[0] == 4) std::fill(x.begin() + K, x.begin() + 4 * size_t(K), 0.0f);  // expert 0: one real row
    // The same scales laid out [K/128][N] per expert.
    const size_t row_per = size_t(KB) * N;
    std::vector<float> wrow(size_t(E) * row_per);
    for (int e = 0; e < E; ++e)
      for (int kb = 0; kb < KB; ++kb)
        for (int n = 0; n < N; ++n)
          wrow[e * row_per + size_t(kb) * N + n] = W.scale(e)[size_t(n / 128) * W.scale_stride() + kb];
    std::vector<float> ref(size_t(P) * N);
    for (int e = 0; e < E; ++e)
      if (c.lens[e])
        cpu::f32_fp8w_matmul(x.data() + size_t(seg[e]) * K, W.data(e), W.scale(e), W.scale_stride(), nullptr,
                             ref.data() + size_t(seg[e]) * N, c.lens[e], N, K);
    DevFp8 dW(W);
    Dev<float> dwrow(wrow), dx(x), xs(size_t(KB) * rows + 64);
    Dev<int32_t> dseg(seg);
    Dev<uint8_t> xq(size_t(rows) * K);
    cuda::quantize_act_1x128(dx.p, nullptr, P, K, xq.p, xs.p, cuda::ActScales::by_expert(dseg.p, E), nullptr);
    for (auto mode : {cuda::WeightScales::Block128x128, cuda::WeightScales::Row1x128}) {
      SCOPED_TRACE(mode == cuda::WeightScales::Row1x128 ? "1x128 weight scales" : "128x128 weight scales");
      Dev<float> y(size_t(rows) * N);
      const bool row = mode == cuda::WeightScales::Row1x128;
      cuda::m_grouped_fp8_gemm_nt_contiguous({.seg = dseg.p, .experts = E, .x = xq.p, .xs = xs.p, .rows = rows,
                                              .w = dW.q.p, .ws = row ? dwrow.p : dW.s.p,
                                              .ws_per = row ? row_per : W.scales_per_matrix(), .wmode = mode,
                                              .y = y.p, .N = N, .K = K},
                                             nullptr);
      const auto got = y.get();
      const std::vector<float> head(got.begin(), got.begin() + size_t(P) * N);
      // The tensor cores' FP8 block sums are not exact fp32 ones (as cuBLASLt's): measured on the
      // H200 (session 24), 1.1e-4 (N 320; N 2,880 at 1,604 rows), 2.6e-4 (N 640), 3.9e-4 (N 2,880 at
      // 516 rows), 5.1e-4 (N 328), the same with either scale layout. A wrong tile, scale or row gives
      // O(1): one wrong row of 140 alone is 8e-2.
      EXPECT_LT(rel_err(head, ref), 1e-3);
      for (int e = 0; e < E; ++e)
        if (c.lens[e]) {
          const std::vector<float> a(got.begin() + size_t(seg[e]) * N, got.begin() + size_t(seg[e + 1]) * N),
              b(ref.begin() + size_t(seg[e]) * N, ref.begin() + size_t(seg[e + 1]) * N);
          EXPECT_LT(rel_err(a, b), 1e-3) << "expert " << e;
        }
      if (c.lens[0] == 4) {
        for (int r = 1; r < 4; ++r)
          for (int n = 0; n < N; ++n) ASSERT_EQ(got[size_t(r) * N + n], 0.0f) << "zero row " << r;
      }
      uint32_t bits;
      for (size_t i = size_t(P) * N; i < got.size(); ++i) {
        std::memcpy(&bits, &got[i], 4);
        ASSERT_EQ(bits, 0xFFFFFFFFu) << "written past the last segment at " << i;
      }
      // The SwiGLU epilogue (columns as (gate, up) pairs, I = N / 2) against moe_swiglu_quantize of
      // the fp32 output, bit for bit: codes, and scales by expert; nothing past the rows. Twice:
      // gpt-oss's clamp (7) with the bias, where most blocks hold a clamped pair and so share one
      // scale, and an unclamped SwiGLU without bias, where every block's scale is its own.
      const int I = N / 2, KBI = fp8::blocks(I);
      const auto b1 = randbf(size_t(E) * N, 72, 0.5f);
      Dev<bf16> db1(b1);
      const auto by_expert = cuda::ActScales::by_expert(dseg.p, E);
      for (const bool clamped : {true, false}) {
        SCOPED_TRACE(clamped ? "clamp 7, bias" : "no clamp, no bias");
        const float limit = clamped ? 7.0f : 1e30f;
        const cuda::bf16* bias = clamped ? as_dev_bf16(db1) : nullptr;
        Dev<uint8_t> q_ref(size_t(rows) * I), q_got(size_t(rows) * I);
        Dev<float> s_ref(size_t(KBI) * rows), s_got(size_t(KBI) * rows);
        cuda::moe_swiglu_quantize(y.p, bias, by_expert, P, I, 1.702f, limit, q_ref.p, s_ref.p, nullptr);
        cuda::m_grouped_fp8_gemm_nt_contiguous_swiglu(
            {.seg = dseg.p, .experts = E, .x = xq.p, .xs = xs.p, .rows = rows, .w = dW.q.p,
             .ws = row ? dwrow.p : dW.s.p, .ws_per = row ? row_per : W.scales_per_matrix(), .wmode = mode, .N = N,
             .K = K},
            {.b1 = bias, .alpha = 1.702f, .limit = limit, .q = q_got.p, .s = s_got.p, .I = I}, nullptr);
        const auto qr = q_ref.get(), qg = q_got.get();
        const auto sr = s_ref.get(), sg = s_got.get();
        for (size_t i = 0; i < size_t(P) * I; ++i) ASSERT_EQ(qg[i], qr[i]) << "code " << i << " (row " << i / I << ")";
        for (size_t i = size_t(P) * I; i < qg.size(); ++i) ASSERT_EQ(qg[i], 0xFF) << "code written past the rows at " << i;
        for (size_t i = 0; i < size_t(KBI) * P; ++i) ASSERT_EQ(sg[i], sr[i]) << "scale " << i;
        if (!clamped) {  // the unclamped blocks' scales differ: a permuted index would show
          std::set<float> distinct(sr.begin(), sr.begin() + size_t(KBI) * P);
          EXPECT_GT(distinct.size(), size_t(P) / 2);
        }
      }
    }
  }
}

// Random keys or values, rounded to BF16 as the cache stores them.
std::vector<float> rand_bf16_exact(size_t n, uint32_t seed, float scale) {
  std::vector<float> v = randf(n, seed, scale);
  for (auto& f : v) f = bf16_to_f32(f32_to_bf16(f));
  return v;
}

// Random keys or values whose rows of d (one position's KV head) span 2^-spread .. 2^spread in
// scale, and the same rounded as the FP8 cache holds them (kv_fp8::round_row per row).
std::vector<float> rand_rows(size_t n, int d, uint32_t seed, float scale, int spread = 12) {
  std::vector<float> v = randf(n, seed, scale);
  std::mt19937 rng(seed + 1000);
  for (size_t r = 0; r < n / d; ++r) {
    const float f = std::ldexp(1.0f, int(rng() % uint32_t(2 * spread + 1)) - spread);
    for (int i = 0; i < d; ++i) v[r * d + i] *= f;
  }
  return v;
}
std::vector<float> fp8_rounded_rows(std::vector<float> v, int d) {
  for (size_t r = 0; r < v.size() / d; ++r) kv_fp8::round_row(&v[r * d], d);
  return v;
}

// Values rounded as the FP16 cache stores them.
std::vector<float> f16_rounded(std::vector<float> v) {
  for (float& x : v) x = kv_round16(x, KvDtype::Fp16);
  return v;
}
// Values both 16-bit caches hold exactly: BF16-exact ones (rand_bf16_exact) with the magnitudes
// below FP16's smallest normal (2^-14, where FP16 keeps fewer bits) set to zero.
std::vector<float> bf16_and_f16_exact(std::vector<float> v) {
  for (float& x : v)
    if (std::fabs(x) < 0x1p-14f) x = 0.0f;
  return v;
}

// One layer's KV cache on the device for `slots` slots: shuffled pages (window 0) or rings; Fp8:
// the FP8 cache (codes and row exponents), always paged (as the model keeps sliding layers too);
// Fp16: the 16-bit arrays hold FP16.
struct DeviceKvLayer {
  Dev<bf16> k, v;
  Dev<uint8_t> k8, v8;
  Dev<int8_t> ke, ve;
  Dev<int32_t> table;
  cuda::KvLayerView view;
  int ring;
  DeviceKvLayer(int slots, int kvh, int d, int window, int ring_, int max_pages, uint32_t seed,
                KvDtype dtype = KvDtype::Bf16, bool paged = false)
      : k(dtype == KvDtype::Fp8 ? 0 : rows(slots, paged ? 0 : window, ring_, max_pages) * kvh * d), v(k.n),
        k8(dtype == KvDtype::Fp8 ? rows(slots, 0, 0, max_pages) * kvh * d : 0), v8(k8.n),
        ke(dtype == KvDtype::Fp8 ? rows(slots, 0, 0, max_pages) * kvh : 0), ve(ke.n),
        table(page_table(slots, max_pages, seed)), ring(ring_) {
    const bool fp8 = dtype == KvDtype::Fp8;
    view.kv_heads = kvh, view.d = d;
    if (fp8) {
      // Rows never written are read (and masked): zero exponents keep them finite, as the model's.
      OSPREY_CUDA_CHECK(cudaMemset(ke.p, 0, ke.n));
      OSPREY_CUDA_CHECK(cudaMemset(ve.p, 0, ve.n));
      view.k8 = k8.p, view.v8 = v8.p, view.k_exp = ke.p, view.v_exp = ve.p;
    } else {
      view.k = k.p, view.v = v.p, view.f16 = dtype == KvDtype::Fp16;
    }
    if (window && !fp8 && !paged) view.ring = ring;
    else view.page_table = table.p, view.max_pages = max_pages;
    if (!view.ring) view.rows = int64_t(rows(slots, 0, 0, max_pages));
  }
  // Paged: the cache row of position p of `slot` (table: this layer's page table, read back), and
  // where that row's exponent of KV head h lives in the FP8 cache (kv_exp_index).
  size_t row_of(const std::vector<int32_t>& table, int slot, int p) const {
    return size_t(table[size_t(slot) * view.max_pages + p / cuda::kPage]) * cuda::kPage + p % cuda::kPage;
  }
  size_t exp_index(size_t row, int h) const {
    return (row / cuda::kPage * view.kv_heads + h) * cuda::kPage + row % cuda::kPage;
  }
  // Positions [0, len) of K and V (the last `ring` of them for a ring) into the slot, through kv_write.
  void write(int slot, const std::vector<float>& K, const std::vector<float>& V, int len) {
    const size_t row = size_t(view.kv_heads) * view.d;
    const int first = view.page_table ? 0 : std::max(0, len - ring), n = len - first;
    std::vector<int32_t> ss(n, slot), pp(n);
    std::iota(pp.begin(), pp.end(), first);
    Dev<float> dk(std::vector<float>(K.begin() + first * row, K.begin() + len * row)),
        dv(std::vector<float>(V.begin() + first * row, V.begin() + len * row));
    Dev<int32_t> dss(ss), dpp(pp);
    cuda::kv_write(view, dk.p, dv.p, dss.p, dpp.p, n, nullptr);
  }

 private:
  static size_t rows(int slots, int window, int ring, int max_pages) {
    return window ? size_t(slots + 1) * ring : size_t(slots * max_pages + 1) * cuda::kPage;
  }
  static std::vector<int32_t> page_table(int slots, int max_pages, uint32_t seed) {
    std::vector<int32_t> table(size_t(slots + 1) * max_pages, 0), perm(size_t(slots) * max_pages);
    std::iota(perm.begin(), perm.end(), 1);  // page 0 is left out
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    std::copy(perm.begin(), perm.end(), table.begin());
    return table;
  }
};

// Rows of two sequences (slots 0 and 1) over shuffled pages (full) or a ring (window 128); 32
// splits of 11 tiles leave most splits empty. d = 64 runs on the tensor cores (Q and P as hi + lo
// BF16 pairs: ~16 bits, hence 5e-5), other d on the CUDA cores (fp32, 1e-5). The quantized output
// equals quantize_act_1x128 of the fp32 output.
// fp8: the FP8 cache (always paged), against the CPU attention over the values it holds: the
// kernel scales scores and weights by the rows' powers of two, which equals BF16 codes times 2^e,
// so the same tolerance holds. Fp16: the FP16 cache (Q and P as hi + lo FP16 pairs), against the
// CPU attention over the FP16 values it holds, to the same tolerance.
// v_ramp +1 (-1): value rows scaled by 2^(position / 64 - 5) (2^(5 - position / 64)) as well, so
// that each 64-key tile's largest value exponent is above (below) the last's: the FP8 decode's acc
// rescaled at every tile, both ways.
// Codes [rows][K] and 1x128 scales [K/128][ld] back to values.
std::vector<float> dequantized_1x128(const std::vector<uint8_t>& q, const std::vector<float>& s, int rows, int K, int ld) {
  std::vector<float> v(q.size());
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) v[size_t(r) * K + k] = fp8::to_f32(q[size_t(r) * K + k]) * s[size_t(k / 128) * ld + r];
  return v;
}
// The persistent phase's codes and scales (qp, sp) against the per-op kernel's (qa, sa).
// The persistent decode kernel's attention phase runs 8 warps a split; the per-op kernel picks its
// warps a split with decode_attention_warps (up to 8 while rows x KV heads x splits x warps x 2 <=
// 1024). Where they match the two sum in the same order and give the same bits; elsewhere the
// same values to fp32 rounding, so codes a step apart here and there.
void expect_persistent_attention(const std::vector<uint8_t>& qp, const std::vector<float>& sp,
                                 const std::vector<uint8_t>& qa, const std::vector<float>& sa, int rows, int K, int ld,
                                 int kvh, int splits) {
  if (cuda::decode_attention_warps(rows, kvh, splits) == 8) {
    ASSERT_EQ(qp, qa);
    for (int kb = 0; kb < fp8::blocks(K); ++kb)  // the rows' scales (past them, ld's padding stays poisoned)
      for (int r = 0; r < rows; ++r) ASSERT_EQ(sp[size_t(kb) * ld + r], sa[size_t(kb) * ld + r]);
  } else {
    EXPECT_LT(rel_err(dequantized_1x128(qp, sp, rows, K, ld), dequantized_1x128(qa, sa, rows, K, ld)), 1e-3);
  }
}

void PagedAttentionCase(int heads, int kvh, int d, KvDtype dtype = KvDtype::Bf16, int v_ramp = 0) {
  const bool fp8 = dtype == KvDtype::Fp8;
  const int lens[2] = {700, 333}, max_pages = 16, ring = 256;
  const double tol = d == 64 ? 5e-5 : 1e-5;
  for (int window : {0, 128}) {
    for (int splits : {1, 5, 32}) {
      std::vector<std::vector<float>> K(2), V(2);
      DeviceKvLayer cache(2, kvh, d, window, ring, max_pages, 64, dtype);
      for (int s = 0; s < 2; ++s) {
        const size_t n = size_t(lens[s]) * kvh * d;
        // fp8: keys within 2^-2 .. 2^2 (wider ones make the softmax one-hot), values 2^-12 .. 2^12.
        K[s] = fp8 ? rand_rows(n, d, 60 + s, 2.0f, 2) : rand_bf16_exact(n, 60 + s, 2.0f);
        V[s] = fp8 ? rand_rows(n, d, 62 + s, 1.0f, v_ramp ? 2 : 12) : rand_bf16_exact(n, 62 + s, 1.0f);
        if (v_ramp)
          for (size_t i = 0; i < n; ++i) V[s][i] = std::ldexp(V[s][i], v_ramp * (int(i / (size_t(kvh) * d)) / 64 - 5));
        cache.write(s, K[s], V[s], lens[s]);
        if (fp8) K[s] = fp8_rounded_rows(K[s], d), V[s] = fp8_rounded_rows(V[s], d);
        if (dtype == KvDtype::Fp16) K[s] = f16_rounded(K[s]), V[s] = f16_rounded(V[s]);
      }
      // Queries: the last 3 positions of slot 0 and the last 2 of slot 1.
      std::vector<int32_t> slot = {0, 0, 0, 1, 1}, pos = {697, 698, 699, 331, 332};
      const int R = int(slot.size()), Q = heads * d, ld = fp8::round4(R);
      auto q = randf(size_t(R) * Q, 65, 2.0f);
      auto sinks = randbf(heads, 66, 2.0f);
      Dev<float> dq(q), out(q.size()), scratch(size_t(R) * heads * splits * (d + 2));
      Dev<bf16> ds(sinks);
      Dev<int32_t> dslot(slot), dpos(pos);
      cuda::paged_attention(cache.view, dq.p, as_dev_bf16(ds), dslot.p, dpos.p, out.p, R, heads, window, 0.125f, splits,
                            scratch.p, nullptr);
      auto got = out.get();
      std::vector<float> ref(q.size());
      for (int r = 0; r < R; ++r) {
        HostKv kv(K[slot[r]], V[slot[r]], kvh, d);
        cpu::f32_bf16sink_attention(&q[size_t(r) * Q], &pos[r], kv, sinks.data(), &ref[size_t(r) * Q], 1,
                                    {.num_heads = heads, .num_kv_heads = kvh, .head_dim = d, .window = window, .scale = 0.125f});
      }
      const double err = rel_err(got, ref);
      EXPECT_LT(err, tol) << "d " << d << " window " << window << " splits " << splits << " " << kv_dtype_name(dtype);
      if (fp8) {
        // The BF16 cache holding the values the FP8 one does (exactly: codes times powers of two,
        // value rows 2^-12 .. 2^12 apart) multiplies them as BF16 hi + lo pairs; the FP8 cache's
        // FP16 pairs, its per-key scalings and its weights relative to the largest value exponent
        // so far (acc rescaled as that grows, tile by tile) must land at least as close to the CPU.
        DeviceKvLayer same(2, kvh, d, window, ring, max_pages, 64, KvDtype::Bf16, /*paged=*/true);
        for (int s = 0; s < 2; ++s) same.write(s, K[s], V[s], lens[s]);
        Dev<float> out16(q.size());
        cuda::paged_attention(same.view, dq.p, as_dev_bf16(ds), dslot.p, dpos.p, out16.p, R, heads, window, 0.125f,
                              splits, scratch.p, nullptr);
        const double err16 = rel_err(out16.get(), ref);
        EXPECT_LE(err, err16) << "window " << window << " splits " << splits;
        if (splits == 5) std::printf("paged attention d=%d window=%d fp8 values in the bf16 cache: rel. error %.2e\n", d,
                                     window, err16);
      }
      if (splits == 5)
        std::printf("paged attention d=%d window=%d %s: rel. error %.2e\n", d, window, kv_dtype_name(dtype), err);
      // Quantized output.
      Dev<uint8_t> q1(size_t(R) * Q), q2(size_t(R) * Q);
      Dev<float> s1(size_t(fp8::blocks(Q)) * ld), s2(s1.n);
      cuda::quantize_act_1x128(out.p, nullptr, R, Q, q1.p, s1.p, cuda::ActScales::dense(ld), nullptr);
      cuda::paged_attention(cache.view, dq.p, as_dev_bf16(ds), dslot.p, dpos.p, nullptr, R, heads, window, 0.125f,
                            splits, scratch.p, nullptr, {q2.p, s2.p, ld});
      EXPECT_EQ(q1.get(), q2.get());
      auto a = s1.get(), b = s2.get();
      for (int kb = 0; kb < fp8::blocks(Q); ++kb)
        for (int r = 0; r < R; ++r) ASSERT_EQ(a[size_t(kb) * ld + r], b[size_t(kb) * ld + r]);
      // The merge in the attention kernel's tail (d = 64, whole 128-column blocks per KV head):
      // the same fp32 output and codes, twice (the counters go back to zero); the second time with
      // the tiles of earlier positions loaded before the PDL wait (decode_rows), the same again.
      if (d == 64 && heads / kvh * d % 128 == 0) {
        Dev<int32_t> count(size_t(R) * kvh);
        OSPREY_CUDA_CHECK(cudaMemset(count.p, 0, count.n * 4));
        for (int pass = 0; pass < 2; ++pass) {
          Dev<float> out3(q.size()), s3(s1.n);
          Dev<uint8_t> q3(q1.n);
          cuda::paged_attention(cache.view, dq.p, as_dev_bf16(ds), dslot.p, dpos.p, out3.p, R, heads, window, 0.125f,
                                splits, scratch.p, nullptr, {q3.p, s3.p, ld}, count.p, /*decode_rows=*/pass == 1);
          ASSERT_EQ(out3.get(), got) << "window " << window << " splits " << splits;
          ASSERT_EQ(q3.get(), q2.get());
          auto c = s3.get();
          for (int kb = 0; kb < fp8::blocks(Q); ++kb)
            for (int r = 0; r < R; ++r) ASSERT_EQ(c[size_t(kb) * ld + r], b[size_t(kb) * ld + r]);
          auto n = count.get();
          ASSERT_TRUE(std::all_of(n.begin(), n.end(), [](int32_t v) { return v == 0; }));
        }
        // The persistent decode kernel's attention phase alone (BF16 cache): the same codes and
        // scales (where the warps a split match; expect_persistent_attention), at one block an SM
        // (the body as above) and at two (its tiles staged through shared memory: one split of 11
        // tiles gives three warps two tiles each).
        for (int blocks_per_sm : {1, 2}) {
          if (dtype != KvDtype::Bf16) break;
          cuda::PersistentDecode P(blocks_per_sm);
          Dev<uint8_t> q4(q1.n);
          Dev<float> s4(s1.n);
          P.attention(cache.view, dq.p, as_dev_bf16(ds), dslot.p, dpos.p, R, heads, window, 0.125f, splits, scratch.p,
                      {q4.p, s4.p, ld}, count.p);
          P.finish();
          P.launch(nullptr);
          OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
          SCOPED_TRACE("persistent, " + std::to_string(blocks_per_sm) + " blocks an SM, window " +
                       std::to_string(window) + " splits " + std::to_string(splits));
          expect_persistent_attention(q4.get(), s4.get(), q2.get(), b, R, Q, ld, kvh, splits);
          auto n = count.get();
          ASSERT_TRUE(std::all_of(n.begin(), n.end(), [](int32_t v) { return v == 0; }));
        }
      }
    }
  }
}

// flash_prefill (Q and P as BF16 on the tensor cores, FP16 over the FP16 cache) against the CPU attention: a prompt of T tokens
// continuing a sequence of p0 positions, full (paged, shuffled pages) and sliding (ring).
// fp8: the FP8 cache (paged), against the CPU attention over the values it holds. Returns the
// relative error against the CPU.
double FlashCase(int T, int p0, int window, int splits = 1, int heads = 64, int kvh = 8, KvDtype dtype = KvDtype::Bf16,
                 std::vector<float> K = {}, std::vector<float> V = {}) {
  const bool fp8 = dtype == KvDtype::Fp8;
  const int d = 64, len = p0 + T, max_pages = (len + 63) / 64, ring = 2176;
  const size_t n = size_t(len) * kvh * d;
  // Keys within 2^-2 .. 2^2 of the BF16 case's scale: Q enters as one BF16, and larger scores
  // would amplify its rounding past the tolerance (the decode kernel's hi + lo pairs do not).
  // K and V given: values the cache holds exactly.
  if (K.empty()) K = fp8 ? rand_rows(n, d, 80, 2.0f, 2) : rand_bf16_exact(n, 80, 2.0f);
  if (V.empty()) V = fp8 ? rand_rows(n, d, 81, 1.0f) : rand_bf16_exact(n, 81, 1.0f);
  if (dtype == KvDtype::Fp16) K = f16_rounded(K), V = f16_rounded(V);
  DeviceKvLayer cache(2, kvh, d, window, ring, max_pages, 82, dtype);
  cache.write(1, K, V, len);
  if (fp8) K = fp8_rounded_rows(K, d), V = fp8_rounded_rows(V, d);
  std::unique_ptr<DeviceKvLayer> same;  // fp8: a BF16 cache of the same values (exact)
  if (fp8) {
    same = std::make_unique<DeviceKvLayer>(2, kvh, d, window, ring, max_pages, 82, KvDtype::Bf16, /*paged=*/true);
    same->view.rows = 0;  // the mma.sync kernel, whose BF16 path the FP8 one shares (not the wgmma kernel)
    same->write(1, K, V, len);
  }
  auto q = randf(size_t(T) * heads * d, 83, 2.0f);
  auto sinks = randbf(heads, 84, 2.0f);
  Dev<float> dq(q), out(q.size());
  Dev<bf16> ds(sinks);
  Dev<float> scratch(size_t(T) * heads * splits * (d + 2));
  cuda::flash_prefill(cache.view, dq.p, as_dev_bf16(ds), 1, p0, out.p, T, heads, window, 0.125f, nullptr, splits,
                      scratch.p);
  if (fp8) {  // the tiles the FP8 loader stores are the BF16 cache's values: the same bits
    Dev<float> out16(q.size());
    cuda::flash_prefill(same->view, dq.p, as_dev_bf16(ds), 1, p0, out16.p, T, heads, window, 0.125f, nullptr, splits,
                        scratch.p);
    EXPECT_EQ(out.get(), out16.get()) << "T " << T << " p0 " << p0 << " window " << window << " splits " << splits;
  }
  if (splits > 1) {
    // Split-KV: the unsplit kernel's result up to P's BF16 rounding, which each split takes
    // against its own running maximum (measured 1.1e-3 to 1.6e-3 relative for 2 to 32 splits; the
    // kernel is 1e-2 from the fp32 CPU attention below either way).
    Dev<float> one(q.size());
    cuda::flash_prefill(cache.view, dq.p, as_dev_bf16(ds), 1, p0, one.p, T, heads, window, 0.125f, nullptr);
    EXPECT_LT(rel_err(out.get(), one.get()), 5e-3) << "T " << T << " p0 " << p0 << " splits " << splits;
  }
  std::vector<int32_t> pos(T);
  std::iota(pos.begin(), pos.end(), p0);
  std::vector<float> ref(q.size());
  HostKv kv(K, V, kvh, d);
  cpu::f32_bf16sink_attention(q.data(), pos.data(), kv, sinks.data(), ref.data(), T,
                              {.num_heads = heads, .num_kv_heads = kvh, .head_dim = d, .window = window, .scale = 0.125f});
  const double err = rel_err(out.get(), ref);
  EXPECT_LT(err, 1e-2) << "T " << T << " p0 " << p0 << " window " << window << " splits " << splits << " heads "
                       << heads << "/" << kvh << " " << kv_dtype_name(dtype);
  // Quantized for the o-projection (in the epilogue at 8 query heads a KV head, else after it):
  // the codes and scales quantize_act_1x128 makes of the fp32 result, bit for bit, written at a
  // chunk's rows (offset 5 rows into matrices of ld = round4(T + 5)).
  const int Q = heads * d, ld = fp8::round4(T + 5), KB = fp8::blocks(Q);
  if (Q % 128) return err;
  Dev<float> s1(size_t(KB) * ld), s2(s1.n), tmp(q.size());
  Dev<uint8_t> q1(size_t(T + 5) * Q), q2(q1.n);
  cuda::quantize_act_1x128(out.p, nullptr, T, Q, q1.p + size_t(5) * Q, s1.p + 5, cuda::ActScales::dense(ld), nullptr);
  cuda::flash_prefill(cache.view, dq.p, as_dev_bf16(ds), 1, p0, tmp.p, T, heads, window, 0.125f, nullptr, splits,
                      scratch.p, {q2.p + size_t(5) * Q, s2.p + 5, ld});
  auto c1 = q1.get(), c2 = q2.get();
  EXPECT_TRUE(std::equal(c1.begin() + size_t(5) * Q, c1.end(), c2.begin() + size_t(5) * Q))
      << "T " << T << " window " << window << " splits " << splits << " heads " << heads << "/" << kvh;
  auto a1 = s1.get(), a2 = s2.get();
  size_t scale_mismatches = 0;
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 5; t < T + 5; ++t) scale_mismatches += a1[size_t(kb) * ld + t] != a2[size_t(kb) * ld + t];
  EXPECT_EQ(scale_mismatches, 0u) << "T " << T << " window " << window << " splits " << splits;
  return err;
}

TEST(CudaFp8, FlashPrefillMatchesCpu) {
  for (int window : {0, 128})
    for (auto [T, p0] : {std::pair{1, 0}, {3, 0}, {129, 0}, {200, 77}, {1000, 0}}) FlashCase(T, p0, window);
  // Other groupings of query heads per KV head: 16 (8 tokens a block), 3 (42 tokens and two idle
  // rows a block), 1; and a chunk deep in a window's ring.
  for (int window : {0, 128}) {
    FlashCase(300, 50, window, 1, 16, 1);
    FlashCase(100, 30, window, 1, 24, 8);
    FlashCase(70, 0, window, 1, 4, 4);
  }
  FlashCase(500, 1500, 128);
}

// The wgmma prefill kernel (full attention, a paged BF16 cache, one split) against the mma.sync
// kernel on the same cache (view.rows = 0 selects it) and against the CPU attention: prompts and
// chunks deep in a sequence that start and end inside pages and tiles, 8, 16 and 1 query heads a
// KV head. Cache rows never written hold NaN (the rows past the prompt in its last page, and a
// whole page after it): the kernel must leave them out of V, where P = 0 times NaN would spread.
void FlashWgmmaCase(int T, int p0, int heads, int kvh, KvDtype dtype = KvDtype::Bf16) {
  const int window = 0;
  const int d = 64, len = p0 + T, max_pages = (len + 63) / 64 + 1;
  const size_t n = size_t(len) * kvh * d;
  std::vector<float> K = rand_bf16_exact(n, 90, 2.0f), V = rand_bf16_exact(n, 91, 1.0f);
  if (dtype == KvDtype::Fp16) K = f16_rounded(K), V = f16_rounded(V);
  DeviceKvLayer cache(2, kvh, d, window, 0, max_pages, 92, dtype, /*paged=*/true);
  OSPREY_CUDA_CHECK(cudaMemset(cache.k.p, 0xff, cache.k.n * sizeof(bf16)));  // 0xffff: a BF16 NaN, and an FP16 one
  OSPREY_CUDA_CHECK(cudaMemset(cache.v.p, 0xff, cache.v.n * sizeof(bf16)));
  cache.write(1, K, V, len);
  ASSERT_TRUE(cuda::flash_prefill_on_wgmma(cache.view, heads, window, 1));
  auto q = randf(size_t(T) * heads * d, 93, 2.0f);
  auto sinks = randbf(heads, 94, 2.0f);
  Dev<float> dq(q), out(q.size()), old(q.size());
  Dev<bf16> ds(sinks);
  cuda::flash_prefill(cache.view, dq.p, as_dev_bf16(ds), 1, p0, out.p, T, heads, window, 0.125f, nullptr);
  cuda::KvLayerView mma_sync = cache.view;
  mma_sync.rows = 0;
  ASSERT_FALSE(cuda::flash_prefill_on_wgmma(mma_sync, heads, window, 1));
  cuda::flash_prefill(mma_sync, dq.p, as_dev_bf16(ds), 1, p0, old.p, T, heads, window, 0.125f, nullptr);
  const auto got = out.get();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isfinite(got[i])) << "T " << T << " p0 " << p0 << " at " << i;
  // The two kernels round P to BF16 against running maxima updated at different key tiles.
  EXPECT_LT(rel_err(got, old.get()), 3e-3) << "T " << T << " p0 " << p0 << " heads " << heads << " "
                                          << kv_dtype_name(dtype);
  std::vector<int32_t> pos(T);
  std::iota(pos.begin(), pos.end(), p0);
  std::vector<float> ref(q.size());
  HostKv kv(K, V, kvh, d);
  cpu::f32_bf16sink_attention(q.data(), pos.data(), kv, sinks.data(), ref.data(), T,
                              {.num_heads = heads, .num_kv_heads = kvh, .head_dim = d, .window = window, .scale = 0.125f});
  EXPECT_LT(rel_err(got, ref), 1e-2) << "T " << T << " p0 " << p0 << " heads " << heads << " " << kv_dtype_name(dtype);
}

TEST(CudaFp8, FlashPrefillWgmmaMatchesMmaSyncAndCpu) {
  for (auto [T, p0] : {std::pair{1, 0}, {3, 0}, {129, 0}, {200, 77}, {1000, 0}, {500, 1500}, {64, 64}, {130, 126}})
    FlashWgmmaCase(T, p0, 64, 8);
  FlashWgmmaCase(300, 50, 16, 1);  // 8 tokens a block
  FlashWgmmaCase(70, 0, 4, 4);     // one head a KV head: 128 tokens a block
  // Which kernel runs: windows, split-KV, the FP8 cache and unknown extents stay on mma.sync.
  DeviceKvLayer paged(1, 8, 64, 0, 0, 4, 95, KvDtype::Bf16, true), fp8(1, 8, 64, 0, 0, 4, 95, KvDtype::Fp8),
      f16(1, 8, 64, 0, 0, 4, 95, KvDtype::Fp16, true);
  EXPECT_TRUE(cuda::flash_prefill_on_wgmma(paged.view, 64, 0, 1));
  EXPECT_FALSE(cuda::flash_prefill_on_wgmma(paged.view, 64, 128, 1));
  EXPECT_FALSE(cuda::flash_prefill_on_wgmma(paged.view, 64, 0, 2));
  EXPECT_FALSE(cuda::flash_prefill_on_wgmma(paged.view, 24, 0, 1));  // 3 heads a KV head: 128 % 3
  EXPECT_FALSE(cuda::flash_prefill_on_wgmma(fp8.view, 64, 0, 1));
  EXPECT_TRUE(cuda::flash_prefill_on_wgmma(f16.view, 64, 0, 1));
}

// Split-KV prefill: a chunk deep in a sequence, its keys cut into ranges (more ranges than some
// blocks have tiles: empty ranges), merged; the sink counted once.
TEST(CudaFp8, FlashPrefillSplitKv) {
  for (auto [T, p0] : {std::pair{40, 3000}, {200, 2500}, {1, 4000}, {7, 63}})
    for (int splits : {2, 3, 8, 32}) FlashCase(T, p0, 0, splits);
  EXPECT_EQ(cuda::flash_prefill_splits(168, 100000, 64, 8, 0, size_t(2048) * 64 * 66), 12);    // 88 blocks -> 1056
  EXPECT_EQ(cuda::flash_prefill_splits(168, 100000, 64, 8, 0, size_t(168) * 64 * 66 * 3), 3);  // the scratch's limit
  EXPECT_EQ(cuda::flash_prefill_splits(2048, 100000, 64, 8, 0, size_t(2048) * 64 * 66), 1);   // blocks enough already
  EXPECT_EQ(cuda::flash_prefill_splits(168, 100000, 64, 8, 128, size_t(2048) * 64 * 66), 1);  // a window
  EXPECT_EQ(cuda::flash_prefill_splits(64, 500, 64, 8, 0, size_t(2048) * 64 * 66), 1);        // few keys
}

TEST(CudaFp8, PagedAttentionMatchesCpu) {
  PagedAttentionCase(64, 8, 64);  // gpt-oss
  PagedAttentionCase(4, 2, 16);   // the tiny model's heads
}

// --kv-cache-dtype fp8: kv_write stores each (position, KV head) row as the CPU's
// kv_fp8::quantize_row does, codes and exponent bit for bit (rows of scales 2^-12 .. 2^12;
// d = 16 leaves lanes idle); the decode and prefill attention read it back as the CPU attention
// over those values.
TEST(CudaFp8, KvWriteFp8IsTheRowQuantization) {
  for (int d : {64, 16}) {
    const int kvh = 8, len = 200, max_pages = 4;
    const auto K = rand_rows(size_t(len) * kvh * d, d, 70, 3.0f), V = rand_rows(size_t(len) * kvh * d, d, 71, 1.0f);
    DeviceKvLayer cache(2, kvh, d, 0, 0, max_pages, 72, KvDtype::Fp8);
    cache.write(1, K, V, len);
    const auto table = cache.table.get();
    const auto k8 = cache.k8.get(), v8 = cache.v8.get();
    const auto ke = cache.ke.get(), ve = cache.ve.get();
    std::vector<uint8_t> codes(d);
    for (int p = 0; p < len; ++p)
      for (int h = 0; h < kvh; ++h) {
        const size_t row = cache.row_of(table, 1, p);
        const size_t at = (row * kvh + h) * d, ei = cache.exp_index(row, h);
        for (auto [src, got, exps] : {std::tuple{&K, &k8, &ke}, std::tuple{&V, &v8, &ve}}) {
          const int e = kv_fp8::quantize_row(src->data() + (size_t(p) * kvh + h) * d, d, codes.data());
          ASSERT_EQ(int((*exps)[ei]), e) << "d " << d << " position " << p << " head " << h;
          ASSERT_TRUE(std::equal(codes.begin(), codes.end(), got->begin() + at)) << "d " << d << " position " << p;
        }
      }
  }
}

TEST(CudaFp8, PagedAttentionFp8MatchesCpu) {
  PagedAttentionCase(64, 8, 64, KvDtype::Fp8);
  for (int v_ramp : {1, -1}) PagedAttentionCase(64, 8, 64, KvDtype::Fp8, v_ramp);
}

TEST(CudaFp8, FlashPrefillFp8MatchesCpu) {
  for (int window : {0, 128})
    for (auto [T, p0] : {std::pair{1, 0}, {129, 0}, {200, 77}, {1000, 0}})
      FlashCase(T, p0, window, 1, 64, 8, KvDtype::Fp8);
  FlashCase(300, 50, 0, 1, 16, 1, KvDtype::Fp8);
  FlashCase(500, 1500, 128, 1, 64, 8, KvDtype::Fp8);
  for (int splits : {3, 8}) FlashCase(200, 2500, 0, splits, 64, 8, KvDtype::Fp8);
}

// --kv-cache-dtype fp16: kv_write stores each value as core/fp16.h's f32_to_f16_satfinite, bit for
// bit, the values past FP16's range clipped at +-65,504 (rows scaled by up to 2^20), not infinite.
TEST(CudaFp8, KvWriteFp16IsTheSatfiniteRounding) {
  const int kvh = 8, d = 64, len = 200, max_pages = 4;
  const auto K = rand_rows(size_t(len) * kvh * d, d, 73, 3.0f, 20), V = rand_rows(size_t(len) * kvh * d, d, 74, 1.0f, 20);
  ASSERT_GT(*std::max_element(K.begin(), K.end()), 65504.0f);  // some values are clipped
  DeviceKvLayer cache(2, kvh, d, 0, 0, max_pages, 75, KvDtype::Fp16);
  cache.write(1, K, V, len);
  const auto table = cache.table.get();
  const auto k = cache.k.get(), v = cache.v.get();
  for (int p = 0; p < len; ++p)
    for (int h = 0; h < kvh; ++h) {
      const size_t at = (cache.row_of(table, 1, p) * kvh + h) * d, src = (size_t(p) * kvh + h) * d;
      for (int i = 0; i < d; ++i) {
        ASSERT_EQ(k[at + i], f32_to_f16_satfinite(K[src + i])) << "position " << p << " head " << h << " dim " << i;
        ASSERT_EQ(v[at + i], f32_to_f16_satfinite(V[src + i])) << "position " << p << " head " << h << " dim " << i;
      }
    }
}

TEST(CudaFp8, PagedAttentionFp16MatchesCpu) { PagedAttentionCase(64, 8, 64, KvDtype::Fp16); }

// The FP16 cache's prefill (Q and P as FP16) against the CPU attention over the values it holds,
// on both kernels (full layers: wgmma; windows: mma.sync), and against the BF16 cache on values both
// hold exactly: FP16's three more mantissa bits for Q and P must show, at most half the error.
TEST(CudaFp8, FlashPrefillFp16MatchesCpuAndBeatsBf16) {
  for (int window : {0, 128})
    for (auto [T, p0] : {std::pair{129, 0}, {200, 77}, {1000, 0}}) {
      const size_t n = size_t(p0 + T) * 8 * 64;
      const auto K = bf16_and_f16_exact(rand_bf16_exact(n, 85, 2.0f)), V = bf16_and_f16_exact(rand_bf16_exact(n, 86, 1.0f));
      const double e16 = FlashCase(T, p0, window, 1, 64, 8, KvDtype::Fp16, K, V);
      const double e_bf16 = FlashCase(T, p0, window, 1, 64, 8, KvDtype::Bf16, K, V);
      std::printf("flash prefill T=%d p0=%d window=%d: rel. error fp16 %.2e, bf16 %.2e\n", T, p0, window, e16, e_bf16);
      EXPECT_LT(e16, 0.5 * e_bf16) << "T " << T << " p0 " << p0 << " window " << window;
    }
  for (int window : {0, 128}) FlashCase(1, 0, window, 1, 64, 8, KvDtype::Fp16);
  FlashCase(300, 50, 0, 1, 16, 1, KvDtype::Fp16);
  FlashCase(500, 1500, 128, 1, 64, 8, KvDtype::Fp16);
  for (int splits : {3, 8}) FlashCase(200, 2500, 0, splits, 64, 8, KvDtype::Fp16);
  for (auto [T, p0] : {std::pair{1, 0}, {129, 0}, {200, 77}, {130, 126}}) FlashWgmmaCase(T, p0, 64, 8, KvDtype::Fp16);
  FlashWgmmaCase(300, 50, 16, 1, KvDtype::Fp16);
}

// What the FP8 cache cannot run is refused, not misread: another head_dim on the attention
// kernels, a ring.
TEST(CudaFp8, Fp8KvRefusesWhatItCannotRun) {
  DeviceKvLayer small(1, 2, 16, 0, 0, 2, 5, KvDtype::Fp8);
  Dev<float> q(size_t(4) * 16), out(q.n), scratch(size_t(4) * 18);
  Dev<bf16> sinks(std::vector<bf16>(4, f32_to_bf16(0.0f)));
  Dev<int32_t> slot(std::vector<int32_t>{0}), pos(std::vector<int32_t>{3});
  EXPECT_THROW(cuda::paged_attention(small.view, q.p, as_dev_bf16(sinks), slot.p, pos.p, out.p, 1, 4, 0, 0.25f, 1,
                                     scratch.p, nullptr),
               std::exception);
  DeviceKvLayer big(1, 1, 64, 0, 0, 2, 5, KvDtype::Fp8);
  big.view.page_table = nullptr, big.view.ring = 128;
  Dev<float> q2(size_t(4) * 64), out2(q2.n);
  EXPECT_THROW(cuda::flash_prefill(big.view, q2.p, as_dev_bf16(sinks), 0, 0, out2.p, 1, 4, 0, 0.125f, nullptr),
               std::exception);
  EXPECT_THROW(cuda::paged_attention(big.view, q2.p, as_dev_bf16(sinks), slot.p, pos.p, out2.p, 1, 4, 0, 0.125f, 1,
                                     scratch.p, nullptr),
               std::exception);
  // The FP16 cache runs on the tensor-core kernels only: head_dim 16 is refused too.
  DeviceKvLayer small16(1, 2, 16, 0, 0, 2, 5, KvDtype::Fp16);
  EXPECT_THROW(cuda::paged_attention(small16.view, q.p, as_dev_bf16(sinks), slot.p, pos.p, out.p, 1, 4, 0, 0.25f, 1,
                                     scratch.p, nullptr),
               std::exception);
}


// Scales that differ per token and per block (uniform random inputs give nearly equal block scales,
// which would hide a scale-layout error): cuBLASLt against the CPU emulation, with the activation
// scales as formats/fp8.h lays them out ([K/128][M]) and, for the diagnosis, transposed ([M][K/128]).
TEST(CudaFp8, CublasLtScaleLayoutWithUnequalScales) {
  const int M = 200, N = 384, K = 2880, KB = fp8::blocks(K);
  auto w = randbf(size_t(N) * K, 70);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) w[size_t(n) * K + k] = f32_to_bf16(bf16_to_f32(w[size_t(n) * K + k]) * float(1 << ((n / 128 + k / 128) % 5)));
  fp8::Matrix W = cpu_quantize(w, N, K);
  auto x = randf(size_t(M) * K, 71);
  for (int t = 0; t < M; ++t)
    for (int k = 0; k < K; ++k) x[size_t(t) * K + k] *= float(1 << ((t + 2 * (k / 128)) % 7));
  std::vector<float> ref(size_t(M) * N);
  cpu::f32_fp8w_matmul(x.data(), W.data(), W.scale(), W.scale_stride(), nullptr, ref.data(), M, N, K);
  DevFp8 dW(W);
  Dev<float> dx(x), xs(size_t(KB) * M), y(ref.size());
  Dev<uint8_t> xq(x.size());
  cuda::quantize_act_1x128(dx.p, nullptr, M, K, xq.p, xs.p, cuda::ActScales::dense(M), nullptr);
  cuda::BlockFp8Gemm lt(nullptr);
  lt.run(dW.q.p, dW.s.p, xq.p, xs.p, y.p, M, N, K);
  const double err = rel_err(y.get(), ref);
  auto s = xs.get();
  std::vector<float> st(s.size());
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < M; ++t) st[size_t(t) * KB + kb] = s[size_t(kb) * M + t];
  Dev<float> xst(st), y2(ref.size());
  lt.run(dW.q.p, dW.s.p, xq.p, xst.p, y2.p, M, N, K);
  const double err_t = rel_err(y2.get(), ref);
  std::printf("cuBLASLt VEC128 activation scales: [K/128][M] rel. error %.3e, [M][K/128] rel. error %.3e\n", err, err_t);
  EXPECT_LT(err, 4e-3);
}


// As the model calls it: one activation buffer, several weights (two of one shape, so they share a
// cached plan), back to back on a non-blocking stream, small K with a partial block. Unequal scales.
TEST(CudaFp8, CublasLtSequenceOnAStream) {
  cudaStream_t st;
  OSPREY_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (auto [M, K] : {std::pair{200, 160}, {200, 2880}}) {
    const int Ns[3] = {128, 64, 64};
    auto x = randf(size_t(M) * K, 90);
    for (int t = 0; t < M; ++t)
      for (int k = 0; k < K; ++k) x[size_t(t) * K + k] *= float(1 << ((t + k / 128) % 5));
    Dev<float> dx(x), xs(size_t(fp8::blocks(K)) * M);
    Dev<uint8_t> xq(x.size());
    cuda::quantize_act_1x128(dx.p, nullptr, M, K, xq.p, xs.p, cuda::ActScales::dense(M), st);
    cuda::BlockFp8Gemm lt(st);
    std::vector<fp8::Matrix> Ws;
    std::vector<std::unique_ptr<DevFp8>> dWs;
    std::vector<std::unique_ptr<Dev<float>>> ys;
    for (int i = 0; i < 3; ++i) {
      auto w = randbf(size_t(Ns[i]) * K, 91 + i, float(1 + 3 * i));
      Ws.push_back(cpu_quantize(w, Ns[i], K));
      dWs.push_back(std::make_unique<DevFp8>(Ws.back()));
      ys.push_back(std::make_unique<Dev<float>>(size_t(M) * Ns[i]));
    }
    ASSERT_TRUE(lt.available(M, Ns[0], K) && lt.available(M, Ns[1], K));
    for (int i = 0; i < 3; ++i) lt.run(dWs[i]->q.p, dWs[i]->s.p, xq.p, xs.p, ys[i]->p, M, Ns[i], K);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> ref(size_t(M) * Ns[i]);
      cpu::f32_fp8w_matmul(x.data(), Ws[i].data(), Ws[i].scale(), Ws[i].scale_stride(), nullptr, ref.data(), M, Ns[i], K);
      EXPECT_LT(rel_err(ys[i]->get(), ref), 4e-3) << "M " << M << " K " << K << " weight " << i;
    }
  }
  cudaStreamDestroy(st);
}


// The fused norm + quantization: its fp32 rows match rmsnorm_to_f32 (a different reduction order,
// so within 1e-6), and its codes and scales are quantize_act_1x128 of exactly those rows.
TEST_P(Fp8Tokens, RmsNormQuantizeEqualsNormThenQuantize) {
  const int T = GetParam(), H = 2880, ld = fp8::round4(T), KB = fp8::blocks(H);
  auto x = randf(size_t(T) * H, 100, 4.0f);
  auto g = randbf(H, 101);
  Dev<float> dx(x), h(x.size()), s1(size_t(KB) * ld), s2(size_t(KB) * ld), hout(x.size());
  Dev<bf16> dg(g);
  Dev<uint8_t> q1(x.size()), q2(x.size());
  cuda::rmsnorm_to_f32(dx.p, as_dev_bf16(dg), h.p, T, H, 1e-5f, nullptr);
  cuda::rmsnorm_quantize(dx.p, as_dev_bf16(dg), T, H, 1e-5f, q2.p, s2.p, ld, hout.p, nullptr);
  EXPECT_LT(rel_err(hout.get(), h.get()), 1e-6);
  cuda::quantize_act_1x128(hout.p, nullptr, T, H, q1.p, s1.p, cuda::ActScales::dense(ld), nullptr);
  EXPECT_EQ(q1.get(), q2.get());
  auto a = s1.get(), b = s2.get();
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < T; ++t) ASSERT_EQ(a[size_t(kb) * ld + t], b[size_t(kb) * ld + t]);
}

// T fused QKV rows (positions 100, 103, ... of slot 1) written to the cache both ways: rotated by
// cuda::rope (q into dq) and written by kv_write into `a`, and by qkv_rope_to_cache (q into q2)
// into `b`; both caches of the given format.
struct RopeToCacheRun {
  static constexpr int heads = 64, kvh = 8, d = 64, W = (heads + 2 * kvh) * d, max_pages = 8;
  std::vector<int32_t> pos;
  Dev<float> dq, q2;
  DeviceKvLayer a, b;
  RopeToCacheRun(int T, uint32_t seed, uint32_t table_seed, KvDtype dtype)
      : pos(T), dq(size_t(T) * heads * d), q2(dq.n), a(2, kvh, d, 0, 0, max_pages, table_seed, dtype),
        b(2, kvh, d, 0, 0, max_pages, table_seed, dtype) {
    auto qkv = randf(size_t(T) * W, seed, 3.0f);
    std::vector<float> q(size_t(T) * heads * d), k(size_t(T) * kvh * d), v(k.size());
    for (int t = 0; t < T; ++t) {
      std::copy_n(&qkv[size_t(t) * W], heads * d, &q[size_t(t) * heads * d]);
      std::copy_n(&qkv[size_t(t) * W + heads * d], kvh * d, &k[size_t(t) * kvh * d]);
      std::copy_n(&qkv[size_t(t) * W + (heads + kvh) * d], kvh * d, &v[size_t(t) * kvh * d]);
    }
    std::vector<int32_t> slot(T, 1);
    for (int t = 0; t < T; ++t) pos[t] = 100 + 3 * t;  // within 8 pages of 64
    std::vector<float> inv(d / 2);
    for (int i = 0; i < d / 2; ++i) inv[i] = std::pow(150000.0f, -2.0f * i / d);
    Dev<float> dqkv(qkv), dk(k), dv(v), dinv(inv);
    OSPREY_CUDA_CHECK(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    Dev<int32_t> dpos(pos), dslot(slot);
    cuda::rope(dq.p, dpos.p, dinv.p, 1.3f, T, heads, d, nullptr);
    cuda::rope(dk.p, dpos.p, dinv.p, 1.3f, T, kvh, d, nullptr);
    cuda::kv_write(a.view, dk.p, dv.p, dslot.p, dpos.p, T, nullptr);
    cuda::qkv_rope_to_cache(b.view, dqkv.p, dslot.p, dpos.p, dinv.p, 1.3f, T, heads, q2.p, nullptr);
  }
};

TEST_P(Fp8Tokens, QkvRopeToCacheEqualsRopeAndKvWrite) {
  RopeToCacheRun r(GetParam(), 102, 90, KvDtype::Bf16);
  DeviceKvLayer &a = r.a, &b = r.b;
  const Dev<float> &q2 = r.q2, &dq = r.dq;
  // The same arithmetic; the compiler may contract it into FMAs differently, so not bit for bit.
  EXPECT_LT(rel_err(q2.get(), dq.get()), 1e-6);
  auto to_f32 = [](const std::vector<bf16>& h) {
    std::vector<float> f;
    for (bf16 x : h) f.push_back(std::isnan(bf16_to_f32(x)) ? 0.0f : bf16_to_f32(x));  // unwritten rows stay poisoned (NaN)
    return f;
  };
  EXPECT_LT(rel_err(to_f32(b.k.get()), to_f32(a.k.get())), 1e-5);
  EXPECT_EQ(b.v.get(), a.v.get());
}

// The same into the FP8 cache: values copied, so their codes and exponents are kv_write's bit for
// bit; the rotated keys agree up to the rotation's FMA contraction, which may move a code by one
// step (1/16 relative) here and there.
TEST_P(Fp8Tokens, QkvRopeToCacheFp8EqualsRopeAndKvWrite) {
  const int T = GetParam(), kvh = RopeToCacheRun::kvh, d = RopeToCacheRun::d;
  RopeToCacheRun r(T, 103, 91, KvDtype::Fp8);
  DeviceKvLayer &a = r.a, &b = r.b;
  const Dev<float> &q2 = r.q2, &dq = r.dq;
  EXPECT_LT(rel_err(q2.get(), dq.get()), 1e-6);
  EXPECT_EQ(b.v8.get(), a.v8.get());
  EXPECT_EQ(b.ve.get(), a.ve.get());
  // Keys: dequantized, over the written rows.
  const auto table = a.table.get();
  const auto ka = a.k8.get(), kb = b.k8.get();
  const auto ea = a.ke.get(), eb = b.ke.get();
  std::vector<float> fa, fb;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < kvh; ++h) {
      const size_t row = a.row_of(table, 1, r.pos[t]), ei = a.exp_index(row, h);
      for (int i = 0; i < d; ++i) {
        fa.push_back(kv_fp8::dequantize(ka[(row * kvh + h) * d + i], ea[ei]));
        fb.push_back(kv_fp8::dequantize(kb[(row * kvh + h) * d + i], eb[ei]));
      }
    }
  EXPECT_LT(rel_err(fb, fa), 1e-2);
}

// The same into the FP16 cache: values copied (bit for bit), rotated keys up to the rotation's FMA
// contraction.
TEST_P(Fp8Tokens, QkvRopeToCacheFp16EqualsRopeAndKvWrite) {
  RopeToCacheRun r(GetParam(), 106, 92, KvDtype::Fp16);
  EXPECT_LT(rel_err(r.q2.get(), r.dq.get()), 1e-6);
  auto to_f32 = [](const std::vector<bf16>& h) {  // the arrays' raw 16 bits, read as FP16
    std::vector<float> f;
    for (uint16_t x : h) f.push_back(std::isnan(f16_to_f32(x)) ? 0.0f : f16_to_f32(x));  // unwritten rows: poisoned
    return f;
  };
  EXPECT_LT(rel_err(to_f32(r.b.k.get()), to_f32(r.a.k.get())), 1e-5);
  EXPECT_EQ(r.b.v.get(), r.a.v.get());
}

// The QKV bias added by the rope kernel as it reads the rows (a cuBLASLt output comes without it)
// equals add_bias first, bit for bit.
TEST_P(Fp8Tokens, QkvRopeToCacheAddsTheBiasAsAddBiasWould) {
  const int T = GetParam(), heads = 64, kvh = 8, d = 64, W = (heads + 2 * kvh) * d, max_pages = 8;
  auto qkv = randf(size_t(T) * W, 104, 3.0f);
  auto bias = randbf(W, 105, 2.0f);
  std::vector<int32_t> pos(T), slot(T, 1);
  for (int t = 0; t < T; ++t) pos[t] = 100 + 3 * t;
  std::vector<float> inv(d / 2);
  for (int i = 0; i < d / 2; ++i) inv[i] = std::pow(150000.0f, -2.0f * i / d);
  Dev<float> d1(qkv), d2(qkv), q1(size_t(T) * heads * d), q2(q1.n), dinv(inv);
  Dev<bf16> db(bias);
  Dev<int32_t> dpos(pos), dslot(slot);
  DeviceKvLayer a(2, kvh, d, 0, 0, max_pages, 90), b(2, kvh, d, 0, 0, max_pages, 90);
  cuda::add_bias(d1.p, as_dev_bf16(db), T, W, nullptr);
  cuda::qkv_rope_to_cache(a.view, d1.p, dslot.p, dpos.p, dinv.p, 1.3f, T, heads, q1.p, nullptr);
  cuda::qkv_rope_to_cache(b.view, d2.p, dslot.p, dpos.p, dinv.p, 1.3f, T, heads, q2.p, nullptr, false, as_dev_bf16(db));
  EXPECT_EQ(q1.get(), q2.get());
  auto bits = [](const std::vector<bf16>& h) {
    std::vector<uint16_t> u(h.size());
    std::memcpy(u.data(), h.data(), h.size() * 2);
    return u;
  };
  EXPECT_EQ(bits(a.k.get()), bits(b.k.get()));
  EXPECT_EQ(bits(a.v.get()), bits(b.v.get()));
  EXPECT_EQ(d2.get(), qkv);  // the input rows are left as they were
}

// The o-projection's accumulate (cuBLASLt output + bias into the residual stream) in one pass:
// the sums of add_bias then add_inplace, bit for bit; 2880 columns (16-byte steps) and 30 (one
// value a thread), with and without a bias.
TEST_P(Fp8Tokens, AddBiasAccumulateEqualsAddBiasThenAdd) {
  const int T = GetParam();
  for (int N : {2880, 30})
    for (bool with_bias : {true, false}) {
      auto x = randf(size_t(T) * N, 106, 5.0f), y = randf(size_t(T) * N, 107, 5.0f);
      auto bias = randbf(N, 108, 2.0f);
      Dev<float> x1(x), x2(x), y1(y), y2(y);
      Dev<bf16> db(bias);
      const cuda::bf16* b = with_bias ? as_dev_bf16(db) : nullptr;
      cuda::add_bias(y1.p, b, T, N, nullptr);
      cuda::add_inplace(x1.p, y1.p, size_t(T) * N, nullptr);
      cuda::add_bias_accumulate(x2.p, y2.p, b, T, N, nullptr);
      EXPECT_EQ(x1.get(), x2.get()) << "N " << N << (with_bias ? " with bias" : "");
      EXPECT_EQ(y2.get(), y);
    }
}

// The largest |ref| and the largest |got - ref|: the route's tensor-core logits are held within
// 1e-5 of the largest fp32 logit.
struct LogitsGap {
  float big = 0, worst = 0;
};
LogitsGap logits_gap(const std::vector<float>& ref, const std::vector<float>& got) {
  LogitsGap d;
  for (size_t i = 0; i < ref.size(); ++i)
    d.big = std::max(d.big, std::fabs(ref[i])), d.worst = std::max(d.worst, std::fabs(got[i] - ref[i]));
  return d;
}

// The MoE front: its fp32 rows match rmsnorm_to_f32 within 1e-6 (another reduction order), its
// codes and scales are quantize_act_1x128 of exactly those rows. Up to 512 tokens (blocks of 8
// experts, the last one for a token doing the top-k), and for prompt chunks (more than 512
// tokens) of up to 32 experts, its router logits and top-k are linear_f32_small and topk_softmax
// of those rows bit for bit. Prompt chunks of more experts take their logits from the tensor
// cores (three BF16 terms of each input): within 1e-5 of linear_f32_small's (relative to the
// largest), the same experts wherever the k-th and the next logit are further apart than that,
// and the same weights to 1e-5. 32 experts (gpt-oss-20b) and 128 (120b), twice (the counters
// reset themselves).
void MoeRouteCase(int T, int E) {
  const int H = 2880, k = 4, ld = fp8::round4(T), KB = fp8::blocks(H);
  auto x = randf(size_t(T) * H, 110, 4.0f);
  auto g = randbf(H, 111);
  auto router16 = randbf(size_t(E) * H, 112, 0.05f);  // as the checkpoint ships it; dr: the same values in fp32
  auto rb = randbf(E, 113);
  Dev<bf16> dr16(router16);
  Dev<float> dx(x), dr(widen(router16)), h1(x.size()), h2(x.size()), logits(size_t(T) * E), l2(logits.n), w1(size_t(T) * k),
      w2(w1.n);
  Dev<float> s1(size_t(KB) * ld), s2(s1.n);
  Dev<bf16> dg(g), drb(rb);
  Dev<uint8_t> q1(x.size()), q2(x.size());
  Dev<int32_t> i1(size_t(T) * k), i2(i1.n), counters(std::vector<int32_t>(T + 1, 0));
  const int P = cuda::moe_rows_max(T, k, E);
  Dev<int32_t> seg(E + 1), row_token(P), pair_row(size_t(T) * k), active(E);
  Dev<int32_t> seg1(E + 1), row_token1(P), pair_row1(size_t(T) * k), active1(E);
  cuda::rmsnorm_to_f32(dx.p, as_dev_bf16(dg), h1.p, T, H, 1e-5f, nullptr);
  for (int rep = 0; rep < 2; ++rep)
    cuda::moe_route(dx.p, as_dev_bf16(dg), T, H, 1e-5f, q2.p, s2.p, ld, h2.p, as_dev_bf16(dr16), as_dev_bf16(drb), E, k, l2.p,
                    counters.p, i2.p, w2.p, {seg.p, row_token.p, pair_row.p, active.p}, nullptr);
  EXPECT_LT(rel_err(h2.get(), h1.get()), 1e-6);
  cuda::quantize_act_1x128(h2.p, nullptr, T, H, q1.p, s1.p, cuda::ActScales::dense(ld), nullptr);
  cuda::linear_f32_small(dr.p, h2.p, as_dev_bf16(drb), logits.p, T, E, H, nullptr);
  cuda::topk_softmax(logits.p, i1.p, w1.p, T, E, k, nullptr);
  EXPECT_EQ(q1.get(), q2.get());
  auto a = s1.get(), b = s2.get();
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < T; ++t) ASSERT_EQ(a[size_t(kb) * ld + t], b[size_t(kb) * ld + t]);
  if (T <= 512 || E <= 32) {
    EXPECT_EQ(logits.get(), l2.get());
    EXPECT_EQ(i1.get(), i2.get());
    EXPECT_EQ(w1.get(), w2.get());
  } else {
    const auto lf = logits.get(), lm = l2.get();
    const auto if32 = i1.get(), im = i2.get();
    const auto wf = w1.get(), wm = w2.get();
    const auto [big, worst] = logits_gap(lf, lm);
    EXPECT_LE(worst, 1e-5f * big) << "T " << T << " E " << E;
    int compared = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<float> row(lf.begin() + size_t(t) * E, lf.begin() + size_t(t + 1) * E);
      std::sort(row.begin(), row.end(), std::greater<float>());
      if (row[k - 1] - row[k] <= 2e-5f * big) continue;  // a near tie: either choice is right
      ++compared;
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(if32[size_t(t) * k + j], im[size_t(t) * k + j]) << "token " << t << " choice " << j;
        ASSERT_NEAR(wf[size_t(t) * k + j], wm[size_t(t) * k + j], 1e-5f) << "token " << t << " choice " << j;
      }
    }
    EXPECT_GT(compared, T * 9 / 10);
  }
  EXPECT_EQ(counters.get(), std::vector<int32_t>(T + 1, 0));
  // The sort of the kernel's own choices: the same segments and active experts as moe_sort; rows
  // within an expert's run may come in another order (atomics), so each pair's row is checked for
  // its token and expert.
  cuda::moe_sort(i2.p, T, k, E, seg1.p, row_token1.p, pair_row1.p, active1.p, nullptr);
  EXPECT_EQ(seg.get(), seg1.get());
  auto act = active.get(), act1 = active1.get();
  for (size_t i = 0; i < std::min<size_t>(E, size_t(T) * k); ++i) EXPECT_EQ(act[i], act1[i]);
  auto hs = seg.get(), rt = row_token.get(), pr = pair_row.get(), ids = i2.get();
  std::vector<int> used(P, 0);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = pr[size_t(t) * k + j], e = ids[size_t(t) * k + j];
      ASSERT_TRUE(r >= hs[e] && r < hs[e + 1]);
      ASSERT_EQ(rt[r], t);
      ASSERT_EQ(used[r]++, 0);
    }
}

TEST_P(Fp8Tokens, MoeRouteEqualsNormRouterTopk) {
  MoeRouteCase(GetParam(), 32);
  MoeRouteCase(GetParam(), 128);
}

// Prompt chunks (more than 512 tokens) take the tiled kernels: the same checks at tiles of 1
// token (513), 3 with a remainder (1000), 7 (2048) and 8 with a remainder (4300, the tile of an
// 8192-row chunk), and a last logits tile of 1 to 60 tokens.
TEST(CudaFp8, MoeRouteTiledEqualsNormRouterTopk) {
  for (int T : {513, 1000, 2048, 4300}) {
    MoeRouteCase(T, 32);
    MoeRouteCase(T, 128);
  }
}

// The tiled norms (a warp per row) are the per-token kernel's (a block per row) bit for bit: rows
// 0..511 of a 513-token chunk against the same 512 rows routed alone; their logits too with 32
// experts (the same fp32 sums), within 1e-5 of the largest with 128 (the tensor cores').
TEST(CudaFp8, MoeRouteTiledRowsEqualPerTokenRows) {
  const int H = 2880, k = 4, KB = fp8::blocks(H);
  for (int E : {32, 128}) {
    auto x = randf(size_t(513) * H, 114, 4.0f);
    auto g = randbf(H, 115);
    auto router = randbf(size_t(E) * H, 116, 0.05f);
    auto rb = randbf(E, 117);
    Dev<float> dx(x);
    Dev<bf16> dg(g), dr(router), drb(rb);
    struct Out {
      std::vector<float> h, s, logits;
      std::vector<uint8_t> q;
    };
    auto route = [&](int T) {
      const int P = cuda::moe_rows_max(T, k, E), ld = fp8::round4(T);
      Dev<float> h(size_t(T) * H), sc(size_t(KB) * ld), logits(size_t(T) * E), w(size_t(T) * k);
      Dev<uint8_t> q(size_t(T) * H);
      Dev<int32_t> idx(size_t(T) * k), counters(std::vector<int32_t>(T + 1, 0)), seg(E + 1), row_token(P),
          pair_row(size_t(T) * k), active(E);
      cuda::moe_route(dx.p, as_dev_bf16(dg), T, H, 1e-5f, q.p, sc.p, ld, h.p, as_dev_bf16(dr), as_dev_bf16(drb), E, k,
                      logits.p, counters.p, idx.p, w.p, {seg.p, row_token.p, pair_row.p, active.p}, nullptr);
      return Out{h.get(), sc.get(), logits.get(), q.get()};
    };
    Out tiled = route(513), per_token = route(512);
    auto head = [](std::vector<float> v, size_t n) { v.resize(n); return v; };
    EXPECT_EQ(head(tiled.h, size_t(512) * H), per_token.h) << "E " << E;
    const std::vector<float> lt = head(tiled.logits, size_t(512) * E);
    if (E <= 32) {
      EXPECT_EQ(lt, per_token.logits);
    } else {
      const auto [big, worst] = logits_gap(per_token.logits, lt);
      EXPECT_GT(big, 0.5f);
      EXPECT_LE(worst, 1e-5f * big);
    }
    EXPECT_TRUE(std::equal(per_token.q.begin(), per_token.q.end(), tiled.q.begin())) << "E " << E;
    const std::vector<float>&s1 = tiled.s, &s2 = per_token.s;
    for (int kb = 0; kb < KB; ++kb)
      for (int t = 0; t < 512; ++t) ASSERT_EQ(s1[size_t(kb) * 516 + t], s2[size_t(kb) * 512 + t]) << kb << " " << t;
  }
}

// A token's prompt-chunk logits do not depend on its chunk: the same token at another row of its
// tile (the chunk starting one token later), in a chunk of another length (a last tile of 1 token
// against one of 21) and among other tokens gives the same bits. 32 experts (gpt-oss-20b: fp32
// sums), 128 (120b: the tensor cores) and 256 (the widest).
TEST(CudaFp8, MoeRoutePromptLogitsDoNotDependOnTheChunk) {
  const int H = 2880, k = 4, T = 1045;
  auto x = randf(size_t(T + 1) * H, 140, 4.0f);
  for (int E : {32, 128, 256}) {
    Dev<float> dx(x);
    Dev<bf16> dg(randbf(H, 141)), dr(randbf(size_t(E) * H, 142, 0.05f)), drb(randbf(E, 143));
    auto route = [&](int first, int n) {
      const int P = cuda::moe_rows_max(n, k, E), ld = fp8::round4(n), KB = fp8::blocks(H);
      Dev<float> sc(size_t(KB) * ld), logits(size_t(n) * E), w(size_t(n) * k);
      Dev<uint8_t> q(size_t(n) * H);
      Dev<int32_t> idx(size_t(n) * k), counters(std::vector<int32_t>(n + 1, 0)), seg(E + 1), row_token(P),
          pair_row(size_t(n) * k), active(E);
      cuda::moe_route(dx.p + size_t(first) * H, as_dev_bf16(dg), n, H, 1e-5f, q.p, sc.p, ld, nullptr, as_dev_bf16(dr),
                      as_dev_bf16(drb), E, k, logits.p, counters.p, idx.p, w.p,
                      {seg.p, row_token.p, pair_row.p, active.p}, nullptr);
      return logits.get();
    };
    const std::vector<float> a = route(0, T + 1), b = route(1, T), c = route(0, 1025);
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < E; ++e)
        ASSERT_EQ(a[size_t(t + 1) * E + e], b[size_t(t) * E + e]) << "E " << E << " token " << t + 1 << " expert " << e;
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(a[i], c[i]) << "E " << E << " at " << i;
  }
}

// A broken model's NaN or infinite hidden states give NaN or -inf router logits: the route still
// chooses k distinct experts in range (the lowest free ones) and sorts them, instead of writing
// out of bounds with expert INT32_MAX. Rows 0 NaN, 1 +inf, 2 finite; T 3 (the per-token kernel).
TEST(CudaFp8, MoeRouteChoosesExpertsFromNonFiniteLogits) {
  const int H = 256, E = 8, k = 4, T = 3, KB = fp8::blocks(H), P = cuda::moe_rows_max(T, k, E), ld = fp8::round4(T);
  auto x = randf(size_t(T) * H, 131, 1.0f);
  for (int i = 0; i < H; ++i) x[i] = std::nanf(""), x[H + i] = INFINITY;
  Dev<bf16> dr(randbf(size_t(E) * H, 132, 0.05f));
  Dev<float> dx(x), h(size_t(T) * H), sc(size_t(KB) * ld), logits(size_t(T) * E),
      w(size_t(T) * k);
  Dev<bf16> dg(randbf(H, 133)), drb(randbf(E, 134));
  Dev<uint8_t> q(size_t(T) * H);
  Dev<int32_t> idx(size_t(T) * k), counters(std::vector<int32_t>(T + 1, 0)), seg(E + 1), row_token(P),
      pair_row(size_t(T) * k), active(E);
  cuda::moe_route(dx.p, as_dev_bf16(dg), T, H, 1e-5f, q.p, sc.p, ld, h.p, as_dev_bf16(dr), as_dev_bf16(drb), E, k,
                  logits.p, counters.p, idx.p, w.p, {seg.p, row_token.p, pair_row.p, active.p}, nullptr);
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> choices = idx.get(), segs = seg.get(), pr = pair_row.get();
  for (int t = 0; t < T; ++t) {
    std::set<int32_t> distinct;
    for (int j = 0; j < k; ++j) {
      const int32_t e = choices[size_t(t) * k + j];
      ASSERT_TRUE(e >= 0 && e < E) << "token " << t << " choice " << j << ": expert " << e;
      distinct.insert(e);
    }
    EXPECT_EQ(distinct.size(), size_t(k)) << "token " << t;
  }
  EXPECT_EQ((std::vector<int32_t>(choices.begin(), choices.begin() + k)), (std::vector<int32_t>{0, 1, 2, 3}));
  for (int p = 0; p < T * k; ++p) {
    const int32_t e = choices[size_t(p)];
    EXPECT_TRUE(pr[size_t(p)] >= segs[size_t(e)] && pr[size_t(p)] < segs[size_t(e) + 1]) << "pair " << p;
  }
}

// The experts' input rows gathered from the route kernel's quantized rows equal the quantization of
// the gathered fp32 rows bit for bit, padding rows (zeros, scale 1) included; K 2880 (22.5 blocks,
// 16-byte pieces) and 150 (one code at a time).
TEST_P(Fp8Tokens, GatherActEqualsQuantizeOfGatheredRows) {
  const int T = GetParam(), E = 8, k = 4;
  for (int K : {2880, 150}) {
    const int ld = fp8::round4(T), KB = fp8::blocks(K), P = cuda::moe_rows_max(T, k, E);
    DevSortedPairs sorted(modular_choices(T, k, E, 1, 3), T, k, E);
    const cuda::ActScales by_expert = cuda::ActScales::by_expert(sorted.seg.p, E);
    Dev<float> x(randf(size_t(T) * K, 123, 6.0f)), s_in(size_t(KB) * ld), s1(size_t(P) * KB), s2(s1.n);
    Dev<uint8_t> q_in(size_t(T) * K), q1(size_t(P) * K), q2(q1.n);
    cuda::quantize_act_1x128(x.p, nullptr, T, K, q_in.p, s_in.p, cuda::ActScales::dense(ld), nullptr);
    cuda::quantize_act_1x128(x.p, sorted.row_token.p, P, K, q1.p, s1.p, by_expert, nullptr);
    cuda::gather_act_1x128(q_in.p, s_in.p, ld, sorted.row_token.p, P, K, q2.p, s2.p, by_expert, nullptr);
    const int rows = sorted.seg.get()[E];
    auto c1 = q1.get(), c2 = q2.get();
    ASSERT_TRUE(std::equal(c1.begin(), c1.begin() + size_t(rows) * K, c2.begin())) << "K " << K;
    auto a1 = s1.get(), a2 = s2.get();
    ASSERT_TRUE(std::equal(a1.begin(), a1.begin() + size_t(rows) * KB, a2.begin())) << "K " << K;
  }
}

void MoeSwigluCase(int T) {
  const int E = 8, k = 4, I = 2880;
  std::mt19937 rng(120);
  const std::vector<int32_t> idx = modular_choices(T, k, E, 1, 3);
  const int P = cuda::moe_rows_max(T, k, E);
  DevSortedPairs sorted(idx, T, k, E);
  auto& [di, seg, row_token, pair_row, active] = sorted;
  const cuda::ActScales sg = cuda::ActScales::by_expert(seg.p, E);
  auto hseg = seg.get();
  const int rows = hseg[E];
  auto t = randf(size_t(P) * 2 * I, 121, 12.0f);  // beyond the clamp limit (7) too
  auto b1 = randbf(size_t(E) * 2 * I, 122, 2.0f);
  // Reference: the bias added on the host (the same fp32 addition), swiglu_to_f32, quantize_act_1x128.
  std::vector<float> tb(t);
  for (int e = 0; e < E; ++e)
    for (int r = hseg[e]; r < hseg[e + 1]; ++r)
      for (int i = 0; i < 2 * I; ++i) tb[size_t(r) * 2 * I + i] += bf16_to_f32(b1[size_t(e) * 2 * I + i]);
  Dev<float> dt(t), dtb(tb), a(size_t(P) * I), s1(size_t(P) * fp8::blocks(I) + 64), s2(s1.n);
  Dev<bf16> db(b1);
  Dev<uint8_t> q1(size_t(P) * I), q2(q1.n);
  cuda::swiglu_to_f32(dtb.p, a.p, rows, I, 1.702f, 7.0f, nullptr);
  cuda::quantize_act_1x128(a.p, nullptr, rows, I, q1.p, s1.p, sg, nullptr);
  cuda::moe_swiglu_quantize(dt.p, as_dev_bf16(db), sg, P, I, 1.702f, 7.0f, q2.p, s2.p, nullptr);
  auto c1 = q1.get(), c2 = q2.get();
  ASSERT_TRUE(std::equal(c1.begin(), c1.begin() + size_t(rows) * I, c2.begin()));
  auto a1 = s1.get(), a2 = s2.get();
  ASSERT_TRUE(std::equal(a1.begin(), a1.begin() + size_t(rows) * fp8::blocks(I), a2.begin()));
}

TEST_P(Fp8Tokens, MoeSwigluQuantizeEqualsSwigluThenQuantize) { MoeSwigluCase(GetParam()); }

// Prompt chunks (more than 2048 sorted rows) take the warp-per-row kernel: the same checks.
TEST(CudaFp8, MoeSwigluQuantizeRowsEqualsSwigluThenQuantize) {
  for (int T : {600, 1500}) MoeSwigluCase(T);
}

// The experts' second GEMM with its weight ring filled before its PDL wait (routed_early: the
// expert list read first; here the stream is serial) equals the ordinary launch bit for bit, also
// at one token with the padding rows skipped (the one-row tile), which gives the real rows of the
// launch that computes every row (activation scales laid out per whole segment, padding included).
TEST_P(Fp8Tokens, GroupedSkinnyGemmRoutedEarlyIsIdentical) {
  const int T = GetParam(), E = 8, k = 4, I = 2880, N = 400;
  const std::vector<int32_t> idx = modular_choices(T, k, E, 1, 3);
  const int P = cuda::moe_rows_max(T, k, E);
  DevSortedPairs sorted(idx, T, k, E);
  auto& [di, seg, row_token, pair_row, active] = sorted;
  const int rows = seg.get()[E];
  const fp8::Matrix all = random_experts(E, N, I, 140);
  DevFp8 dW(all);
  Dev<bf16> db(randbf(size_t(E) * N, 139));
  // Inputs below the clamp, scaled by (row, block), so every 128-block of a row gets its own
  // activation scale (saturated inputs would give every block the same one, and a wrong scale
  // index would go unseen).
  std::vector<float> ht = randf(size_t(P) * 2 * I, 138, 3.0f);
  for (int r = 0; r < P; ++r)
    for (int c = 0; c < 2 * I; ++c) ht[size_t(r) * 2 * I + c] *= 0.25f + 0.25f * float((r * 7 + c / 256) % 5);
  Dev<float> dt(ht), s(size_t(P) * fp8::blocks(I) + 64);
  Dev<uint8_t> q(size_t(P) * I);
  std::vector<float> whole;  // every row computed, launched the ordinary way
  for (const bool skip_padding : {false, true}) {
    if (skip_padding && T != 1) continue;
    cuda::Fp8ExpertRows sorted_rows{.seg = seg.p, .experts = E, .rows = P, .active = active.p,
                                    .active_max = std::min(E, T * k)};
    if (skip_padding) sorted_rows.row_live = row_token.p, sorted_rows.rows_max = 1;
    Dev<float> y1(size_t(P) * N), y2(y1.n);
    cuda::moe_swiglu_quantize(dt.p, nullptr, cuda::ActScales::by_expert(seg.p, E), P, I, 1.702f, 7.0f, q.p, s.p, nullptr);
    cuda::m_grouped_fp8_gemm_contiguous(dW.q.p, dW.s.p, all.scale_stride(), as_dev_bf16(db), q.p, s.p, sorted_rows, y1.p, N, I,
                                        fp8::round4(T), nullptr);
    cuda::Fp8ExpertRows early = sorted_rows;
    early.routed_early = true;
    cuda::m_grouped_fp8_gemm_contiguous(dW.q.p, dW.s.p, all.scale_stride(), as_dev_bf16(db), q.p, s.p, early, y2.p, N, I,
                                        fp8::round4(T), nullptr);
    auto a = y1.get(), b = y2.get();
    auto hrow = row_token.get();
    int checked = 0;
    for (int r = 0; r < rows; ++r) {
      if (skip_padding && hrow[r] < 0) continue;
      for (int n = 0; n < N; ++n) ASSERT_EQ(a[size_t(r) * N + n], b[size_t(r) * N + n]) << "row " << r << " col " << n;
      if (skip_padding) {  // the one-row tile (other K-splits, so another order of the sums) on the real rows
        std::vector<float> one(a.begin() + size_t(r) * N, a.begin() + size_t(r + 1) * N);
        std::vector<float> ref(whole.begin() + size_t(r) * N, whole.begin() + size_t(r + 1) * N);
        EXPECT_LT(rel_err(one, ref), 1e-6) << "row " << r;
      }
      ++checked;
    }
    EXPECT_EQ(checked, skip_padding ? T * k : rows);
    if (!skip_padding) whole = a;
  }
}

void MoeCombineCase(int T, int k = 4) {
  const int E = 8, H = 2880, ld = fp8::round4(T), KB = fp8::blocks(H);
  const std::vector<int32_t> idx = modular_choices(T, k, E, 2, 1);
  const int P = cuda::moe_rows_max(T, k, E);
  DevSortedPairs sorted(idx, T, k, E);
  auto& [di, seg, row_token, pair_row, active] = sorted;
  auto x = randf(size_t(T) * H, 130, 3.0f), y = randf(size_t(P) * H, 131, 2.0f), w = randf(size_t(T) * k, 132, 1.0f);
  auto b2 = randbf(size_t(E) * H, 133), g = randbf(H, 134);
  auto pr = pair_row.get();
  std::vector<float> want(x);  // the combine on the host
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H; ++i) {
      float acc = 0;
      for (int j = 0; j < k; ++j)
        acc += w[size_t(t) * k + j] * (y[size_t(pr[size_t(t) * k + j]) * H + i] +
                                       bf16_to_f32(b2[size_t(idx[size_t(t) * k + j]) * H + i]));
      want[size_t(t) * H + i] += acc;
    }
  Dev<float> dx(x), dy(y), dw(w), s1(size_t(KB) * ld), s2(s1.n);
  Dev<bf16> db(b2), dg(g);
  Dev<uint8_t> q1(x.size()), q2(x.size());
  cuda::moe_combine_norm(dx.p, dy.p, pair_row.p, dw.p, di.p, as_dev_bf16(db), T, k, H, as_dev_bf16(dg), 1e-5f, q2.p,
                         s2.p, ld, nullptr);
  EXPECT_LT(rel_err(dx.get(), want), 1e-6);
  // The norm part: rmsnorm_quantize of the combined x gives the same codes and scales.
  cuda::rmsnorm_quantize(dx.p, as_dev_bf16(dg), T, H, 1e-5f, q1.p, s1.p, ld, nullptr, nullptr);
  EXPECT_EQ(q1.get(), q2.get());
  auto a = s1.get(), b = s2.get();
  for (int kb = 0; kb < KB; ++kb)
    for (int t = 0; t < T; ++t) ASSERT_EQ(a[size_t(kb) * ld + t], b[size_t(kb) * ld + t]) << "T " << T;
}

TEST_P(Fp8Tokens, MoeCombineNormMatchesCombineThenNorm) { MoeCombineCase(GetParam()); }

// Prompt chunks (more than 256 tokens) take the warp-per-token kernel: the same checks, its norm
// bit for bit the 1024-thread block's; 4 choices a token (compiled in) and 3 (from the argument).
TEST(CudaFp8, MoeCombineNormRowsMatchesCombineThenNorm) {
  for (int T : {257, 1000}) MoeCombineCase(T);
  MoeCombineCase(300, 3);
}

}  // namespace
}  // namespace osprey
