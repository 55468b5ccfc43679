#include "formats/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "formats/fp8.h"

namespace osprey {

namespace {
// Tile row t (rows 16t .. 16t + 15, every block of K) of one matrix.
void relayout_tile_row(const uint8_t* blocks, const uint8_t* scales, int K, int t, uint8_t* tiles) {
  const int G = K / kMxfp4Group, KB = mxfp4_act_cols(K) / kMxfp4ActBlock;
  constexpr int kWordsPerGroup = kMxfp4GroupBytes / 4;
  for (int kb = 0; kb < KB; ++kb) {
    uint8_t* tile = tiles + (size_t(t) * KB + kb) * kMxfp4TileBytes;
    const int groups = std::min(4, G - 4 * kb);  // the groups K leaves this block (2880: 2 in the last)
    for (int r = 0; r < kMxfp4TileRows; ++r) {
      const size_t n = size_t(t) * kMxfp4TileRows + r;
      // The row's groups are contiguous in the checkpoint and in the tile: one run of words.
      const uint8_t* src = blocks + (n * G + 4 * kb) * kMxfp4GroupBytes;
      uint8_t* codes = tile + r * 64;
      for (int w = 0; w < groups * kWordsPerGroup; ++w) {
        uint32_t word;
        std::memcpy(&word, src + 4 * w, 4);
        word = mxfp4_pack_word(word);
        std::memcpy(codes + 4 * w, &word, 4);
      }
      std::memset(codes + groups * kMxfp4GroupBytes, 0, size_t(4 - groups) * kMxfp4GroupBytes);
      for (int c = 0; c < 4; ++c) tile[1024 + 4 * r + c] = c < groups ? scales[n * G + 4 * kb + c] : 127;
    }
  }
}
}  // namespace

void mxfp4_relayout_tiles(const uint8_t* blocks, const uint8_t* scales, int N, int K, uint8_t* tiles) {
  for (int t = 0; t < N / kMxfp4TileRows; ++t) relayout_tile_row(blocks, scales, K, t, tiles);
}

void mxfp4_relayout_experts(const uint8_t* blocks, const uint8_t* scales, int experts, int N, int K, uint8_t* tiles) {
  const size_t per_b = size_t(N) * K / 2, per_s = size_t(N) * K / kMxfp4Group, per_t = mxfp4_tiles_bytes(N, K);
  const int rows = N / kMxfp4TileRows;
  // Over every tile row of every expert: a few experts (the load's chunks) still fill the threads.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < experts * rows; ++i) {
    const int e = i / rows;
    relayout_tile_row(blocks + e * per_b, scales + e * per_s, K, i % rows, tiles + e * per_t);
  }
}

bool mxfp4_any_big_scale(const uint8_t* scales, size_t n) {
  // A max over all of them (a loop the compiler vectorizes; an early exit it would not).
  uint8_t top = 0;
#pragma omp parallel for simd reduction(max : top)
  for (size_t i = 0; i < n; ++i) top = std::max(top, scales[i]);
  return top > kMxfp4OneMultiplyMaxScale;
}

uint8_t mxfp4_e2m1_to_e4m3(int c, int d) {
  const uint8_t sign = (c & 8) ? 0x80 : 0;
  if (d > kMxfp4Fp8ZeroSpan) return sign;
  return sign | fp8::from_f32(std::ldexp(std::fabs(kE2M1Values[c & 15]), kMxfp4Fp8Shift - d));
}

namespace {
// The smallest and largest scale of the block of rows [rb * block_rows, +block_rows) and columns
// [128 kb, +128): the groups it has.
std::pair<int, int> block_scale_range(const uint8_t* scales, int N, int K, int block_rows, int rb, int kb) {
  const int G = K / kMxfp4Group;
  int smin = 255, smax = 0;
  for (int n = rb * block_rows; n < std::min(N, (rb + 1) * block_rows); ++n)
    for (int g = 4 * kb; g < std::min(G, 4 * kb + 4); ++g) {
      const int sc = scales[size_t(n) * G + g];
      smin = std::min(smin, sc), smax = std::max(smax, sc);
    }
  return {smin, smax};
}
}  // namespace

int mxfp4_fp8_block_smax(const uint8_t* scales, int N, int K, int block_rows, int rb, int kb) {
  return block_scale_range(scales, N, K, block_rows, rb, kb).second;
}

void mxfp4_to_fp8(const uint8_t* blocks, const uint8_t* scales, int N, int K, int block_rows, uint8_t* codes,
                  float* block_scales) {
  const int G = K / kMxfp4Group, KB = fp8::blocks(K), NB = (N + block_rows - 1) / block_rows;
  for (int rb = 0; rb < NB; ++rb)
    for (int kb = 0; kb < KB; ++kb) {
      const int smax = mxfp4_fp8_block_smax(scales, N, K, block_rows, rb, kb);
      for (int n = rb * block_rows; n < std::min(N, (rb + 1) * block_rows); ++n) {
        block_scales[mxfp4_fp8_scale_index(N, K, block_rows, n, kb)] = std::ldexp(1.0f, smax - 127 - kMxfp4Fp8Shift);
        for (int g = 4 * kb; g < std::min(G, 4 * kb + 4); ++g) {
          const int d = smax - int(scales[size_t(n) * G + g]);
          const uint8_t* b = blocks + (size_t(n) * G + g) * kMxfp4GroupBytes;
          uint8_t* out = codes + size_t(n) * K + 32 * g;
          for (int i = 0; i < kMxfp4GroupBytes; ++i) {
            out[2 * i] = mxfp4_e2m1_to_e4m3(b[i] & 15, d);
            out[2 * i + 1] = mxfp4_e2m1_to_e4m3(b[i] >> 4, d);
          }
        }
      }
    }
}

size_t mxfp4_fp8_inexact_blocks(const uint8_t* scales, int N, int K, int block_rows) {
  const int KB = fp8::blocks(K), NB = (N + block_rows - 1) / block_rows;
  size_t count = 0;
  for (int rb = 0; rb < NB; ++rb)
    for (int kb = 0; kb < KB; ++kb) {
      const auto [smin, smax] = block_scale_range(scales, N, K, block_rows, rb, kb);
      count += smax - smin > kMxfp4Fp8ExactSpan;
    }
  return count;
}

Mxfp4Fp8Blocks mxfp4_fp8_blocks(const uint8_t* scales, int experts, int N, int K) {
  const int KB = fp8::blocks(K), NB = (N + 127) / 128;
  const size_t per = size_t(N) * (K / kMxfp4Group);
  Mxfp4Fp8Blocks b;
  b.smax.resize(size_t(experts) * NB * KB);
  size_t inexact = 0;
#pragma omp parallel for reduction(+ : inexact) schedule(dynamic)
  for (int e = 0; e < experts; ++e)
    for (int rb = 0; rb < NB; ++rb)
      for (int kb = 0; kb < KB; ++kb) {
        const auto [smin, smax] = block_scale_range(scales + e * per, N, K, 128, rb, kb);
        b.smax[(size_t(e) * NB + rb) * KB + kb] = uint8_t(smax);
        inexact += smax - smin > kMxfp4Fp8ExactSpan;
      }
  b.block_rows = inexact ? 1 : 128;
  return b;
}

}  // namespace osprey
