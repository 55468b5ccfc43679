// Every CUDA kernel against its CPU twin at awkward sizes (1, 3, 129 tokens; 2880 columns, the
// 22.5-block width). Runs on the GPU machine only (tests/cuda/device_check.sh); CI builds it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/ops.cuh"
#include "cuda_test_util.h"

namespace osprey {
namespace {

class Tokens : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Awkward, Tokens, ::testing::Values(1, 3, 129));

TEST_P(Tokens, RmsNormToF32) {
  const int T = GetParam(), H = 2880;
  auto x = randf(size_t(T) * H, 1, 3.0f);
  auto g = randbf(H, 2);
  std::vector<float> ref(x.size());
  cpu::f32_bf16w_rmsnorm(x.data(), g.data(), ref.data(), T, H, 1e-5f);
  Dev<float> dx(x), dy(x.size());
  Dev<bf16> dg(g);
  cuda::rmsnorm_to_f32(dx.p, as_dev_bf16(dg), dy.p, T, H, 1e-5f, nullptr);
  EXPECT_LT(rel_err(dy.get(), ref), 1e-6);
}

TEST_P(Tokens, Rope) {
  const int T = GetParam(), heads = 8, d = 64;
  auto x = randf(size_t(T) * heads * d, 3);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = 1000 + 37 * t;
  auto table = cpu::make_rope_table({.head_dim = 64, .theta = 150000, .factor = 32, .beta_fast = 32, .beta_slow = 1,
                                     .original_max_pos = 4096, .yarn = true, .truncate = false});
  auto ref = x;
  cpu::f32_rope(ref.data(), pos.data(), table, T, heads);
  Dev<float> dx(x), df(table.inv_freq);
  Dev<int32_t> dp(pos);
  cuda::rope(dx.p, dp.p, df.p, table.concentration, T, heads, d, nullptr);
  EXPECT_LT(rel_err(dx.get(), ref), 1e-5);
}

TEST_P(Tokens, SinkAttentionFullAndWindow) {
  const int T = GetParam(), heads = 64, kvh = 8, d = 64, first = 200;
  const int len = first + T;
  auto q = randf(size_t(T) * heads * d, 4, 2.0f);
  auto k = randf(size_t(len) * kvh * d, 5, 2.0f), v = randf(size_t(len) * kvh * d, 6);
  auto sinks = randbf(heads, 7, 2.0f);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = first + t;
  HostKv kv(k, v, kvh, d);
  for (int window : {0, 128}) {
    std::vector<float> ref(q.size());
    cpu::f32_bf16sink_attention(q.data(), pos.data(), kv, sinks.data(), ref.data(), T,
                                {.num_heads = heads, .num_kv_heads = kvh, .head_dim = d, .window = window, .scale = 0.125f});
    Dev<float> dq(q), dk(k), dv(v), dout(q.size());
    Dev<bf16> ds(sinks);
    cuda::sink_attention(dq.p, dk.p, dv.p, as_dev_bf16(ds), dout.p, T, first, heads, kvh, d, window, 0.125f, nullptr);
    EXPECT_LT(rel_err(dout.get(), ref), 1e-5) << "window " << window;
  }
}

TEST_P(Tokens, TopkSoftmax) {
  const int T = GetParam();
  for (int E : {32, 128}) {
    auto l = randf(size_t(T) * E, 8 + E, 3.0f);
    std::vector<int32_t> idx(size_t(T) * 4);
    std::vector<float> w(size_t(T) * 4);
    cpu::f32_topk_softmax(l.data(), idx.data(), w.data(), T, E, 4);
    Dev<float> dl(l), dw(w.size());
    Dev<int32_t> di(idx.size());
    cuda::topk_softmax(dl.p, di.p, dw.p, T, E, 4, nullptr);
    EXPECT_EQ(di.get(), idx);
    EXPECT_LT(rel_err(dw.get(), w), 1e-5);
  }
}

TEST_P(Tokens, SwigluToF32) {
  const int T = GetParam(), I = 2880;
  auto t = randf(size_t(T) * 2 * I, 9, 10.0f);  // beyond the +-7 clamps
  std::vector<float> ref(size_t(T) * I);
  cpu::f32_swiglu_clamped(t.data(), ref.data(), T, I, 1.702f, 7.0f);
  Dev<float> dt(t), da(ref.size());
  cuda::swiglu_to_f32(dt.p, da.p, T, I, 1.702f, 7.0f, nullptr);
  EXPECT_LT(rel_err(da.get(), ref), 1e-6);
}

TEST_P(Tokens, GemmBf16WithBias) {
  const int T = GetParam(), N = 2880, K = 4096;  // o_proj: N = 2880 (22.5 blocks of 128)
  auto W = randbf(size_t(N) * K, 10, 0.02f);
  auto bias = randbf(N, 11);
  auto x = randbf(size_t(T) * K, 12);  // the GEMM takes bf16 activations
  std::vector<float> xf(x.size()), ref(size_t(T) * N);
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_f32(x[i]);
  cpu::f32_bf16w_matmul(xf.data(), W.data(), bias.data(), ref.data(), T, N, K);
  Dev<bf16> dW(W), db(bias), dx(x);
  Dev<float> dy(ref.size());
  cuda::Blas blas(nullptr);
  blas.gemm_bf16(as_dev_bf16(dW), as_dev_bf16(dx), dy.p, T, N, K);
  cuda::add_bias(dy.p, as_dev_bf16(db), T, N, nullptr);
  EXPECT_LT(rel_err(dy.get(), ref), 1e-5);
}

TEST(CudaKernels, GemvBf16) {
  for (auto [N, K] : {std::pair{4096, 2880}, std::pair{7, 96}, std::pair{201088, 64}}) {
    auto W = randbf(size_t(N) * K, 13, 0.05f);
    auto bias = randbf(N, 14);
    auto x = randf(K, 15);
    std::vector<float> ref(N);
    cpu::f32_bf16w_matmul(x.data(), W.data(), bias.data(), ref.data(), 1, N, K);
    Dev<bf16> dW(W), db(bias);
    Dev<float> dx(x), dy(N);
    cuda::gemv_bf16(as_dev_bf16(dW), dx.p, as_dev_bf16(db), dy.p, N, K, /*accumulate=*/false, nullptr);
    EXPECT_LT(rel_err(dy.get(), ref), 1e-5) << N << "x" << K;
  }
}

TEST(CudaKernels, GemvMxfp4ExpertsPickedOnTheDevice) {
  const int E = 8, N = 5760, K = 2880, k = 4;
  const auto [blocks, scales] = random_mxfp4(size_t(E) * N * K, 16, 118, 5);
  auto bias = randbf(size_t(E) * N, 17);
  std::vector<int32_t> idx = {6, 1, 3, 0};
  auto x = randf(size_t(k) * K, 18);  // a distinct input per selected expert (as for mlp2)
  std::vector<float> ref(size_t(k) * N);
  for (int j = 0; j < k; ++j) {
    const int e = idx[j];
    cpu::f32_mxfp4w_matmul(&x[size_t(j) * K], &blocks[size_t(e) * N * K / 2], &scales[size_t(e) * N * K / 32],
                           &bias[size_t(e) * N], &ref[size_t(j) * N], 1, N, K);
  }
  Dev<uint8_t> db(blocks), ds(scales);
  Dev<bf16> dbias(bias);
  Dev<int32_t> di(idx);
  Dev<float> dx(x), dy(ref.size());
  cuda::gemv_mxfp4_experts(db.p, ds.p, as_dev_bf16(dbias), di.p, k, dx.p, size_t(K), dy.p, N, K, nullptr);
  EXPECT_LT(rel_err(dy.get(), ref), 1e-5);
}

TEST(CudaKernels, Mxfp4ToBf16IsExact) {
  const int N = 33, K = 2880;
  const auto [blocks, scales] = random_mxfp4(size_t(N) * K, 19, 110, 20);
  std::vector<float> ref(size_t(N) * K);
  for (int r = 0; r < N; ++r) mxfp4_decode_row(&blocks[size_t(r) * K / 2], &scales[size_t(r) * K / 32], K, &ref[size_t(r) * K]);
  Dev<uint8_t> db(blocks), ds(scales);
  Dev<bf16> out(ref.size());
  cuda::mxfp4_to_bf16(db.p, ds.p, as_dev_bf16(out), N, K, nullptr);
  auto got = out.get();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(bf16_to_f32(got[i]), ref[i]) << i;
}

TEST(CudaKernels, ArgmaxLowestIndexOnTies) {
  std::vector<float> l = randf(201088, 20);
  l[777] = 50.0f;
  l[90000] = 50.0f;
  Dev<float> dl(l);
  Dev<int32_t> out(1);
  cuda::argmax_rows(dl.p, out.p, 1, 201088, nullptr);
  EXPECT_EQ(out.get()[0], 777);
}

}  // namespace
}  // namespace osprey
