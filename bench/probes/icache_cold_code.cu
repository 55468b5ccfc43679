// Probe: what a kernel pays to fetch code it runs once. A batch-1 decode layer launches eight
// kernels whose code is mostly straight-line (unrolled) and runs once a launch: the decode
// attention's instantiation for decode rows is 80.8 KB of SASS, the route kernel's 64.4 KB, the
// combine's 16.4 KB, the rope's 14.3 KB (readelf of the sm_90a cubins, session 50; docs/PERF.md),
// 246 KB of distinct code a layer with the GEMMs'. If that is more than an SM's instruction caches
// hold, each launch finds its code in L2 only, and a warp that runs straight-line code waits for
// every new line.
//
// Each kernel here is N independent FFMAs (16 bytes each in SASS, eight chains: issue-bound, not
// latency-bound, when the code is cached), one block of 8 warps an SM. clock64 stamps its first and
// last instruction in every block; the probe prints the largest span, for each N:
//   warm: the kernel right after itself (its code cached where it fits);
//   cold: right after a flusher, a 256 KB kernel of other code;
// then the 32 KB kernel after flushers of 8 to 192 KB (where it stops being warm: the capacity).
// cold - warm, over the code's bytes, is what fetching costs: bytes a cycle an SM. If it is low,
// the batch-1 step's small kernels are held by their code, not their data, and the lever is code
// size (less unrolling where a kernel runs its body once), not bytes or kernel boundaries.
//
// Build (from the repository root):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/probes/icache_cold_code.cu \
//     -o build/probe_icache_cold_code
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

// N FFMAs over eight chains; SALT makes each instantiation distinct code with distinct constants.
template <int N, int SALT>
__global__ void __launch_bounds__(256) straight_kernel(float* out, long long* span) {
  __syncthreads();
  const long long t0 = clock64();
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = float(threadIdx.x + i);
  const float m = 1.0f + 1e-7f * float(SALT + 1), c = 1e-3f * float(SALT + 1);
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(a[i % 8]) : "f"(m), "f"(c));
  float s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += a[i];
  __syncthreads();
  const long long t1 = clock64();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) span[blockIdx.x] = t1 - t0;
}

constexpr int kFlushN = 16384;  // 256 KB of FFMAs
constexpr int kReps = 7;

struct Probe {
  int blocks;
  float* out;
  long long* span;
  std::vector<long long> host;
  long long largest() {
    CHECK(cudaDeviceSynchronize());
    host.resize(blocks);
    CHECK(cudaMemcpy(host.data(), span, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    return *std::max_element(host.begin(), host.end());
  }
};

template <int N, int SALT>
void launch(const Probe& p) {
  straight_kernel<N, SALT><<<p.blocks, 256>>>(p.out, p.span);
}
long long median(std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <int N>
void measure(Probe& p) {
  std::vector<long long> warm, cold;
  for (int rep = 0; rep < kReps; ++rep) {
    launch<N, 0>(p);
    launch<N, 0>(p);
    warm.push_back(p.largest());
    launch<kFlushN, 99>(p);
    launch<N, 0>(p);
    cold.push_back(p.largest());
  }
  const long long w = median(warm), c = median(cold);
  const double kb = N * 16.0 / 1024.0;
  std::printf("| %d | %.0f | %lld | %lld | %lld | %.2f |\n", N, kb, w, c, c - w,
              c > w ? N * 16.0 / double(c - w) : 0.0);
}

// The capacity: the 32 KB kernel right after a flusher of F FFMAs (other code), for growing F: the
// span stays warm while the flusher and the kernel fit the SM's instruction caches together.
template <int F>
void after_flusher(Probe& p) {
  std::vector<long long> spans;
  for (int rep = 0; rep < kReps; ++rep) {
    launch<2048, 0>(p);
    launch<F, 7>(p);
    launch<2048, 0>(p);
    spans.push_back(p.largest());
  }
  std::printf("| %.0f | %lld |\n", F * 16.0 / 1024.0, median(spans));
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  Probe p{prop.multiProcessorCount, nullptr, nullptr, {}};
  CHECK(cudaMalloc(&p.out, size_t(p.blocks) * 256 * sizeof(float)));
  CHECK(cudaMalloc(&p.span, size_t(p.blocks) * sizeof(long long)));
  std::printf("%s, %d SMs, %d MHz; one block of 8 warps an SM; cycles of the slowest block (median of 7)\n\n",
              prop.name, p.blocks, clock_khz / 1000);
  std::printf("| FFMAs | code KB | warm cycles | cold cycles | cold - warm | fetch B/cycle |\n|---:|---:|---:|---:|---:|---:|\n");
  measure<256>(p);
  measure<1024>(p);
  measure<2048>(p);
  measure<4096>(p);
  measure<8192>(p);
  measure<16384>(p);
  std::printf("\nThe 32 KB kernel (2048 FFMAs) right after a flusher of other code:\n\n");
  std::printf("| flusher KB | cycles |\n|---:|---:|\n");
  after_flusher<512>(p);
  after_flusher<1024>(p);
  after_flusher<2048>(p);
  after_flusher<4096>(p);
  after_flusher<6144>(p);
  after_flusher<8192>(p);
  after_flusher<12288>(p);
  CHECK(cudaFree(p.out));
  CHECK(cudaFree(p.span));
  return 0;
}
