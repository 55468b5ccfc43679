// Probe: how fast can the W4A8 conversion of a layer's MXFP4 experts to FP8 go, and what holds the
// production kernel (cuda::mxfp4_experts_to_fp8) at about 3.1 TB/s of the 4.24 TB/s copy ceiling?
// Each variant converts the same tiles (the 120b's and the 20b's up and down matrices, 128-row
// weight blocks, every expert) and prints microseconds a launch (median of 20 after 3 warm-ups),
// TB/s of the tile bytes read plus the codes written, and checksums of the codes and scales, which
// must equal the production kernel's for every converting variant:
// - production: the kernel the model runs (256 threads, 2 x 4 tiles a block, one pass of blocks);
// - persistent<I, H>: the same unit code in a grid of (SMs x blocks an SM) blocks that loop over
//   the chunks, I items a thread in flight, H: streaming cache hints (ld.global.cs, st.global.cs);
// - linear<I, H>: items in the codes' own order (thread item i is group i % G of row i / G, so a
//   warp stores 1 KB of consecutive output), I items a thread;
// - copy<H>: the production indexing with no lookup (codes = the raw words): the access pattern's
//   own ceiling (its checksum differs on purpose);
// - memcpy: cudaMemcpyAsync of the same bytes written (reads as many: the device's copy rate).
//
// Build (from the repository root; fmt needs the host compiler for error_plain.cpp):
//   g++ -std=c++20 -O2 -Isrc -c src/core/error_plain.cpp -o build/error_plain.o
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/probes/w4a8_conversion.cu src/kernels/cuda/moe_gemm_mxfp4.cu build/error_plain.o -lfmt \
//     -o build/probe_w4a8_conversion
#include <cstdio>
#include <string>

#include "formats/mxfp4.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "model/moe_timing_inputs.cuh"
#include "probe_timing.cuh"

using namespace osprey;
using namespace osprey::cuda;
using osprey::probe::checksum;
using osprey::probe::median_us;

namespace {

constexpr int kThreads = 256, kTilesPerItem = kThreads / 64;
constexpr int kDist = kMxfp4Fp8ZeroSpan + 2;

__device__ inline float e2m1_mag(int m) {
  return m < 4 ? 0.5f * float(m) : float(1 << (m / 2 - 1)) * (1.0f + 0.5f * float(m % 2));
}

template <bool kHints>
__device__ inline uint4 load16(const uint8_t* p) {
  if constexpr (kHints) return __ldcs(reinterpret_cast<const uint4*>(p));
  else return *reinterpret_cast<const uint4*>(p);
}
template <bool kHints>
__device__ inline void store16(uint8_t* p, uint4 v) {
  if constexpr (kHints) __stcs(reinterpret_cast<uint4*>(p), v);
  else *reinterpret_cast<uint4*>(p) = v;
}

// One thread's share of kItems x 4 tiles starting at item `first` (the production kernel's unit:
// group g of row r of each tile). kCopy: no lookup (the access pattern alone).
template <int kItems, bool kHints, bool kCopy>
__device__ inline void convert_items(const Mxfp4ExpertsView& W, const Mxfp4AsFp8& out, const uint8_t (*mag)[8],
                                     int first, int tiles, int KB, int G, int N16, int NB) {
  const int g = threadIdx.x % 4, r = threadIdx.x / 4 % kMxfp4TileRows;
  int e[kItems], n[kItems], kb[kItems], groups[kItems], smax[kItems];
  bool live[kItems];
  uint32_t s4[kItems];
  uint4 raw[kItems];
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    const int tile = (first + u) * kTilesPerItem + int(threadIdx.x) / 64;
    const int row16 = tile / KB;
    kb[u] = tile - row16 * KB, e[u] = row16 / N16, n[u] = (row16 - e[u] * N16) * kMxfp4TileRows + r;
    groups[u] = min(4, G - 4 * kb[u]);
    live[u] = tile < tiles && g < groups[u];
    if (!live[u]) continue;
    const uint8_t* t = W.tiles + size_t(tile) * kMxfp4TileBytes;
    s4[u] = *reinterpret_cast<const uint32_t*>(t + 1024 + 4 * r);
    raw[u] = load16<kHints>(t + r * 64 + g * 16);
    smax[u] = out.smax[(size_t(e[u]) * NB + n[u] / out.block_rows) * KB + kb[u]];
  }
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    if (!live[u]) continue;
    if (g == 0 && n[u] % out.block_rows == 0)
      out.scales[size_t(e[u]) * out.scales_per_expert + mxfp4_fp8_scale_index(W.N, W.K, out.block_rows, n[u], kb[u])] =
          ldexpf(1.0f, smax[u] - 127 - kMxfp4Fp8Shift);
    const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t codes[8];
    if constexpr (kCopy) {
#pragma unroll
      for (int w = 0; w < 4; ++w) codes[2 * w] = words[w], codes[2 * w + 1] = words[w] ^ s4[u];
    } else {
      const int d = min(max(smax[u] - int((s4[u] >> (8 * g)) & 0xFF), 0), kMxfp4Fp8ZeroSpan + 1);
      const uint2 m = *reinterpret_cast<const uint2*>(mag[d]);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        codes[2 * w] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<0>(words[w])) | mxfp4_packed_signs<0>(words[w]);
        codes[2 * w + 1] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<1>(words[w])) | mxfp4_packed_signs<1>(words[w]);
      }
    }
    uint8_t* dst = out.codes + (size_t(e[u]) * W.N + n[u]) * W.K + size_t(kb[u]) * 128 + 32 * g;
    store16<kHints>(dst, make_uint4(codes[0], codes[1], codes[2], codes[3]));
    store16<kHints>(dst + 16, make_uint4(codes[4], codes[5], codes[6], codes[7]));
  }
}

