// The FP8 model end to end on the GPU, at the prompt lengths that broke it: cuBLASLt's block-scaled
// GEMM takes a row count that is a multiple of 4, so a prefill of T rows computes round4(T); the
// all-positions logits buffer once held only T rows and `osprey logits --backend cuda` died with an
// illegal memory access at 33, 34, 65 and 83 tokens (2026-12-01, on trained checkpoints).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "cuda_test_util.h"
#include "engine/cuda_runner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "model/gpt_oss_cuda_fp8.h"
#include "model/gpt_oss_forward.h"
#include "model/gpt_oss_weights.h"
#include "synth/synth.h"
#include "../unit/test_util.h"

namespace osprey {
namespace {

// The trained osprey-mini's shape (hidden 256: cuBLASLt takes its GEMMs), two layers.
SynthPreset mini_shape() {
  SynthPreset p = synth_preset("tiny");
  p.name = "mini-shape";
  GptOssConfig& c = p.config;
  c.hidden = 256, c.num_heads = 4, c.num_kv_heads = 1, c.head_dim = 64, c.intermediate = 256;
  c.validate("mini-shape");
  return p;
}

// A mini-shape checkpoint of this seed with trained-like branch scales, written to dir and loaded.
GptOssWeights mini_weights(const test::TempDir& dir, uint64_t seed) {
  synth_checkpoint(mini_shape(), dir.str(), {.seed = seed, .progress = false, .branch_scale = 0.25f});
  return GptOssWeights::load(dir.str());
}

// mini-shape with two KV heads (q, k and v fuse into one weight) and 40 experts (the persistent
// kernel's routing scans over more than one warp of experts, a count that is no multiple of 32),
// written to dir and loaded.
GptOssWeights persistent_weights(const test::TempDir& dir, uint64_t seed) {
  SynthPreset p = mini_shape();
  p.name = "persistent-shape";
  p.config.num_kv_heads = 2;
  p.config.num_experts = 40;
  p.config.validate("persistent-shape");
  synth_checkpoint(p, dir.str(), {.seed = seed, .progress = false, .branch_scale = 0.25f});
  return GptOssWeights::load(dir.str());
}

// The relative L2 distance of a from b over their first n values.
double rel_diff(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / den);
}

TEST(CudaFp8Model, AllLogitsAtLengthsNotAMultipleOf4) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 5);
  const int V = w.config.vocab;
  GptOssCudaFp8 model(w, {.slots = 1, .max_context = 512, .graphs = false, .kv_blocks = 32});
  CudaSlots seqs(model);
  std::mt19937 rng(11);
  for (int T : {33, 34, 35, 65, 83, 130, 257}) {
    std::vector<int32_t> tokens(T);
    for (auto& t : tokens) t = int32_t(rng() % 200000);
    seqs.release(0);
    std::vector<float> all = seqs.prefill_logits(0, tokens, /*all=*/true);
    seqs.release(0);
    std::vector<float> last = seqs.prefill_logits(0, tokens, /*all=*/false);
    OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_EQ(all.size(), size_t(T) * V);
    ASSERT_EQ(last.size(), size_t(V));
    size_t nonfinite = 0;
    for (float v : all) nonfinite += !std::isfinite(v);
    EXPECT_EQ(nonfinite, 0u) << "T=" << T;
    // The same layers (cuBLASLt from 32 rows); the last row's unembedding differs only in its GEMM
    // (cuBLASLt over every row against the skinny kernel for one): ~1e-4.
    EXPECT_LT(rel_diff(all.data() + size_t(T - 1) * V, last.data(), size_t(V)), 1e-3) << "T=" << T;
  }
}

// The experts as the checkpoint ships them (--weights mxfp4, the default) against the CPU twin of
// that path (--precision mxfp4: the dense GEMMs as the fp8 emulation, the experts exact on BF16
// inputs), and the FP8 experts (--weights fp8) against the fp8 emulation, on parity-b (hidden 160:
// the experts' K is 1.25 blocks of 128; where the fp8 emulation's rounding is not amplified, so
// with the skinny kernel for the dense GEMMs both paths are the same sums in another order).
// A prefill and decode steps (the kernel tests show the tiled path sums as the decode path does).
TEST(CudaFp8Model, ExpertFormatsMatchTheirCpuEmulations) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-b"), dir.str(), {.seed = 7, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  const int V = w.config.vocab;
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(48);
  for (auto& t : tokens) t = int32_t(rng() % 777);
  for (auto [experts, prec] : {std::pair{GptOssCudaFp8::ExpertWeights::Mxfp4, CpuPrecision::Mxfp4},
                               std::pair{GptOssCudaFp8::ExpertWeights::Fp8, CpuPrecision::Fp8}}) {
    GptOssCudaFp8 m(w, {.slots = 1, .max_context = 512, .graphs = false, .kv_blocks = 32, .cublaslt = false,
                        .experts = experts});
    CudaSlots seqs(m);
    const std::vector<float> gpu = seqs.prefill_logits(0, tokens, /*all=*/true);
    GptOssCpuModel cpu(w, prec);
    KvCache c = cpu.new_cache();
    const std::vector<float> ref = cpu.forward(tokens, c, /*all_logits=*/true);
    ASSERT_EQ(gpu.size(), ref.size());
    const char* name = experts == GptOssCudaFp8::ExpertWeights::Mxfp4 ? "mxfp4" : "fp8";
    const double e = rel_diff(gpu.data(), ref.data(), ref.size());
    std::printf("%s experts: prefill of 48 tokens against the CPU emulation: rel. %.3e\n", name, e);
    // The FP8 experts' sums are the emulation's up to order (1e-7 measured). The MXFP4 experts' sums
    // come from the tensor cores in another order than the CPU's (1e-7 relative, the kernel tests);
    // the next layer's FP8 activation codes flip on such differences and the 48 positions drift to
    // 7e-3 (measured on the H200); decode steps from a short prompt stay within 2e-4.
    EXPECT_LT(e, experts == GptOssCudaFp8::ExpertWeights::Mxfp4 ? 2e-2 : 2e-4) << name << " prefill";
    // Decode steps from a 5-token prompt (a few rows an expert: the decode path).
    seqs.release(0);
    const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 5);
    seqs.prefill_logits(0, prompt, false);
    KvCache c2 = cpu.new_cache();
    cpu.forward(prompt, c2, false);
    for (int i = 0; i < 4; ++i) {
      const int32_t t = tokens[size_t(10 + i)];
      const std::vector<std::vector<float>> g = seqs.decode_logits(std::vector<int32_t>{0}, std::vector<int32_t>{t});
      const std::vector<float> r = cpu.forward(std::vector<int32_t>{t}, c2, false);
      EXPECT_LT(rel_diff(g[0].data(), r.data(), size_t(V)), 2e-4) << name << " decode step " << i;
    }
  }
}

