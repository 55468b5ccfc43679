// Probe: the experts' GEMMs of a long prompt chunk at gpt-oss's shapes (H = I = 2880; 20b: 32
// experts, 120b: 128), T tokens routed top-4 at random and sorted by expert (runs padded to 4 rows):
// - cuBLASLt per expert (the path before the grouped kernel: the segments on the host, one GEMM
//   per expert that has rows), fp32 out, then the SwiGLU kernel for the first GEMM;
// - variants of the grouped wgmma kernel (kernels/cuda/moe_gemm_fp8.cu, included here so that its
//   templates can be instantiated): column tile 128 or 256, ring stages, the register split, and
//   pairs of blocks (clusters of two) that share each row tile or each weight tile through TMA
//   multicast.
// - the production up GEMM then the SwiGLU kernel, against the up GEMM with the SwiGLU in its
//   epilogue (m_grouped_fp8_gemm_nt_contiguous_swiglu; the codes' checksums agree). Its history:
//   session 20's version (branch experiments/grouped-swiglu-epilogue) was 1.5x slower than the
//   two; session 23's (bias pairs and codes staged in shared memory) 1.02x slower (1,576.6 against
//   1,540.2 us at 32 experts); session 24's (codes by the reciprocal, no branch an output) 1.05x
//   faster (1,454.6 against 1,522.6 us; docs/device_logs/swiglu_s24_call*_probe_*.md).
// Prints microseconds a launch (median of 15 after 3 warm-ups) and TFLOP/s of the real rows
// (2 T k N K), and checksums of the fp32 outputs, which agree between all of them (the 1x128
// variant reads different scales and so differs).
//
// Build (from the repository root):
//   g++ -std=c++20 -O2 -Isrc -c src/core/error_plain.cpp -o build/error_plain.o
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/probes/grouped_fp8_gemm.cu src/kernels/cuda/gemm_fp8.cu src/kernels/cuda/moe_combine.cu \
//     src/kernels/cuda/quantize.cu build/error_plain.o -lcublasLt -lfmt -o build/probe_grouped_fp8_gemm
#include "kernels/cuda/moe_gemm_fp8.cu"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm_fp8.cuh"
#include "model/moe_timing_inputs.cuh"
#include "probe_timing.cuh"

using namespace osprey::cuda;
namespace moe_inputs = osprey::moe_inputs;

namespace probe {

using moe_inputs::mix;
// Uniform in [lo, hi) (16 bits).
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * float(mix(i, seed) & 0xFFFF) / 65536.0f;
}
using moe_inputs::fill_bf16;
using moe_inputs::fill_fp8_codes;
using osprey::probe::checksum;
template <class F>
float time_us(F&& f) {
  return osprey::probe::median_us(f, 15);
}

struct Shape {
  int T, E;
};