__device__ inline void fill_mag(uint8_t (*mag)[8]) {
  for (int i = threadIdx.x; i < kDist * 8; i += blockDim.x) {
    const int d = i / 8, m = i % 8;
    mag[d][m] = d > kMxfp4Fp8ZeroSpan ? uint8_t(0) : e4m3_code(ldexpf(e2m1_mag(m), kMxfp4Fp8Shift - d));
  }
}

// The linear mapping: thread item i is (row eg = e N + n, group grp) with i = eg G + grp, so a
// warp's stores are 1 KB of consecutive output (the codes [E][N][K] are one array, K = 32 G) and
// its loads 64-byte runs of the tiles' rows.
template <int kItems, bool kHints, bool kCopy>
__device__ inline void convert_linear(const Mxfp4ExpertsView& W, const Mxfp4AsFp8& out, const uint8_t (*mag)[8],
                                      size_t first, size_t items, int KB, int G, int NB) {
  int grp[kItems], smax[kItems];
  size_t eg[kItems];
  bool live[kItems];
  uint32_t s4[kItems];
  uint4 raw[kItems];
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    const size_t i = first + size_t(u) * kThreads + threadIdx.x;
    live[u] = i < items;
    if (!live[u]) continue;
    eg[u] = i / G, grp[u] = int(i - eg[u] * G);
    const int kb = grp[u] / 4, g = grp[u] % 4, r = int(eg[u] % kMxfp4TileRows);
    const uint8_t* t = W.tiles + ((eg[u] / kMxfp4TileRows) * KB + kb) * kMxfp4TileBytes;
    s4[u] = *reinterpret_cast<const uint32_t*>(t + 1024 + 4 * r);
    raw[u] = load16<kHints>(t + r * 64 + g * 16);
    const int e = int(eg[u] / W.N), n = int(eg[u] - size_t(e) * W.N);
    smax[u] = out.smax[(size_t(e) * NB + n / out.block_rows) * KB + kb];
  }
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    if (!live[u]) continue;
    const int kb = grp[u] / 4, g = grp[u] % 4;
    const int e = int(eg[u] / W.N), n = int(eg[u] - size_t(e) * W.N);
    if (g == 0 && n % out.block_rows == 0)
      out.scales[size_t(e) * out.scales_per_expert + mxfp4_fp8_scale_index(W.N, W.K, out.block_rows, n, kb)] =
          ldexpf(1.0f, smax[u] - 127 - kMxfp4Fp8Shift);
    const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t codes[8];
    if constexpr (kCopy) {
#pragma unroll
      for (int w = 0; w < 4; ++w) codes[2 * w] = words[w], codes[2 * w + 1] = words[w] ^ s4[u];
    } else {
      const int d = min(max(smax[u] - int((s4[u] >> (8 * g)) & 0xFF), 0), kMxfp4Fp8ZeroSpan + 1);
      const uint2 m = *reinterpret_cast<const uint2*>(mag[d]);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        codes[2 * w] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<0>(words[w])) | mxfp4_packed_signs<0>(words[w]);
        codes[2 * w + 1] = __byte_perm(m.x, m.y, mxfp4_packed_magnitudes<1>(words[w])) | mxfp4_packed_signs<1>(words[w]);
      }
    }
    uint8_t* dst = out.codes + (eg[u] * G + grp[u]) * 32;
    store16<kHints>(dst, make_uint4(codes[0], codes[1], codes[2], codes[3]));
    store16<kHints>(dst + 16, make_uint4(codes[4], codes[5], codes[6], codes[7]));
  }
}