// --kv-cache-dtype fp8 against its CPU emulation (keys and values through kv_fp8::round_row),
// on the mini shape (head_dim 64) with FP8 experts and the skinny kernel (the emulation's sums up
// to order): a prefill (flash attention over the FP8 cache) and decode steps (the decode kernel).
// This random model amplifies any change of a key or value: on the CPU, rounding the keys alone
// to the FP8 cache moves its logits by 6.4e-2, so one code that the GPU's and the CPU's sums round
// differently shows as a distance of that size (measured on the H200: 5.2e-2 against its
// emulation, 6.5e-2 against the BF16 cache's). What must hold: the GPU's FP8 cache is nearer its
// own emulation than to the BF16 cache's, and nearer than the two emulations are to each other.
// On the trained osprey-mini (tests/cuda/device_kv_fp8.sh COMPARE) the FP8 cache's GPU-CPU
// distance is 2.5e-2 against 2.2e-2 with the BF16 cache, the same argmax at every position.
TEST(CudaFp8Model, Fp8KvCacheMatchesItsCpuEmulation) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 8);
  const int V = w.config.vocab;
  std::mt19937 rng(4);
  std::vector<int32_t> tokens(150);
  for (auto& t : tokens) t = int32_t(rng() % 200000);
  GptOssCudaFp8 m(w, {.slots = 1, .max_context = 512, .graphs = false, .kv_blocks = 32, .cublaslt = false,
                      .experts = GptOssCudaFp8::ExpertWeights::Fp8, .kv = GptOssCudaFp8::KvCache::Fp8});
  CudaSlots seqs(m);
  const std::vector<float> gpu = seqs.prefill_logits(0, tokens, /*all=*/true);
  GptOssCpuModel cpu(w, CpuPrecision::Fp8, KvDtype::Fp8), cpu16(w, CpuPrecision::Fp8);
  KvCache c = cpu.new_cache(), c16 = cpu16.new_cache();
  const std::vector<float> ref = cpu.forward(tokens, c, /*all_logits=*/true);
  const std::vector<float> ref16 = cpu16.forward(tokens, c16, /*all_logits=*/true);
  ASSERT_EQ(gpu.size(), ref.size());
  const size_t n = ref.size();
  const double e = rel_diff(gpu.data(), ref.data(), n), e16 = rel_diff(gpu.data(), ref16.data(), n),
               emu = rel_diff(ref.data(), ref16.data(), n);
  std::printf("fp8 KV: prefill of 150 tokens against its emulation %.3e, against the bf16-KV emulation %.3e; the "
              "emulations apart %.3e\n", e, e16, emu);
  EXPECT_LT(e, e16);
  EXPECT_LT(e, emu);
  for (float x : gpu) ASSERT_TRUE(std::isfinite(x));
  // Decode steps from a 70-token prompt, each against both emulations continuing it.
  seqs.release(0);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 70);
  seqs.prefill_logits(0, prompt, false);
  KvCache c2 = cpu.new_cache(), c3 = cpu16.new_cache();
  cpu.forward(prompt, c2, false);
  cpu16.forward(prompt, c3, false);
  for (int i = 0; i < 4; ++i) {
    const int32_t t = tokens[size_t(100 + i)];
    const std::vector<std::vector<float>> g = seqs.decode_logits(std::vector<int32_t>{0}, std::vector<int32_t>{t});
    const std::vector<float> r = cpu.forward(std::vector<int32_t>{t}, c2, false);
    const std::vector<float> r16 = cpu16.forward(std::vector<int32_t>{t}, c3, false);
    const double d = rel_diff(g[0].data(), r.data(), size_t(V)), d16 = rel_diff(g[0].data(), r16.data(), size_t(V));
    std::printf("fp8 KV: decode step %d against its emulation %.3e, against the bf16-KV emulation %.3e\n", i, d, d16);
    EXPECT_LT(d, d16) << "decode step " << i;
  }
}

// --kv-cache-dtype fp16 against its CPU emulation (keys and values rounded to FP16, clipped), on
// the same mini shape and FP8 path as above: a prefill (flash attention, Q and P as FP16) and
// decode steps. The FP16 cache's GPU path must be nearer its emulation than the BF16 cache's GPU
// path is to its own (three more mantissa bits in K, V, Q and P), and nearer its emulation than to
// the BF16 cache's.
TEST(CudaFp8Model, Fp16KvCacheMatchesItsCpuEmulationCloserThanBf16) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 8);
  const int V = w.config.vocab;
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(150);
  for (auto& t : tokens) t = int32_t(rng() % 200000);
  auto gpu_model = [&](KvDtype kv) {
    return std::make_unique<GptOssCudaFp8>(
        w, GptOssCudaFp8::Options{.slots = 1, .max_context = 512, .graphs = false, .kv_blocks = 32, .cublaslt = false,
                                  .experts = GptOssCudaFp8::ExpertWeights::Fp8, .kv = kv});
  };
  auto m16 = gpu_model(KvDtype::Fp16), mb = gpu_model(KvDtype::Bf16);
  CudaSlots s16(*m16), sb(*mb);
  const std::vector<float> g16 = s16.prefill_logits(0, tokens, /*all=*/true), gb = sb.prefill_logits(0, tokens, true);
  GptOssCpuModel cpu16(w, CpuPrecision::Fp8, KvDtype::Fp16), cpub(w, CpuPrecision::Fp8);
  KvCache c16 = cpu16.new_cache(), cb = cpub.new_cache();
  const std::vector<float> r16 = cpu16.forward(tokens, c16, /*all_logits=*/true), rb = cpub.forward(tokens, cb, true);
  ASSERT_EQ(g16.size(), r16.size());
  const size_t n = r16.size();
  const double e16 = rel_diff(g16.data(), r16.data(), n), eb = rel_diff(gb.data(), rb.data(), n),
               cross = rel_diff(g16.data(), rb.data(), n);
  std::printf("fp16 KV: prefill of 150 tokens against its emulation %.3e (bf16 KV against its own %.3e, ratio %.2f); "
              "against the bf16-KV emulation %.3e\n", e16, eb, e16 / eb, cross);
  // Expected about 1/sqrt(8) (FP16's rounding is 8x finer; this random model turns differences into
  // FP8 activation-code flips): not yet measured, so a first failure may be this margin, not a bug.
  EXPECT_LT(e16, eb);
  EXPECT_LT(e16, cross);
  for (float x : g16) ASSERT_TRUE(std::isfinite(x));
  // Decode steps from a 70-token prompt.
  s16.release(0), sb.release(0);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 70);
  s16.prefill_logits(0, prompt, false), sb.prefill_logits(0, prompt, false);
  KvCache d16 = cpu16.new_cache(), db = cpub.new_cache();
  cpu16.forward(prompt, d16, false), cpub.forward(prompt, db, false);
  for (int i = 0; i < 4; ++i) {
    const std::vector<int32_t> t = {tokens[size_t(100 + i)]};
    const auto a = s16.decode_logits(std::vector<int32_t>{0}, t), b = sb.decode_logits(std::vector<int32_t>{0}, t);
    const auto ra = cpu16.forward(t, d16, false), rb2 = cpub.forward(t, db, false);
    const double da = rel_diff(a[0].data(), ra.data(), size_t(V)), dbb = rel_diff(b[0].data(), rb2.data(), size_t(V));
    std::printf("fp16 KV: decode step %d against its emulation %.3e (bf16 KV against its own %.3e)\n", i, da, dbb);
    // Both decode kernels take Q and P as hi + lo pairs: what remains is the cache rounding, which
    // each emulation follows, and sums in another order (no ordering between the two is promised).
    EXPECT_LT(da, std::max(2 * dbb, 1e-3)) << "decode step " << i;
  }
}

