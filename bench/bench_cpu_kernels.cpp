// CPU kernel benchmarks: bytes of weights streamed per second for the decode (T=1) and small-batch
// matmuls at gpt-oss shapes. Weight buffers rotate so that repeated runs do not hit the caches.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "formats/mxfp4.h"
#include "kernels/cpu/ops.h"

using namespace osprey;

namespace {

const int kCopies = std::getenv("OSPREY_BENCH_HOT") ? 1 : 8;  // 8 x the weight set: far beyond the last-level cache

void BM_bf16w_matmul(benchmark::State& st) {
  const int T = int(st.range(0)), N = int(st.range(1)), K = int(st.range(2));
  std::vector<bf16> W(size_t(kCopies) * N * K);
  std::mt19937 rng(1);
  for (auto& w : W) w = f32_to_bf16(float(int(rng() % 2001) - 1000) * 1e-3f);
  std::vector<float> x(size_t(T) * K, 0.5f), y(size_t(T) * N);
  int c = 0;
  for (auto _ : st) {
    cpu::f32_bf16w_matmul(x.data(), W.data() + size_t(c) * N * K, nullptr, y.data(), T, N, K);
    c = (c + 1) % kCopies;
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * N * K * 2);
}

void BM_mxfp4w_matmul(benchmark::State& st) {
  const int T = int(st.range(0)), N = int(st.range(1)), K = int(st.range(2));
  std::vector<uint8_t> blocks(size_t(kCopies) * N * K / 2), scales(size_t(kCopies) * N * K / 32);
  std::mt19937 rng(2);
  for (auto& b : blocks) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(118 + rng() % 4);
  std::vector<float> x(size_t(T) * K, 0.5f), y(size_t(T) * N);
  int c = 0;
  for (auto _ : st) {
    cpu::f32_mxfp4w_matmul(x.data(), blocks.data() + size_t(c) * N * K / 2, scales.data() + size_t(c) * N * K / 32,
                           nullptr, y.data(), T, N, K);
    c = (c + 1) % kCopies;
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * (int64_t(N) * K / 2 + int64_t(N) * K / 32));
}

// The load's re-layout of MXFP4 experts into the GPU decode kernels' tiles (mxfp4_relayout_experts,
// OpenMP over experts): arg 0 experts of mlp1's shape [5760 x 2880], bytes of checkpoint codes.
void BM_mxfp4_relayout(benchmark::State& st) {
  const int E = int(st.range(0)), N = 5760, K = 2880;
  std::vector<uint8_t> blocks(size_t(E) * N * K / 2), scales(size_t(E) * N * K / 32), tiles(mxfp4_tiles_bytes(N, K) * E);
  std::mt19937 rng(3);
  for (auto& b : blocks) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(118 + rng() % 4);
  for (auto _ : st) {
    mxfp4_relayout_experts(blocks.data(), scales.data(), E, N, K, tiles.data());
    benchmark::DoNotOptimize(tiles.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(blocks.size()));
}

}  // namespace

// q_proj [4096 x 2880], o_proj [2880 x 4096], mlp1 [5760 x 2880], mlp2 [2880 x 2880]
BENCHMARK(BM_bf16w_matmul)->Args({1, 128, 2880})->Args({1, 4096, 2880})->Args({1, 2880, 4096})->Args({4, 4096, 2880})->UseRealTime();
BENCHMARK(BM_mxfp4w_matmul)->Args({1, 256, 2880})->Args({1, 5760, 2880})->Args({1, 2880, 2880})->Args({4, 5760, 2880})->UseRealTime();
BENCHMARK(BM_mxfp4_relayout)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);
// Sampler::sample_from on one row of the full vocabulary (normal logits, std 3): arg 0 selects
// temperature 1 alone, temperature 0.8 with top-p 0.9, or temperature 1 with top-k 50.
static void BM_sample_from(benchmark::State& state) {
  const osprey::SamplingParams params[] = {{.temperature = 1.0f}, {.temperature = 0.8f, .top_p = 0.9f},
                                           {.temperature = 1.0f, .top_k = 50}};
  const osprey::SamplingParams& p = params[state.range(0)];
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(201088);
  for (float& x : logits) x = nd(rng);
  double u = 0.1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(osprey::Sampler::sample_from(logits, p, u));
    u = u < 0.9 ? u + 0.1 : 0.05;
  }
}
BENCHMARK(BM_sample_from)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
