// Probe: three passes of a long prompt chunk's MoE that are bound by memory or instructions, not by
// the tensor cores, at gpt-oss's shapes (H = I = 2880; 20b: 32 experts, 120b: 128):
// - the routing front of prompt chunks (cuda::moe_route: norm, 1x128 quantization, fp32 router,
//   top-4 softmax, sort by expert) over T tokens, as the model calls it for a W4A8 or FP8 chunk;
// - the combine of the experts' rows into the residual stream with the next norm (moe_combine_norm);
// - the W4A8 conversion of one layer's experts (cuda::mxfp4_experts_to_fp8, both matrices, blocks of
//   1 and 128 rows), every expert, as the model converts a layer ahead.
// Prints microseconds a launch (median of 20 after 3 warm-ups; the conversion as GB/s of bytes
// read and written) and a checksum of every output, so that two builds of the kernels can be
// compared bit for bit and timed in one call. With "route", "combine" or "convert" as the argument, that
// part alone; "route T E", that routing shape alone.
//
// Build (from the repository root; fmt needs the host compiler for error_plain.cpp):
//   g++ -std=c++20 -O2 -Isrc -c src/core/error_plain.cpp -o build/error_plain.o
//   nvcc -O3 -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Isrc \
//     bench/probes/prefill_passes.cu src/kernels/cuda/moe_route.cu src/kernels/cuda/moe_gemm_mxfp4.cu \
//     src/kernels/cuda/moe_combine.cu \
//     build/error_plain.o -lfmt -o build/probe_prefill_passes
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "formats/mxfp4.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "model/moe_timing_inputs.cuh"
#include "probe_timing.cuh"

using namespace osprey::cuda;
namespace moe_inputs = osprey::moe_inputs;
using osprey::mxfp4_act_cols;
using osprey::mxfp4_fp8_scales_size;
using osprey::mxfp4_tiles_bytes;

namespace {

using moe_inputs::mix;
// Uniform in [-a, a).
__global__ void fill_uniform_f32(float* p, size_t n, uint32_t seed, float a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = (float(mix(i, seed) & 0xFFFFFF) / float(1 << 24) * 2.0f - 1.0f) * a;
}
// Uniform in [lo, hi).
__global__ void fill_uniform_bf16(bf16* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(lo + (hi - lo) * float(mix(i, seed) & 0xFFFF) / 65536.0f);
}
using osprey::probe::checksum;
using osprey::probe::median_us;

void route(int T, int E) {
  const int H = 2880, k = 4, KB = (H + 127) / 128, ld = (T + 3) / 4 * 4, P = moe_rows_max(T, k, E);
  DeviceArray<float> x(size_t(T) * H), s(size_t(KB) * ld), logits(size_t(T) * E), w(size_t(T) * k);
  DeviceArray<bf16> gain(H), rbias(E), router(size_t(E) * H);  // the router BF16, as the model keeps it
  DeviceArray<uint8_t> q(size_t(T) * H);
  DeviceArray<int32_t> counters(T + 1), idx(size_t(T) * k), seg(E + 1), row_token(P), pair_row(size_t(T) * k), active(E);
  fill_uniform_f32<<<1024, 256>>>(x.ptr, x.n, 1, 4.0f);
  fill_uniform_bf16<<<1024, 256>>>(router.ptr, router.n, 2, -0.05f, 0.05f);
  fill_uniform_bf16<<<64, 256>>>(gain.ptr, gain.n, 3, 0.5f, 1.5f);
  fill_uniform_bf16<<<1, 256>>>(rbias.ptr, rbias.n, 4, -0.1f, 0.1f);
  OSPREY_CUDA_CHECK(cudaMemset(counters.ptr, 0, counters.n * 4));
  OSPREY_CUDA_CHECK(cudaMemset(row_token.ptr, 0, row_token.n * 4));
  const float us = median_us([&] {
    moe_route(x.ptr, gain.ptr, T, H, 1e-5f, q.ptr, s.ptr, ld, nullptr, router.ptr, rbias.ptr, E, k, logits.ptr,
              counters.ptr, idx.ptr, w.ptr, {seg.ptr, row_token.ptr, pair_row.ptr, active.ptr}, nullptr, nullptr);
  });
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("| route | T %d, E %d | %.1f us | q %016llx s %016llx logits %016llx idx %016llx w %016llx seg %016llx "
              "rows %016llx pairs %016llx |\n",
              T, E, us, (unsigned long long)checksum(q, q.n), (unsigned long long)checksum(s, s.n),
              (unsigned long long)checksum(logits, logits.n), (unsigned long long)checksum(idx, idx.n),
              (unsigned long long)checksum(w, w.n), (unsigned long long)checksum(seg, seg.n),
              (unsigned long long)checksum(row_token, row_token.n), (unsigned long long)checksum(pair_row, pair_row.n));
}

__global__ void fill_pairs(int32_t* pair_row, int32_t* idx, int P, int E) {
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x)
    pair_row[p] = p, idx[p] = int(mix(uint64_t(p), 7) % uint32_t(E));
}