// What the FP8 cache does not run is refused at construction: head_dim other than 64, the
// persistent decode kernel; and the CPU emulates it only with the GPU paths' precisions.
TEST(CudaFp8Model, Fp8KvCacheRefusesWhatItCannotRun) {
  test::TempDir dir, dir2;
  synth_checkpoint(synth_preset("parity-b"), dir.str(), {.seed = 7, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  EXPECT_THROW(GptOssCudaFp8(w, {.slots = 1, .max_context = 128, .graphs = false, .kv_blocks = 8,
                                 .kv = GptOssCudaFp8::KvCache::Fp8}),
               std::exception);
  GptOssWeights p = persistent_weights(dir2, 3);
  EXPECT_THROW(GptOssCudaFp8(p, {.slots = 1, .max_context = 128, .graphs = false, .kv_blocks = 8,
                                 .kv = GptOssCudaFp8::KvCache::Fp8, .persistent_decode = true}),
               std::exception);
  EXPECT_THROW(GptOssCpuModel(w, CpuPrecision::Bf16, KvDtype::Fp8), std::exception);
  // The FP16 cache alike.
  EXPECT_THROW(GptOssCudaFp8(w, {.slots = 1, .max_context = 128, .graphs = false, .kv_blocks = 8,
                                 .kv = GptOssCudaFp8::KvCache::Fp16}),
               std::exception);
  EXPECT_THROW(GptOssCudaFp8(p, {.slots = 1, .max_context = 128, .graphs = false, .kv_blocks = 8,
                                 .kv = GptOssCudaFp8::KvCache::Fp16, .persistent_decode = true}),
               std::exception);
  EXPECT_THROW(GptOssCpuModel(w, CpuPrecision::Bf16, KvDtype::Fp16), std::exception);
  // The persistent kernel's phases are the MXFP4-expert, FP8-dense path's: other formats are
  // refused by name, not run kernel by kernel behind the caller's back.
  for (auto [experts, dense] : {std::pair{GptOssCudaFp8::ExpertWeights::Mxfp4, GptOssCudaFp8::DenseWeights::Bf16},
                                std::pair{GptOssCudaFp8::ExpertWeights::Fp8, GptOssCudaFp8::DenseWeights::Fp8}}) {
    try {
      GptOssCudaFp8(p, {.slots = 1, .max_context = 128, .graphs = false, .kv_blocks = 8, .experts = experts,
                        .dense = dense, .persistent_decode = true});
      ADD_FAILURE() << "the persistent kernel ran a format it has no phases for";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("the persistent decode kernel runs MXFP4 experts"), std::string::npos)
          << e.what();
    }
  }
}

// BF16 dense layers (--dense bf16) with MXFP4 experts: the arithmetic of the CPU's BF16 emulation
// (GEMM inputs rounded to BF16 where it rounds them; the experts exact), but for the GPU's BF16 KV
// cache, on the mini shape with trained-like branch scales (parity-b's random weights amplify that
// one difference to 1.4e-2 and flip argmaxes: measured on the H200), a prefill (cuBLAS) and decode
// steps in graphs (cuBLAS captured). Far closer to it than the FP8 dense layers are, and the same
// argmax at every position.
TEST(CudaFp8Model, DenseBf16MatchesTheBf16Emulation) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 8);
  const int V = w.config.vocab;
  std::mt19937 rng(4);
  std::vector<int32_t> tokens(48);
  for (auto& t : tokens) t = int32_t(rng() % 200000);
  GptOssCpuModel cpu(w, CpuPrecision::Bf16);
  KvCache c = cpu.new_cache();
  const std::vector<float> ref = cpu.forward(tokens, c, /*all_logits=*/true);
  double err[2];
  for (auto dense : {GptOssCudaFp8::DenseWeights::Bf16, GptOssCudaFp8::DenseWeights::Fp8}) {
    GptOssCudaFp8 m(w, {.slots = 1, .max_context = 512, .graphs = true, .kv_blocks = 32, .dense = dense});
    CudaSlots seqs(m);
    const std::vector<float> gpu = seqs.prefill_logits(0, tokens, /*all=*/true);
    ASSERT_EQ(gpu.size(), ref.size());
    const bool bf16 = dense == GptOssCudaFp8::DenseWeights::Bf16;
    err[bf16 ? 0 : 1] = rel_diff(gpu.data(), ref.data(), ref.size());
    std::printf("dense %s: prefill of 48 tokens against the BF16 emulation: rel. %.3e\n", bf16 ? "bf16" : "fp8",
                err[bf16 ? 0 : 1]);
    if (!bf16) continue;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const float* g = gpu.data() + p * V;
      const float* r = ref.data() + p * V;
      EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(r, r + V) - r) << "position " << p;
    }
    // Decode steps (graphs: cuBLAS inside the capture) against the emulation continuing the prompt.
    KvCache c2 = cpu.new_cache();
    cpu.forward(tokens, c2, false);
    for (int i = 0; i < 4; ++i) {
      const int32_t t = int32_t(rng() % 200000);
      const std::vector<std::vector<float>> g = seqs.decode_logits(std::vector<int32_t>{0}, std::vector<int32_t>{t});
      const std::vector<float> r = cpu.forward(std::vector<int32_t>{t}, c2, false);
      const double e = rel_diff(g[0].data(), r.data(), size_t(V));
      EXPECT_LT(e, 3.0 * err[0] + 1e-4) << "decode step " << i;
      EXPECT_EQ(std::max_element(g[0].begin(), g[0].end()) - g[0].begin(), std::max_element(r.begin(), r.end()) - r.begin());
    }
  }
  EXPECT_LT(err[0], 0.25 * err[1]);  // BF16 dense: a quarter of FP8's distance at most
  EXPECT_LT(err[0], 1e-2);
}