template <int kItems, bool kHints, bool kCopy>
__global__ void __launch_bounds__(kThreads) linear_kernel(Mxfp4ExpertsView W, Mxfp4AsFp8 out) {
  __shared__ __align__(8) uint8_t mag[kDist][8];
  fill_mag(mag);
  __syncthreads();
  const int KB = mxfp4_act_cols(W.K) / 128, G = W.K / kMxfp4Group, NB = (W.N + out.block_rows - 1) / out.block_rows;
  const size_t items = size_t(W.experts) * W.N * G;
  convert_linear<kItems, kHints, kCopy>(W, out, mag, size_t(blockIdx.x) * kItems * kThreads, items, KB, G, NB);
}

template <int kItems, bool kHints, bool kCopy>
void run_linear(const char* name, const Mxfp4ExpertsView& W, const Mxfp4AsFp8& out, DeviceArray<uint8_t>& codes,
                DeviceArray<float>& scales, size_t tiles_bytes) {
  const size_t items = size_t(W.experts) * W.N * (W.K / kMxfp4Group);
  const int grid = int((items + size_t(kItems) * kThreads - 1) / (size_t(kItems) * kThreads));
  OSPREY_CUDA_CHECK(cudaMemset(codes.ptr, 0, codes.n));
  OSPREY_CUDA_CHECK(cudaMemset(scales.ptr, 0, scales.n * 4));
  const float us = median_us([&] { linear_kernel<kItems, kHints, kCopy><<<grid, kThreads>>>(W, out); });
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  const double gb = double(tiles_bytes + codes.n) / 1e9;
  std::printf("| %s | %d | %.1f | %.2f | %016llx | %016llx |\n", name, grid, us, gb / (us * 1e-6) / 1e3,
              (unsigned long long)checksum(codes, codes.n), (unsigned long long)checksum(scales, scales.n));
}

// kPersistent: gridDim.x blocks loop over the chunks of kItems items; else one chunk a block.
template <int kItems, bool kHints, bool kCopy, bool kPersistent>
__global__ void __launch_bounds__(kThreads) conv_kernel(Mxfp4ExpertsView W, Mxfp4AsFp8 out, int chunks) {
  __shared__ __align__(8) uint8_t mag[kDist][8];
  fill_mag(mag);
  __syncthreads();
  const int KB = mxfp4_act_cols(W.K) / 128, G = W.K / kMxfp4Group, N16 = W.N / kMxfp4TileRows;
  const int tiles = W.experts * N16 * KB, NB = (W.N + out.block_rows - 1) / out.block_rows;
  if constexpr (kPersistent) {
    for (int c = blockIdx.x; c < chunks; c += gridDim.x)
      convert_items<kItems, kHints, kCopy>(W, out, mag, c * kItems, tiles, KB, G, N16, NB);
  } else {
    convert_items<kItems, kHints, kCopy>(W, out, mag, blockIdx.x * kItems, tiles, KB, G, N16, NB);
  }
}

int g_sms = 0;

template <int kItems, bool kHints, bool kCopy, bool kPersistent>
void run_variant(const char* name, const Mxfp4ExpertsView& W, const Mxfp4AsFp8& out, DeviceArray<uint8_t>& codes,
                 DeviceArray<float>& scales, size_t tiles_bytes, int blocks_per_sm) {
  const size_t tiles = size_t(W.experts) * (W.N / kMxfp4TileRows) * (mxfp4_act_cols(W.K) / 128);
  const int chunks = int((tiles + size_t(kTilesPerItem) * kItems - 1) / (size_t(kTilesPerItem) * kItems));
  const int grid = kPersistent ? std::min(chunks, g_sms * blocks_per_sm) : chunks;
  OSPREY_CUDA_CHECK(cudaMemset(codes.ptr, 0, codes.n));
  OSPREY_CUDA_CHECK(cudaMemset(scales.ptr, 0, scales.n * 4));
  const float us = median_us([&] { conv_kernel<kItems, kHints, kCopy, kPersistent><<<grid, kThreads>>>(W, out, chunks); });
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  const double gb = double(tiles_bytes + codes.n) / 1e9;
  std::printf("| %s | %d | %.1f | %.2f | %016llx | %016llx |\n", name, grid, us, gb / (us * 1e-6) / 1e3,
              (unsigned long long)checksum(codes, codes.n), (unsigned long long)checksum(scales, scales.n));
}

