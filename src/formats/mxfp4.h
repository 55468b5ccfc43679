// MXFP4 (OCP MX): groups of 32 E2M1 values along the input dimension sharing one E8M0 scale.
// Byte b of a group holds columns 2b (low nibble) and 2b+1 (high nibble).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace osprey {

constexpr int kMxfp4Group = 32;       // values per scale
constexpr int kMxfp4GroupBytes = 16;  // packed bytes per group

inline constexpr float kE2M1Values[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s - 127), as the reference's ldexp computes it (no NaN special case for 255).
inline float e8m0_to_f32(uint8_t s) { return std::ldexp(1.0f, int(s) - 127); }

// Decode one row of `cols` values: blocks [cols/32][16], scales [cols/32].
inline void mxfp4_decode_row(const uint8_t* blocks, const uint8_t* scales, int cols, float* out) {
  for (int g = 0; g < cols / kMxfp4Group; ++g) {
    float s = e8m0_to_f32(scales[g]);
    for (int b = 0; b < kMxfp4GroupBytes; ++b) {
      uint8_t byte = blocks[g * kMxfp4GroupBytes + b];
      out[g * 32 + 2 * b] = kE2M1Values[byte & 0xF] * s;
      out[g * 32 + 2 * b + 1] = kE2M1Values[byte >> 4] * s;
    }
  }
}

}  // namespace osprey

namespace osprey {

// The activation layout of the MXFP4 expert GEMMs (kernels/cuda/moe_gemm_mxfp4.cuh): BF16 rows of
// round128(K) columns, zero past K. Inside each 128-column block the columns are permuted so that
// the tensor-core thread that decodes one 32-value MXFP4 group of a weight row finds the matching
// activations in one 16-byte load per two MMA steps: a dot product may visit k in any order as long
// as both operands agree, and the order this permutation encodes is the one in which four nibble
// shifts of a 32-bit word of packed E2M1 values come out as BF16 pairs (value k = 8m + j in the low
// half, k = 8m + j + 4 in the high half of pair 4m + j). The position of logical column k:
//   c = (k % 128) / 32 (the quad thread holding the group), r = k % 32, m = r / 8, j = r % 8 % 4,
//   h = r % 8 / 4, w = 4m + j (the BF16 pair, 0..15), s = w / 2 (the k16 MMA step), q = w % 2:
//   position = 128 (k / 128) + 32 (s / 2) + 8 c + 4 (s % 2) + 2 q + h.
constexpr int kMxfp4ActBlock = 128;
constexpr int mxfp4_act_cols(int K) { return (K + kMxfp4ActBlock - 1) / kMxfp4ActBlock * kMxfp4ActBlock; }
constexpr int mxfp4_act_position(int k) {
  const int c = (k % 128) / 32, r = k % 32, m = r / 8, j = r % 8 % 4, h = r % 8 / 4, w = 4 * m + j, s = w / 2, q = w % 2;
  return 128 * (k / 128) + 32 * (s / 2) + 8 * c + 4 * (s % 2) + 2 * q + h;
}

}  // namespace osprey

namespace osprey {

// The inverse of mxfp4_act_position: the logical column stored at position p.
constexpr int mxfp4_act_column(int p) {
  const int u = p % 128 / 32, c = p % 32 / 8, s = 2 * u + p % 8 / 4, q = p % 4 / 2, h = p % 2, w = 2 * s + q;
  return 128 * (p / 128) + 32 * c + 8 * (w / 4) + w % 4 + 4 * h;
}

// Inside a tile, each 32-bit word of a group (the checkpoint's nibbles i = 0..7: columns 8m + i of
// word m; a nibble's bits b = 0..3: mantissa, exponent low, exponent high, sign) has its bits
// moved to mxfp4_word_bit(i, b), so that the kernels' decode of BF16 pair j (nibbles j and j + 4)
// takes one mask for j < 3 (the pair sits where a BF16 pair wants it, shifted right by 3j) and
// three for j = 3 (kernels/cuda/moe_gemm_mxfp4_decode.cuh, e2m1_pair_bits): the decode's integer
// work a pair falls from 2.5 operations to 1.5. A permutation of the word's bits: nothing is lost.
constexpr int mxfp4_word_bit(int i, int b) {
  constexpr int kBit[8][4] = {{6, 7, 8, 15},     {3, 4, 5, 12},     {0, 1, 2, 9},      {13, 10, 11, 14},
                              {22, 23, 24, 31},  {19, 20, 21, 28},  {16, 17, 18, 25},  {29, 26, 27, 30}};
  return kBit[i][b];
}
constexpr uint32_t mxfp4_pack_word(uint32_t w) {
  uint32_t p = 0;
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) p |= ((w >> (4 * i + b)) & 1u) << mxfp4_word_bit(i, b);
  return p;
}
constexpr uint32_t mxfp4_unpack_word(uint32_t p) {
  uint32_t w = 0;
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) w |= ((p >> mxfp4_word_bit(i, b)) & 1u) << (4 * i + b);
  return w;
}

// One expert's weights re-laid out for the MXFP4 GEMMs' streaming loads: tiles [N/16][KB][1088 B]
// (KB = round128(K) / 128), tile (t, kb) holding rows 16t .. 16t + 15 over columns 128 kb ..
// 128 kb + 127: each row's four 16-byte groups of E2M1 codes at r * 64 (zero past K), then the
// sixteen rows' four E8M0 scales at 1024 + 4 r (127, 2^0, past K). A decode warp streams one tile
// per step as one contiguous kilobyte (64-byte pieces of 16 rows, the checkpoint's own layout,
// left HBM at a quarter of its bandwidth). The codes (each word's bits packed: mxfp4_pack_word) and
// scales are the checkpoint's, moved.
constexpr int kMxfp4TileRows = 16, kMxfp4TileBytes = 16 * 64 + 16 * 4;
constexpr size_t mxfp4_tiles_bytes(int N, int K) {
  return size_t(N / kMxfp4TileRows) * (mxfp4_act_cols(K) / kMxfp4ActBlock) * kMxfp4TileBytes;
}
// blocks [N][K/32][16], scales [N][K/32] -> tiles (N % 16 == 0, K % 32 == 0).
void mxfp4_relayout_tiles(const uint8_t* blocks, const uint8_t* scales, int N, int K, uint8_t* tiles);
// The same for `experts` matrices one after another (OpenMP over experts).
void mxfp4_relayout_experts(const uint8_t* blocks, const uint8_t* scales, int experts, int N, int K, uint8_t* tiles);

}  // namespace osprey