// A prompt chunk with MXFP4 experts above the decode paths' rows and below the long chunks (parity-b:
// 6 experts x top-3; 160 tokens give 80 rows an expert, the hint 160 > kMxfp4PromptRowsHint, and
// the long chunks start at 256 tokens) takes the wgmma path (rows gathered into the wgmma layout,
// the SwiGLU in the first GEMM's epilogue). Against the CPU emulation of the MXFP4 path, with the
// bound of the long-chunk test below: no further than twice the FP8 experts' path is from its own
// emulation at the same chunk (parity-b's random weights let the positions drift; a wrong row,
// layout or bias gives O(1)). The expert GEMMs are held to the tiled path's bits in
// MoeMxfp4.WgmmaPathEqualsTheTiledPath.
TEST(CudaFp8Model, Mxfp4PromptChunkOnWgmmaMatchesTheEmulation) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-b"), dir.str(), {.seed = 7, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(160);
  for (auto& t : tokens) t = int32_t(rng() % 777);
  double err[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const bool mx = i == 0;
    GptOssCudaFp8 m(w, {.slots = 1, .max_context = 512, .max_rows = 512, .graphs = false, .kv_blocks = 32,
                        .cublaslt = false, .experts = mx ? GptOssCudaFp8::ExpertWeights::Mxfp4 : GptOssCudaFp8::ExpertWeights::Fp8});
    CudaSlots seqs(m);
    const std::vector<float> gpu = seqs.prefill_logits(0, tokens, /*all=*/true);
    GptOssCpuModel cpu(w, mx ? CpuPrecision::Mxfp4 : CpuPrecision::Fp8);
    KvCache c = cpu.new_cache();
    const std::vector<float> ref = cpu.forward(tokens, c, /*all_logits=*/true);
    ASSERT_EQ(gpu.size(), ref.size());
    err[i] = rel_diff(gpu.data(), ref.data(), ref.size());
  }
  std::printf("160-token chunk against the CPU emulations: mxfp4 (wgmma experts) %.3e, fp8 %.3e\n", err[0], err[1]);
  EXPECT_LT(err[0], std::max(2e-2, 2 * err[1]));
}

// A long prompt chunk with MXFP4 experts takes cuBLAS(Lt) (lt_moe: from 128 rows an expert;
// parity-b's 6 experts x top-3 at 300 tokens give 150): with FP8 dense layers W4A8 (the experts
// converted to FP8 for cuBLASLt, their inputs FP8), with BF16 ones BF16 GEMMs on BF16-decoded
// weights; the dense layers take cuBLASLt. Each against its CPU emulation: Mxfp4 precision (which
// runs such a chunk's experts W4A8 too) and Bf16. parity-b's random weights amplify rounding:
// another order of sums flips FP8 activation codes and the 300 positions drift apart (measured:
// 6e-2 from the CPU emulation with cuBLAS on, 2e-2 with the MXFP4 kernels and the skinny dense
// GEMMs). So the bound is relative: no further from the CPU emulation than twice the FP8 experts'
// path through cuBLASLt is from its own emulation at the same chunk (a wrong bias, row, scale or
// layout gives O(1)). The expert GEMMs themselves are held to 2e-6 and 5e-6 in
// MoeMxfp4.W4a8ExpertsThroughCublasLtEqualCpuTwin and DecodedExpertsThroughCublasEqualCpuTwin.
TEST(CudaFp8Model, Mxfp4LongChunkThroughCublasMatchesTheEmulation) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-b"), dir.str(), {.seed = 7, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  std::mt19937 rng(4);
  std::vector<int32_t> tokens(300);
  for (auto& t : tokens) t = int32_t(rng() % 777);
  auto gpu = [&](GptOssCudaFp8::ExpertWeights experts, bool lt,
                 GptOssCudaFp8::DenseWeights dense = GptOssCudaFp8::DenseWeights::Fp8) {
    GptOssCudaFp8 m(w, {.slots = 1, .max_context = 512, .max_rows = 512, .graphs = false, .kv_blocks = 32,
                        .cublaslt = lt, .experts = experts, .dense = dense});
    CudaSlots seqs(m);
    return seqs.prefill_logits(0, tokens, /*all=*/true);
  };
  auto cpu = [&](CpuPrecision prec, bool w4a8 = true) {
    GptOssCpuModel model(w, prec, KvDtype::Bf16, w4a8);
    KvCache c = model.new_cache();
    return model.forward(tokens, c, /*all_logits=*/true);
  };
  const auto mx_lt = gpu(GptOssCudaFp8::ExpertWeights::Mxfp4, true), mx_kernels = gpu(GptOssCudaFp8::ExpertWeights::Mxfp4, false);
  const auto mx_lt16 = gpu(GptOssCudaFp8::ExpertWeights::Mxfp4, true, GptOssCudaFp8::DenseWeights::Bf16);
  const auto fp8_lt = gpu(GptOssCudaFp8::ExpertWeights::Fp8, true);
  const auto mx_ref = cpu(CpuPrecision::Mxfp4), mx_ref16 = cpu(CpuPrecision::Mxfp4, /*w4a8=*/false);
  const auto fp8_ref = cpu(CpuPrecision::Fp8), bf16_ref = cpu(CpuPrecision::Bf16);
  const size_t n = mx_ref.size();
  const double lt_kernels = rel_diff(mx_lt.data(), mx_kernels.data(), n), lt_cpu = rel_diff(mx_lt.data(), mx_ref.data(), n);
  const double lt16_cpu = rel_diff(mx_lt16.data(), bf16_ref.data(), n), fp8_cpu = rel_diff(fp8_lt.data(), fp8_ref.data(), n);
  std::printf("300-token chunk against the CPU emulations: mxfp4 W4A8 through cuBLASLt %.3e (against the emulation "
              "with BF16 expert inputs %.3e), mxfp4 kernels %.3e, mxfp4 with BF16 dense layers through cuBLAS %.3e, "
              "fp8 through cuBLASLt %.3e; mxfp4 W4A8 vs kernels %.3e\n",
              lt_cpu, rel_diff(mx_lt.data(), mx_ref16.data(), n), rel_diff(mx_kernels.data(), mx_ref16.data(), n),
              lt16_cpu, fp8_cpu, lt_kernels);
  EXPECT_GT(lt_kernels, 0.0) << "the cuBLASLt path did not run";
  EXPECT_LT(lt_cpu, std::max(2e-2, 2 * fp8_cpu));
  EXPECT_LT(lt16_cpu, std::max(2e-2, 2 * fp8_cpu));
}