void shape(int E, int N, int K) {
  const int block_rows = 128;
  const size_t tiles_bytes = mxfp4_tiles_bytes(N, K) * E, sper = mxfp4_fp8_scales_size(N, K, block_rows);
  const int KB = mxfp4_act_cols(K) / 128, NB = (N + 127) / 128;
  DeviceArray<uint8_t> tiles(tiles_bytes), codes(size_t(E) * N * K), smax(size_t(E) * NB * KB), copy_dst(size_t(E) * N * K);
  DeviceArray<float> scales(size_t(E) * sper);
  moe_inputs::fill_mxfp4_tiles<<<2048, 256>>>(tiles.ptr, tiles.n, 5);  // scales 118 .. 125
  OSPREY_CUDA_CHECK(cudaMemset(smax.ptr, 130, smax.n));
  const Mxfp4ExpertsView W{tiles.ptr, nullptr, E, N, K};
  const Mxfp4AsFp8 out{codes.ptr, scales.ptr, sper, block_rows, smax.ptr};
  std::printf("\nE %d, N %d, K %d (tiles %.1f MB, codes %.1f MB)\n\n", E, N, K, tiles_bytes / 1e6, codes.n / 1e6);
  std::printf("| variant | grid | us | TB/s | codes | scales |\n|---|---:|---:|---:|---|---|\n");
  {
    OSPREY_CUDA_CHECK(cudaMemset(codes.ptr, 0, codes.n));
    OSPREY_CUDA_CHECK(cudaMemset(scales.ptr, 0, scales.n * 4));
    const float us = median_us([&] { mxfp4_experts_to_fp8(W, nullptr, out, nullptr); });
    OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
    const double gb = double(tiles_bytes + codes.n) / 1e9;
    std::printf("| production | | %.1f | %.2f | %016llx | %016llx |\n", us, gb / (us * 1e-6) / 1e3,
                (unsigned long long)checksum(codes, codes.n), (unsigned long long)checksum(scales, scales.n));
  }
  run_variant<2, false, false, false>("probe copy of production (2 items)", W, out, codes, scales, tiles_bytes, 0);
  run_variant<2, true, false, false>("2 items, cache hints", W, out, codes, scales, tiles_bytes, 0);
  run_variant<4, false, false, false>("4 items", W, out, codes, scales, tiles_bytes, 0);
  run_variant<4, true, false, false>("4 items, cache hints", W, out, codes, scales, tiles_bytes, 0);
  for (int bps : {4, 8}) {
    char name[96];
    std::snprintf(name, sizeof name, "persistent 2 items, %d blocks an SM", bps);
    run_variant<2, false, false, true>(name, W, out, codes, scales, tiles_bytes, bps);
    std::snprintf(name, sizeof name, "persistent 2 items, hints, %d blocks an SM", bps);
    run_variant<2, true, false, true>(name, W, out, codes, scales, tiles_bytes, bps);
    std::snprintf(name, sizeof name, "persistent 4 items, hints, %d blocks an SM", bps);
    run_variant<4, true, false, true>(name, W, out, codes, scales, tiles_bytes, bps);
  }
  run_linear<1, false, false>("linear, 1 item", W, out, codes, scales, tiles_bytes);
  run_linear<2, false, false>("linear, 2 items", W, out, codes, scales, tiles_bytes);
  run_linear<4, false, false>("linear, 4 items", W, out, codes, scales, tiles_bytes);
  run_linear<2, true, false>("linear, 2 items, hints", W, out, codes, scales, tiles_bytes);
  run_linear<4, true, false>("linear, 4 items, hints", W, out, codes, scales, tiles_bytes);
  run_linear<2, false, true>("linear copy (no lookup), 2 items", W, out, codes, scales, tiles_bytes);
  run_variant<2, false, true, false>("copy (no lookup), 2 items", W, out, codes, scales, tiles_bytes, 0);
  run_variant<2, true, true, false>("copy (no lookup), 2 items, hints", W, out, codes, scales, tiles_bytes, 0);
  run_variant<4, true, true, true>("copy (no lookup), persistent 4 items, hints, 8 an SM", W, out, codes, scales,
                                   tiles_bytes, 8);
  {
    const float us = median_us([&] { OSPREY_CUDA_CHECK(cudaMemcpyAsync(copy_dst.ptr, codes.ptr, codes.n, cudaMemcpyDeviceToDevice)); });
    std::printf("| memcpy of the codes (read + write %.1f MB each) | | %.1f | %.2f | | |\n", codes.n / 1e6, us,
                2.0 * codes.n / 1e9 / (us * 1e-6) / 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  OSPREY_CUDA_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  const std::string only = argc > 1 ? argv[1] : "";
  for (int E : {128, 32}) {
    if (!only.empty() && std::stoi(only) != E) continue;
    shape(E, 5760, 2880);
    shape(E, 2880, 2880);
  }
  return 0;
}