void run(const Shape& sh) {
  const int H = 2880, I = 2880, k = 4, E = sh.E, T = sh.T, KBh = (H + 127) / 128, KBi = (I + 127) / 128;
  std::mt19937 rng(7);
  std::vector<int> count(E, 0);
  for (int t = 0; t < T; ++t) {
    std::vector<int> e(E);
    for (int i = 0; i < E; ++i) e[i] = i;
    std::shuffle(e.begin(), e.end(), rng);
    for (int j = 0; j < k; ++j) ++count[e[j]];
  }
  std::vector<int32_t> seg = {0};
  for (int e = 0; e < E; ++e) seg.push_back(seg.back() + (count[e] + 3) / 4 * 4);
  const int P = seg[E], rows = P + 64;
  const size_t sper1 = size_t((2 * I + 511) / 512 * 4) * ((H + 511) / 512 * 4), sper2 = size_t((H + 511) / 512 * 4) * ((I + 511) / 512 * 4);
  DeviceArray<int32_t> dseg(seg.size());
  OSPREY_CUDA_CHECK(cudaMemcpy(dseg.ptr, seg.data(), seg.size() * 4, cudaMemcpyHostToDevice));
  DeviceArray<uint8_t> x(size_t(rows) * H), w1(size_t(E) * 2 * I * H), w2(size_t(E) * H * I), a(size_t(rows) * I),
      q(size_t(rows) * I);
  DeviceArray<float> xs(size_t(KBh) * rows), ws1(E * sper1), ws2(E * sper2), as(size_t(KBi) * rows),
      qs(size_t(KBi) * rows), t1(size_t(rows) * 2 * I), y(size_t(rows) * H);
  DeviceArray<bf16> b1(size_t(E) * 2 * I);
  fill_fp8_codes<<<1024, 256>>>(x.ptr, x.n, 1), fill_fp8_codes<<<1024, 256>>>(w1.ptr, w1.n, 2);
  fill_fp8_codes<<<1024, 256>>>(w2.ptr, w2.n, 3), fill_fp8_codes<<<1024, 256>>>(a.ptr, a.n, 4);
  fill_f32<<<1024, 256>>>(xs.ptr, xs.n, 5, 0.01f, 0.02f), fill_f32<<<1024, 256>>>(ws1.ptr, ws1.n, 6, 0.01f, 0.02f);
  fill_f32<<<1024, 256>>>(ws2.ptr, ws2.n, 7, 0.01f, 0.02f), fill_f32<<<1024, 256>>>(as.ptr, as.n, 8, 0.01f, 0.02f);
  fill_bf16<<<1024, 256>>>(b1.ptr, b1.n, 9);
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  const double f1 = 2.0 * T * k * 2 * I * H, f2 = 2.0 * T * k * H * I;
  std::printf("\n## T = %d, %d experts (%d sorted rows)\n\n| variant | up GEMM (us) | TFLOP/s | down GEMM (us) | TFLOP/s | checksum up | checksum down |\n|---|---:|---:|---:|---:|---|---|\n",
              T, E, P);
  auto row = [&](const char* name, float u1, float u2, uint64_t c1, uint64_t c2) {
    std::printf("| %s | %.1f | %.0f | %.1f | %.0f | %016llx | %016llx |\n", name, u1, f1 / u1 * 1e-6, u2, f2 / u2 * 1e-6,
                (unsigned long long)c1, (unsigned long long)c2);
  };
  // cuBLASLt per expert (+ the SwiGLU kernel after the first GEMM, timed with it).
  {
    BlockFp8Gemm lt(nullptr);
    auto up = [&] {
      for (int e = 0; e < E; ++e)
        if (seg[e + 1] > seg[e])
          lt.run(w1.ptr + size_t(e) * 2 * I * H, ws1.ptr + e * sper1, x.ptr + size_t(seg[e]) * H, xs.ptr + size_t(KBh) * seg[e],
                 t1.ptr + size_t(seg[e]) * 2 * I, seg[e + 1] - seg[e], 2 * I, H);
    };
    auto down = [&] {
      for (int e = 0; e < E; ++e)
        if (seg[e + 1] > seg[e])
          lt.run(w2.ptr + size_t(e) * H * I, ws2.ptr + e * sper2, a.ptr + size_t(seg[e]) * I, as.ptr + size_t(KBi) * seg[e],
                 y.ptr + size_t(seg[e]) * H, seg[e + 1] - seg[e], H, I);
    };
    const float u1 = time_us(up), u2 = time_us(down);
    const float s1 = time_us([&] {
      up();
      moe_swiglu_quantize(t1.ptr, b1.ptr, ActScales::by_expert(dseg.ptr, E), P, I, 1.702f, 7.0f, q.ptr, qs.ptr, nullptr);
    });
    row("cuBLASLt per expert", u1, u2, checksum(t1.ptr, size_t(P) * 2 * I), checksum(y.ptr, size_t(P) * H));
    std::printf("| cuBLASLt + SwiGLU kernel | %.1f | %.0f | | | %016llx | |\n", s1, f1 / s1 * 1e-6,
                (unsigned long long)checksum(q.ptr, size_t(P) * I));
  }
  GroupedFp8Gemm g1{.seg = dseg.ptr, .experts = E, .x = x.ptr, .xs = xs.ptr, .rows = rows, .w = w1.ptr, .ws = ws1.ptr,
                    .ws_per = sper1, .y = t1.ptr, .N = 2 * I, .K = H};
  GroupedFp8Gemm g2{.seg = dseg.ptr, .experts = E, .x = a.ptr, .xs = as.ptr, .rows = rows, .w = w2.ptr, .ws = ws2.ptr,
                    .ws_per = sper2, .y = y.ptr, .N = H, .K = I};
  auto plain = [&](const char* name, auto launcher, int bn) {
    const Args a1 = args_of(g1, bn), a2 = args_of(g2, bn);
    const float u1 = time_us([&] { launcher(g1, a1); }), u2 = time_us([&] { launcher(g2, a2); });
    row(name, u1, u2, checksum(t1.ptr, size_t(P) * 2 * I), checksum(y.ptr, size_t(P) * H));
  };
  plain("grouped, 128 cols, 6 stages, no register split", [](auto& g, auto& a) { launch<false, 1, 6, false>(g, a, nullptr); }, 128);
  plain("grouped, 128 cols, 6 stages", [](auto& g, auto& a) { launch<false, 1, 6>(g, a, nullptr); }, 128);
  plain("grouped, 128 cols, 4 stages", [](auto& g, auto& a) { launch<false, 1, 4>(g, a, nullptr); }, 128);
  plain("grouped, 256 cols, 4 stages (production)", [](auto& g, auto& a) { launch<false, 2, 4>(g, a, nullptr); }, 256);
  plain("grouped, 256 cols, 3 stages", [](auto& g, auto& a) { launch<false, 2, 3>(g, a, nullptr); }, 256);
  plain("pairs sharing rows, 256 cols, 4 stages", [](auto& g, auto& a) { launch<false, 2, 4, true, kShareRows>(g, a, nullptr); }, 256);
  plain("pairs sharing rows, 128 cols, 6 stages", [](auto& g, auto& a) { launch<false, 1, 6, true, kShareRows>(g, a, nullptr); }, 128);
  plain("pairs sharing weights, 256 cols, 4 stages", [](auto& g, auto& a) { launch<false, 2, 4, true, kShareWeights>(g, a, nullptr); }, 256);
  plain("grouped, 256 cols, 4 stages, 1x128 weight scales", [](auto& g, auto& a) { launch<true, 2, 4>(g, a, nullptr); }, 256);

  // The first GEMM's SwiGLU: the production GEMM then the SwiGLU kernel on its fp32 output, against
  // the SwiGLU in the GEMM's epilogue; the codes' checksums agree (bit-identical).
  {
    const ActScales by_expert = ActScales::by_expert(dseg.ptr, E);
    const Args a1 = args_of(g1, 256);
    const float k1 = time_us([&] {
      launch<false, 2, 4>(g1, a1, nullptr);
      moe_swiglu_quantize(t1.ptr, b1.ptr, by_expert, P, I, 1.702f, 7.0f, q.ptr, qs.ptr, nullptr);
    });
    const uint64_t c1 = checksum(q.ptr, size_t(P) * I);
    OSPREY_CUDA_CHECK(cudaMemset(q.ptr, 0, q.n));
    const float k2 = time_us([&] {
      m_grouped_fp8_gemm_nt_contiguous_swiglu(g1, {b1.ptr, 1.702f, 7.0f, q.ptr, qs.ptr, I}, nullptr);
    });
    const uint64_t c2 = checksum(q.ptr, size_t(P) * I);
    std::printf("| up GEMM (production) + SwiGLU kernel | %.1f | %.0f | | | %016llx | |\n", k1, f1 / k1 * 1e-6,
                (unsigned long long)c1);
    std::printf("| up GEMM with the SwiGLU epilogue | %.1f | %.0f | | | %016llx | |\n", k2, f1 / k2 * 1e-6,
                (unsigned long long)c2);
  }
}

}  // namespace probe

int main(int argc, char** argv) {
  using probe::Shape;
  std::vector<Shape> shapes = {{8192, 32}, {8192, 128}, {32768, 32}};
  if (argc == 3) shapes = {{std::atoi(argv[1]), std::atoi(argv[2])}};
  for (const Shape& s : shapes) probe::run(s);
  return 0;
}