// Masked decode (structured outputs on the GPU): the masks computed during the step, applied on
// the device, then argmax or a draw, equal the host path (the step's logits, the CPU twin of the
// mask, choose_token) at batch 1, 3 and 17, greedy and sampled rows, some rows without a mask.
TEST(CudaFp8Model, MaskedDecodeEqualsTheHostPath) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 6);
  const int V = w.config.vocab, words = (V + 31) / 32;
  for (int B : {1, 3, 17}) {
    GptOssCudaFp8 ma(w, {.slots = B, .max_context = 256, .kv_blocks = 8 * B}), mb(w, {.slots = B, .max_context = 256, .kv_blocks = 8 * B});
    CudaSlots a(ma), b(mb);
    std::mt19937 rng(static_cast<uint32_t>(B));
    std::vector<int32_t> slots(B), toks(B);
    for (int i = 0; i < B; ++i) {
      slots[i] = i;
      std::vector<int32_t> prompt(5 + i);
      for (auto& t : prompt) t = int32_t(rng() % 200000);
      a.prefill_logits(i, prompt, false);
      b.prefill_logits(i, prompt, false);
      toks[i] = int32_t(rng() % 200000);
    }
    std::vector<std::vector<uint32_t>> masks(B, std::vector<uint32_t>(words));
    std::vector<GptOssCudaFp8::RowSampling> rows(B);
    for (int i = 0; i < B; ++i) {
      for (auto& m : masks[i]) m = uint32_t(rng()) & uint32_t(rng()) & uint32_t(rng());
      if (i % 2) rows[i] = {.temperature = 0.9f, .top_p = 0.95f, .u = double(rng() % 1000) / 1000.0};
    }
    bool computed = false;
    const GptOssCudaFp8::Masks m{[&] { computed = true; },
                                 [&](size_t i) -> const uint32_t* { return i % 3 == 2 ? nullptr : masks[i].data(); }};
    std::vector<int32_t> got = a.decode_select(slots, toks, rows, &m);
    EXPECT_TRUE(computed);
    std::vector<std::vector<float>> lg = b.decode_logits(slots, toks);
    for (int i = 0; i < B; ++i) {
      if (i % 3 != 2) apply_token_mask(masks[i], lg[i]);
      TokenChoice c;
      c.params.temperature = rows[i].temperature, c.params.top_p = rows[i].top_p, c.u = rows[i].u;
      EXPECT_EQ(got[i], choose_token(lg[i], c)) << "B " << B << " row " << i;
      if (i % 3 != 2) {
        EXPECT_TRUE((masks[i][size_t(got[i]) / 32] >> (got[i] % 32)) & 1u) << "row " << i;
      }
    }
  }
}

// One forward over a ragged step (decode tokens of some slots and prompt chunks of others, in
// one set of GEMMs) equals the same work done apart (each prompt chunk alone, the decode tokens
// as a decode step). With the skinny kernel everywhere each row's GEMMs are exact fp32 sums, so
// only the decode attention's split count can differ: the logits agree to ~1e-6.
TEST(CudaFp8Model, RaggedStepEqualsTheSameWorkApart) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 7);
  const GptOssCudaFp8::Options o{.slots = 6, .max_context = 1024, .max_rows = 512, .graphs = true, .kv_blocks = 128,
                                 .cublaslt = false};
  GptOssCudaFp8 ma(w, o), mb(w, o);
  CudaSlots a(ma), b(mb);
  std::mt19937 rng(3);
  auto random = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = int32_t(rng() % 200000);
    return t;
  };
  // Slots 0-2 decode (their prompts of 70, 200 and 5 tokens, past the 128-key window for two);
  // slots 3-5 get prompt chunks of 150 (from 0), 90 (after 100 already there) and 1 token.
  const std::vector<int> pre = {70, 200, 5, 0, 100, 0};
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 6; ++s) {
    prompts.push_back(random(pre[s]));
    if (pre[s]) a.prefill_logits(s, prompts[s], false), b.prefill_logits(s, prompts[s], false);
  }
  const std::vector<int32_t> dec = random(3);
  const std::vector<int32_t> c3 = random(150), c4 = random(90), c5 = random(1);
  // a: one forward. The chunk list mixes the order; chunk 4 does not sample (more of it follows).
  std::vector<GptOssCudaFp8::Chunk> step;
  // CudaSlots places blocks for decode tokens only; prompt chunks are placed through prefill on
  // b, so the ragged step on a uses a's model directly after placing the same blocks by hand.
  std::vector<std::vector<float>> apart;
  apart.push_back(b.prefill_logits(3, c3, false));
  b.prefill_logits(4, c4, false);
  apart.push_back(b.prefill_logits(5, c5, false));
  const std::vector<int32_t> slots = {0, 1, 2};
  std::vector<std::vector<float>> dec_apart = b.decode_logits(slots, dec);
  std::vector<std::vector<float>> together = a.ragged_logits({{3, c3, true}, {0, {dec[0]}, true}, {4, c4, false},
                                                             {1, {dec[1]}, true}, {5, c5, true}, {2, {dec[2]}, true}});
  ASSERT_EQ(together.size(), 5u);
  // chunk order: slot 3, 0, 1, 5, 2 (slot 4 does not sample)
  const std::vector<const std::vector<float>*> want = {&apart[0], &dec_apart[0], &dec_apart[1], &apart[1], &dec_apart[2]};
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_LT(rel_diff(together[k].data(), want[k]->data(), want[k]->size()), 1e-5) << "sampling chunk " << k;
    EXPECT_EQ(std::max_element(together[k].begin(), together[k].end()) - together[k].begin(),
              std::max_element(want[k]->begin(), want[k]->end()) - want[k]->begin())
        << "sampling chunk " << k;
  }
  // The KV each wrote is the same: one more decode step of every slot agrees too.
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5}, nxt = random(6);
  std::vector<std::vector<float>> x = a.decode_logits(all, nxt), y = b.decode_logits(all, nxt);
  for (size_t k = 0; k < 6; ++k) EXPECT_LT(rel_diff(x[k].data(), y[k].data(), y[k].size()), 1e-5) << "slot " << k;
}

