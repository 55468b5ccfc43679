#include "formats/mxfp4.h"

#include <cstring>

namespace osprey {

void mxfp4_relayout_tiles(const uint8_t* blocks, const uint8_t* scales, int N, int K, uint8_t* tiles) {
  const int G = K / kMxfp4Group, KB = mxfp4_act_cols(K) / kMxfp4ActBlock;
  for (int t = 0; t < N / kMxfp4TileRows; ++t)
    for (int kb = 0; kb < KB; ++kb) {
      uint8_t* tile = tiles + (size_t(t) * KB + kb) * kMxfp4TileBytes;
      for (int r = 0; r < kMxfp4TileRows; ++r) {
        const size_t n = size_t(t) * kMxfp4TileRows + r;
        for (int c = 0; c < 4; ++c) {
          const int grp = 4 * kb + c;
          uint8_t* codes = tile + r * 64 + c * kMxfp4GroupBytes;
          if (grp < G) {
            for (int w = 0; w < kMxfp4GroupBytes / 4; ++w) {
              uint32_t word;
              std::memcpy(&word, blocks + (n * G + grp) * kMxfp4GroupBytes + 4 * w, 4);
              word = mxfp4_pack_word(word);
              std::memcpy(codes + 4 * w, &word, 4);
            }
            tile[1024 + 4 * r + c] = scales[n * G + grp];
          } else {
            std::memset(codes, 0, kMxfp4GroupBytes);
            tile[1024 + 4 * r + c] = 127;
          }
        }
      }
    }
}

void mxfp4_relayout_experts(const uint8_t* blocks, const uint8_t* scales, int experts, int N, int K, uint8_t* tiles) {
  const size_t per_b = size_t(N) * K / 2, per_s = size_t(N) * K / kMxfp4Group, per_t = mxfp4_tiles_bytes(N, K);
#pragma omp parallel for schedule(dynamic)
  for (int e = 0; e < experts; ++e)
    mxfp4_relayout_tiles(blocks + e * per_b, scales + e * per_s, N, K, tiles + e * per_t);
}

}  // namespace osprey