// The combine of the experts' rows into the residual stream with the next norm (moe_combine_norm),
// T tokens, top-4 of E, each pair's row its own.
void combine(int T, int E) {
  const int H = 2880, k = 4, KB = (H + 127) / 128, ld = (T + 3) / 4 * 4, P = T * k;
  DeviceArray<float> x(size_t(T) * H), y(size_t(P) * H), w(P), s(size_t(KB) * ld);
  DeviceArray<bf16> b2(size_t(E) * H), gain(H);
  DeviceArray<uint8_t> q(size_t(T) * H);
  DeviceArray<int32_t> pair_row(P), idx(P);
  fill_uniform_f32<<<1024, 256>>>(x.ptr, x.n, 11, 4.0f);
  fill_uniform_f32<<<1024, 256>>>(y.ptr, y.n, 12, 2.0f);
  fill_uniform_f32<<<64, 256>>>(w.ptr, w.n, 13, 1.0f);
  fill_uniform_bf16<<<256, 256>>>(b2.ptr, b2.n, 14, -0.5f, 0.5f);
  fill_uniform_bf16<<<64, 256>>>(gain.ptr, gain.n, 15, 0.5f, 1.5f);
  fill_pairs<<<256, 256>>>(pair_row.ptr, idx.ptr, P, E);
  // x accumulates: every launch adds the same rows again (the time is what counts; the checksum
  // is of the 23 launches' result).
  const float us = median_us([&] {
    moe_combine_norm(x.ptr, y.ptr, pair_row.ptr, w.ptr, idx.ptr, b2.ptr, T, k, H, gain.ptr, 1e-5f, q.ptr, s.ptr, ld,
                     nullptr, nullptr);
  });
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("| combine | T %d, E %d | %.1f us | x %016llx q %016llx s %016llx |\n", T, E, us,
              (unsigned long long)checksum(x, x.n), (unsigned long long)checksum(q, q.n),
              (unsigned long long)checksum(s, s.n));
}

void convert(int E, int N, int K, int block_rows) {
  const size_t tiles_bytes = mxfp4_tiles_bytes(N, K) * E, sper = mxfp4_fp8_scales_size(N, K, block_rows);
  const int KB = mxfp4_act_cols(K) / 128, NB = (N + 127) / 128;
  DeviceArray<uint8_t> tiles(tiles_bytes), codes(size_t(E) * N * K), smax(size_t(E) * NB * KB);
  DeviceArray<float> scales(size_t(E) * sper);
  moe_inputs::fill_mxfp4_tiles<<<2048, 256>>>(tiles.ptr, tiles.n, 5);  // scales 118 .. 125
  OSPREY_CUDA_CHECK(cudaMemset(smax.ptr, 130, smax.n));  // at least every block's largest scale
  OSPREY_CUDA_CHECK(cudaMemset(scales.ptr, 0, scales.n * 4));
  const Mxfp4ExpertsView W{tiles.ptr, nullptr, E, N, K};
  const float us = median_us([&] {
    mxfp4_experts_to_fp8(W, nullptr, {codes.ptr, scales.ptr, sper, block_rows, smax.ptr}, nullptr);
  });
  OSPREY_CUDA_CHECK(cudaDeviceSynchronize());
  const double gb = double(tiles_bytes + codes.n) / 1e9;
  std::printf("| convert | E %d, N %d, K %d, blocks of %d rows | %.1f us (%.2f TB/s) | codes %016llx scales %016llx |\n",
              E, N, K, block_rows, us, gb / (us * 1e-6) / 1e3, (unsigned long long)checksum(codes, codes.n),
              (unsigned long long)checksum(scales, scales.n));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  if (only == "route" && argc > 3) {  // route T E: that shape alone (for ncu)
    route(std::stoi(argv[2]), std::stoi(argv[3]));
    return 0;
  }
  if (only.empty() || only == "route")
    for (int E : {32, 128})
      for (int T : {1024, 8192}) route(T, E);
  if (only.empty() || only == "combine")
    for (int T : {1024, 8192}) combine(T, 32);
  if (only.empty() || only == "convert")
    for (int E : {32, 128})
      for (int rows : {1, 128}) {
        convert(E, 5760, 2880, rows);
        convert(E, 2880, 2880, rows);
      }
  return 0;
}