// The engine on the GPU: a prompt whose prefix is cached gives the logits of a cold prefill (the
// skinny kernel: exact, row-independent GEMMs), bit for bit, and greedy tokens equal to a cold
// engine's; the hits are counted; every request finishes under a small pool (preemptions).
TEST(CudaFp8Model, EnginePrefixCacheEqualsColdPrefill) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 8);
  const GptOssCudaFp8::Options o{.slots = 4, .max_context = 2048, .max_rows = 256, .graphs = true, .kv_blocks = 96,
                                 .cublaslt = false};
  GptOssCudaFp8 mw(w, o), mc(w, o);
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 256, .max_queue = 64, .max_seq_len = 2048};
  Engine warm(std::make_unique<CudaModelRunner>(mw), ec);
  EngineConfig cold_cfg = ec;
  cold_cfg.prefix_caching = false;
  Engine cold(std::make_unique<CudaModelRunner>(mc), cold_cfg);
  std::mt19937 rng(4);
  std::vector<int32_t> system(700);
  for (auto& t : system) t = int32_t(rng() % 200000);
  auto run = [](Engine& e, std::vector<int32_t> prompt, int logprobs) {
    GenerationRequest r{.prompt = std::move(prompt), .max_tokens = 12, .sampling = {.temperature = 0}, .logprobs = logprobs};
    auto h = e.submit(r);
    std::vector<int32_t> toks;
    std::vector<float> lps;
    TokenEvent ev;
    while (h->next(ev)) {
      if (ev.token >= 0) toks.push_back(ev.token);
      if (ev.logprobs) lps.push_back(float(ev.logprobs->logprob));
      EXPECT_NE(ev.finish, FinishReason::Error) << ev.error;
    }
    return std::make_pair(toks, lps);
  };
  for (int q = 0; q < 4; ++q) {
    std::vector<int32_t> p = system;
    for (int i = 0; i < 20 + 30 * q; ++i) p.push_back(int32_t(rng() % 200000));
    auto hot = run(warm, p, 0), ref = run(cold, p, 0);
    EXPECT_EQ(hot.first, ref.first) << "question " << q;
    EXPECT_EQ(hot.second, ref.second) << "question " << q;  // log probabilities: the logits, bit for bit
  }
  const EngineMetrics m = warm.metrics();
  EXPECT_GE(m.prefix.hits, uint64_t(3 * 640));  // questions 1-3 each reuse the system prompt's 10 blocks
  EXPECT_EQ(cold.metrics().prefix.hits, 0u);
}


// A speculative verify chunk (a slot's newest token and its drafts, run as decode rows in one
// step's graph) gives each position the logits that decoding the tokens one by one gives, within
// the decode attention's split-order rounding; the rolled-back slot then decodes as if the
// rejected drafts had never been there.
TEST(CudaFp8Model, VerifyChunkEqualsDecodingOneByOne) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 11);
  GptOssCudaFp8 m(w, {.slots = 4, .max_context = 1024, .max_rows = 256, .graphs = true, .kv_blocks = 128,
                      .max_draft = 8, .cublaslt = false});
  const int V = w.config.vocab;
  std::mt19937 rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % 200000);
    return t;
  };
  for (int k : {1, 3, 8}) {
    CudaSlots one(m);
    // Two sequences verify together (slots 0, 1), their references decode one token at a time (2, 3).
    std::vector<std::vector<int32_t>> prompt = {tokens(70 + k), tokens(190)}, ver = {tokens(k + 1), tokens(k + 1)};
    for (int i = 0; i < 2; ++i) one.prefill_logits(i, prompt[i], false), one.prefill_logits(2 + i, prompt[i], false);
    const std::vector<int32_t> vslots = {0, 1};
    const std::vector<std::vector<float>> got = one.verify_logits(vslots, ver);
    ASSERT_EQ(got.size(), size_t(2 * (k + 1)));
    std::vector<std::vector<float>> hidden;  // what a draft head would read, for every verify row
    for (size_t r = 0; r < got.size(); ++r) hidden.push_back(m.last_hidden(r));
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j <= k; ++j) {
        const int32_t slot = 2 + i;
        const std::vector<float> want = one.decode_logits(std::span(&slot, 1), std::span(&ver[i][j], 1))[0];
        const std::vector<float>& g = got[size_t(i * (k + 1) + j)];
        EXPECT_LT(rel_diff(g.data(), want.data(), size_t(V)), 2e-6) << "k " << k << " seq " << i << " pos " << j;
        const std::vector<float> h = m.last_hidden(0);
        EXPECT_LT(rel_diff(hidden[size_t(i * (k + 1) + j)].data(), h.data(), h.size()), 2e-6) << "hidden, k " << k;
        EXPECT_EQ(std::max_element(g.begin(), g.end()) - g.begin(), std::max_element(want.begin(), want.end()) - want.begin());
      }
    // Roll slot 0 back to its prompt plus the first token, then decode a different token there.
    one.truncate(0, int(prompt[0].size()) + 1);
    one.truncate(2, int(prompt[0].size()) + 1);
    const int32_t other = 12345, s0 = 0, s2 = 2;
    const auto a = one.decode_logits(std::span(&s0, 1), std::span(&other, 1))[0];
    const auto b = one.decode_logits(std::span(&s2, 1), std::span(&other, 1))[0];
    EXPECT_LT(rel_diff(a.data(), b.data(), size_t(V)), 2e-6) << "after rollback, k " << k;
  }
}

// The persistent decode kernel (Options::persistent_decode, for decode steps of up to 8 rows)
// against the same model kernel by kernel: the same bodies, roundings and order of fp32 sums (the
// per-op path's K-splits, norm sums and KV splits), so the logits are the same bits and greedy
// decoding gives the same tokens, at batch 1, 3 (a bucket of 4 with padding rows) and 8, with the
// window layers' ring wrapping (prompts past 128 positions). At one block an SM and at two (where
// the attention stages its tiles through shared memory); on the fused-QKV shape (two KV heads, 40
// experts) and on the trained osprey-mini's (one KV head: q, k and v three GEMMs, as kernel by
// kernel; 8 experts). The persistent kernel routes on every block (route_choices_block) and the
// per-op path on one (moe_sort_block): the same choices, and rows whose results do not depend on
// their order.
TEST(CudaFp8Model, PersistentDecodeEqualsKernelByKernel) {
  for (int kv_heads : {2, 1}) {
    SCOPED_TRACE("KV heads " + std::to_string(kv_heads));
    test::TempDir dir;
    GptOssWeights w = kv_heads == 2 ? persistent_weights(dir, 21) : mini_weights(dir, 21);
    ASSERT_EQ(w.config.num_kv_heads, kv_heads);
    const GptOssCudaFp8::Options o{.slots = 8, .max_context = 1024, .max_rows = 256, .graphs = true, .kv_blocks = 128,
                                   .cublaslt = false, .persistent_decode = true};
    GptOssCudaFp8::Options op = o;
    op.persistent_decode = false;
    GptOssCudaFp8 mk(w, op);
    ASSERT_FALSE(mk.persistent_decode(1));
    const int V = w.config.vocab;
    for (int blocks_per_sm : {1, 2}) {
      SCOPED_TRACE("blocks per SM " + std::to_string(blocks_per_sm));
      GptOssCudaFp8::Options ob = o;
      ob.persistent_blocks_per_sm = blocks_per_sm;
      GptOssCudaFp8 mp(w, ob);
      ASSERT_TRUE(mp.persistent_decode(1) && mp.persistent_decode(8) && !mp.persistent_decode(9));
      std::mt19937 rng(9);
      for (int B : {1, 3, 8}) {
        CudaSlots a(mp), b(mk);
        std::vector<int32_t> slots(B), toks(B);
        for (int i = 0; i < B; ++i) {
          slots[i] = i;
          std::vector<int32_t> prompt(40 + 37 * i);
          for (auto& t : prompt) t = int32_t(rng() % 200000);
          a.prefill_logits(i, prompt, false);
          b.prefill_logits(i, prompt, false);
          toks[i] = int32_t(rng() % 200000);
        }
        std::vector<std::vector<float>> la = a.decode_logits(slots, toks), lb = b.decode_logits(slots, toks);
        for (int i = 0; i < B; ++i) {
          const long first = std::mismatch(la[i].begin(), la[i].end(), lb[i].begin()).first - la[i].begin();
          EXPECT_EQ(first, V) << "B " << B << " row " << i << ": the logits differ first at index " << first
                              << " (relative L2 " << rel_diff(la[i].data(), lb[i].data(), size_t(V)) << ")";
        }
        std::vector<GptOssCudaFp8::RowSampling> greedy(B);
        std::vector<int32_t> ta = toks, tb = toks;
        for (int step = 0; step < 24; ++step) {
          ta = a.decode_select(slots, ta, greedy);
          tb = b.decode_select(slots, tb, greedy);
          ASSERT_EQ(ta, tb) << "B " << B << " step " << step;
        }
      }
    }
  }
}

// The persistent kernel's timeline: one record per (phase, block), each block's phase starting
// before its first wait returns and ending after it, and no block's wait in phase p returning
// before every block has finished its work of phase p - 1 (the counters' barrier), with the
// phases named.
TEST(CudaFp8Model, PersistentDecodeTimeline) {
  test::TempDir dir;
  GptOssWeights w = persistent_weights(dir, 22);
  GptOssCudaFp8 m(w, {.slots = 2, .max_context = 512, .max_rows = 128, .graphs = true, .kv_blocks = 32,
                      .persistent_decode = true});
  CudaSlots s(m);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5}, slots = {0};
  s.prefill_logits(0, prompt, false);
  const int32_t tok = 7;
  s.decode_select(slots, std::span(&tok, 1), std::vector<GptOssCudaFp8::RowSampling>(1));  // the graph
  m.record_timeline();
  s.decode_select(slots, std::span(&tok, 1), std::vector<GptOssCudaFp8::RowSampling>(1));
  const GptOssCudaFp8::Timeline& t = m.decode_timeline();
  const size_t P = t.phases.size(), G = size_t(t.grid);
  ASSERT_GT(G, 0u);
  // embed+norm, 8 phases a layer (qkv, rope, attention, o, route, experts up with the SwiGLU in its
  // epilogue, experts down, combine+norm), unembedding, argmax (2)
  ASSERT_EQ(P, size_t(1 + 8 * w.config.num_layers + 3));
  ASSERT_EQ(t.stamps.size(), P * G * 4);
  EXPECT_EQ(t.phases[1], "layer 0 qkv");
  EXPECT_EQ(t.phases.back(), "argmax final");
  auto at = [&](size_t p, size_t b, int f) { return t.stamps[(p * G + b) * 4 + size_t(f)]; };
  size_t worked = 0;
  for (size_t p = 0; p < P; ++p) {
    uint64_t prev_end = 0;  // the last block's end of phase p - 1 (stamped before its arrival)
    if (p > 0)
      for (size_t b = 0; b < G; ++b) prev_end = std::max(prev_end, at(p - 1, b, 3));
    for (size_t b = 0; b < G; ++b) {
      ASSERT_LE(at(p, b, 1), at(p, b, 3)) << "phase " << p;
      if (at(p, b, 2) == 0) continue;  // no work on this block
      ++worked;
      EXPECT_LE(at(p, b, 1), at(p, b, 2)) << "phase " << p;
      EXPECT_LE(at(p, b, 2), at(p, b, 3)) << "phase " << p;
      EXPECT_GE(at(p, b, 2), prev_end) << "phase " << p << " block " << b;
    }
  }
  EXPECT_GE(worked, P);  // every phase had work somewhere
}

// Proposes what a reference run produced, with every third draft token wrong: verification on the
// GPU must accept up to the first wrong one and still emit the reference tokens.
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(std::vector<std::vector<int32_t>> prompts, std::vector<std::vector<int32_t>> outputs, int vocab)
      : prompts_(std::move(prompts)), outputs_(std::move(outputs)), vocab_(vocab) {}
  std::string name() const override { return "scripted"; }
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> reqs) override {
    std::vector<std::vector<int32_t>> out(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
      for (size_t q = 0; q < prompts_.size(); ++q) {
        const auto& p = prompts_[q];
        if (reqs[i].tokens.size() < p.size() || !std::equal(p.begin(), p.end(), reqs[i].tokens.begin())) continue;
        const size_t g = reqs[i].tokens.size() - p.size();
        for (size_t j = g; j < outputs_[q].size() && int(out[i].size()) < reqs[i].k; ++j)
          out[i].push_back((++n_ % 3 == 0) ? (outputs_[q][j] + 1) % vocab_ : outputs_[q][j]);
        break;
      }
    return out;
  }

 private:
  std::vector<std::vector<int32_t>> prompts_, outputs_;
  int vocab_;
  uint64_t n_ = 0;
};

// The engine with speculation on the GPU: greedy tokens with scripted drafts (right and wrong),
// the n-gram proposer and a draft model (the target's own weights on a second GPU model: every
// greedy draft accepted) equal the tokens without it; seeded sampling gives every request the same
// tokens too.
TEST(CudaFp8Model, EngineSpeculativeEqualsPlain) {
  test::TempDir dir;
  GptOssWeights w = mini_weights(dir, 12);
  const GptOssCudaFp8::Options o{.slots = 4, .max_context = 1024, .max_rows = 256, .graphs = true, .kv_blocks = 160,
                                 .max_draft = 4, .cublaslt = false};
  std::mt19937 rng(6);
  std::vector<std::vector<int32_t>> prompts;
  for (int q = 0; q < 4; ++q) {
    std::vector<int32_t> p;
    for (int i = 0; i < (q == 3 ? 600 : 40 + 20 * q); ++i) p.push_back(int32_t(q % 2 ? i % 7 : rng() % 200000));
    prompts.push_back(p);
  }
  // The last request (600 tokens: three chunks of the 256-token budget) arrives once the first has
  // 5 tokens: its prompt chunks share steps with the others' verify chunks (the eager mixed step).
  auto run_all = [&](Engine& e, float temperature) {
    std::vector<std::shared_ptr<RequestHandle>> hs;
    std::vector<std::vector<int32_t>> out(prompts.size());
    auto drain = [&](size_t q, size_t upto) {
      TokenEvent ev;
      while (out[q].size() < upto && hs[q]->next(ev)) {
        if (ev.token >= 0) out[q].push_back(ev.token);
        EXPECT_NE(ev.finish, FinishReason::Error) << ev.error;
      }
    };
    for (size_t q = 0; q < prompts.size(); ++q) {
      if (q + 1 == prompts.size()) drain(0, 5);
      GenerationRequest r{.prompt = prompts[q], .max_tokens = 40, .sampling = {.temperature = temperature, .seed = 7 + q}};
      hs.push_back(e.submit(r));
    }
    for (size_t q = 0; q < prompts.size(); ++q) drain(q, SIZE_MAX);
    return out;
  };
  GptOssCudaFp8 plain_m(w, o);
  EngineConfig ec{.max_batch = 4, .max_batched_tokens = 256, .max_queue = 64, .max_seq_len = 1024};
  Engine plain(std::make_unique<CudaModelRunner>(plain_m), ec);
  const auto greedy = run_all(plain, 0.0f), sampled = run_all(plain, 0.8f);
  GptOssCudaFp8 draft_m(w, {.slots = 4, .max_context = 1024, .max_rows = 256, .graphs = true, .kv_blocks = 160, .cublaslt = false});
  KvLayout L = kv_layout_of(w.config);
  L.block_size = GptOssCudaFp8::kBlockPositions, L.num_blocks = draft_m.kv_blocks(), L.storage = false;
  for (const char* name : {"scripted", "ngram", "draft"}) {
    for (float temperature : {0.0f, 0.8f}) {
      const auto& want = temperature > 0 ? sampled : greedy;
      std::shared_ptr<Proposer> p;
      if (std::string(name) == "scripted") p = std::make_shared<ScriptedProposer>(prompts, want, w.config.vocab);
      else if (std::string(name) == "ngram") p = std::make_shared<NgramProposer>(1, 3, 4096);
      else p = std::make_shared<DraftModelProposer>(std::make_unique<CudaModelRunner>(draft_m), L, 256);
      GptOssCudaFp8 m(w, o);
      EngineConfig sc = ec;
      sc.proposer = p, sc.spec_k = 4, sc.spec_adaptive = false;
      Engine spec(std::make_unique<CudaModelRunner>(m), sc);
      EXPECT_EQ(run_all(spec, temperature), want) << name << " at temperature " << temperature;
      const EngineMetrics mt = spec.metrics();
      if (std::string(name) == "ngram") continue;  // random weights rarely repeat: drafts may not come
      EXPECT_GT(mt.spec_accepted_tokens, 0u) << name << " at temperature " << temperature;
      if (std::string(name) == "draft" && temperature == 0.0f) {
        // The target's own weights, but its catch-up chunks run as prompt chunks (flash attention,
        // BF16 queries) where the target decodes: near-ties go either way on random weights (seen:
        // 118 of 141 accepted).
        EXPECT_GT(mt.spec_accepted_tokens * 4, mt.spec_draft_tokens * 3);
      } else {
        EXPECT_LT(mt.spec_accepted_tokens, mt.spec_draft_tokens) << name << " at temperature " << temperature;
      }
      if (std::string(name) == "scripted") {
        EXPECT_GT(mt.spec_accepted_tokens * 4, mt.spec_draft_tokens);
      }
    }
  }
}

}  // namespace
}  // namespace osprey
