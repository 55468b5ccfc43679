// MXFP4 (OCP MX): groups of 32 E2M1 values along the input dimension sharing one E8M0 scale.
// Byte b of a group holds columns 2b (low nibble) and 2b+1 (high nibble).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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

// The wgmma layout of the prompt chunks' expert GEMM (kernels/cuda/moe_gemm_mxfp4_wgmma.cuh): each
// k16 MMA step holds the same columns as in the activation layout, in the slot order of the MMA
// (slot 2c + 8 (j % 2) + h of step s, the notation of mxfp4_act_position), its 16 columns
// contiguous: what a K-major wgmma B operand reads from a 128-byte swizzled shared-memory row. In
// 4-byte units each 64-byte chunk of the activation layout (units 16m + 4c + j) is transposed
// 4 x 4 (units 16m + 4j + c).
//   position = 128 (k / 128) + 16 s + 2 c + 8 (j % 2) + h.
constexpr int mxfp4_wgmma_position(int k) {
  const int c = (k % 128) / 32, r = k % 32, m = r / 8, j = r % 8 % 4, h = r % 8 / 4, s = 2 * m + j / 2;
  return 128 * (k / 128) + 16 * s + 2 * c + 8 * (j % 2) + h;
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
// mxfp4_pack_word moves bit 4i + b to mxfp4_word_bit(i, b), mxfp4_unpack_word moves it back. The
// 32 moves take 8 distinct distances, so each runs as 8 shift-and-masks (what the compiler folds
// out of the fold over all 63 distances below), not 32 single-bit moves: the load re-lays out the
// 120b's 61 GB of experts through it (mxfp4_relayout_tiles).
namespace mxfp4_detail {
// The destination bits that move by `shift` (destination minus source bit): packing (source
// 4i + b, destination mxfp4_word_bit(i, b)) or unpacking (the reverse).
constexpr uint32_t permuted_bits(bool pack, int shift) {
  uint32_t m = 0;
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) {
      const int src = pack ? 4 * i + b : mxfp4_word_bit(i, b), dst = pack ? mxfp4_word_bit(i, b) : 4 * i + b;
      if (dst - src == shift) m |= 1u << dst;
    }
  return m;
}
template <bool kPack, int kShift>
constexpr uint32_t permuted_part(uint32_t w) {
  constexpr uint32_t m = permuted_bits(kPack, kShift);
  if constexpr (m == 0) return 0u;
  else if constexpr (kShift >= 0) return (w << kShift) & m;
  else return (w >> -kShift) & m;
}
template <bool kPack, int... S>
constexpr uint32_t permuted(uint32_t w, std::integer_sequence<int, S...>) {
  return (permuted_part<kPack, S - 31>(w) | ...);
}
}  // namespace mxfp4_detail
constexpr uint32_t mxfp4_pack_word(uint32_t w) {
  return mxfp4_detail::permuted<true>(w, std::make_integer_sequence<int, 63>{});
}
constexpr uint32_t mxfp4_unpack_word(uint32_t p) {
  return mxfp4_detail::permuted<false>(p, std::make_integer_sequence<int, 63>{});
}

// Four E2M1 codes of a packed word (nibbles 4h .. 4h + 3 of the checkpoint's word: columns
// 8m + 4h + q of word m) read straight from the packed bits, for a byte lookup of four values at
// once (the GPU's PRMT): mxfp4_packed_magnitudes<h> puts code q's magnitude bits (mantissa,
// exponent low, exponent high: 0..7) in nibble q, mxfp4_packed_signs<h> its sign on bit 8q + 7.
// Each is a few shifts and masks fixed at compile time, where mxfp4_unpack_word moves 32 bits one
// by one: (w >> 16h) & 0x7777 and the signs of the unpacked word w, bit for bit.
namespace mxfp4_detail {
// The destination bits that move by `shift` (destination minus source bit) in half h's magnitudes
// (sign false) or signs (sign true).
constexpr uint32_t moved_bits(int h, bool sign, int shift) {
  uint32_t m = 0;
  for (int q = 0; q < 4; ++q)
    for (int b = sign ? 3 : 0; b < (sign ? 4 : 3); ++b) {
      const int src = mxfp4_word_bit(4 * h + q, b), dst = sign ? 8 * q + 7 : 4 * q + b;
      if (dst - src == shift) m |= 1u << dst;
    }
  return m;
}
template <int H, bool kSign, int kShift>
constexpr uint32_t moved(uint32_t p) {
  constexpr uint32_t m = moved_bits(H, kSign, kShift);
  if constexpr (m == 0) return 0u;
  else if constexpr (kShift >= 0) return (p << kShift) & m;
  else return (p >> -kShift) & m;
}
template <int H, bool kSign, int... S>
constexpr uint32_t gather(uint32_t p, std::integer_sequence<int, S...>) {
  return (moved<H, kSign, S - 31>(p) | ...);
}
}  // namespace mxfp4_detail
template <int H>
constexpr uint32_t mxfp4_packed_magnitudes(uint32_t p) {
  return mxfp4_detail::gather<H, false>(p, std::make_integer_sequence<int, 63>{});
}
template <int H>
constexpr uint32_t mxfp4_packed_signs(uint32_t p) {
  return mxfp4_detail::gather<H, true>(p, std::make_integer_sequence<int, 63>{});
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
// The same for `experts` matrices one after another (OpenMP over their tile rows).
void mxfp4_relayout_experts(const uint8_t* blocks, const uint8_t* scales, int experts, int N, int K, uint8_t* tiles);
// The largest E8M0 scale (2^1) whose power of two the GPU's BF16 decode takes in one multiply:
// its factor 2^(S - 1) is then at most 2^127, the largest BF16 power of two; above, it takes two.
constexpr int kMxfp4OneMultiplyMaxScale = 128;
// Whether any of n E8M0 scales is above kMxfp4OneMultiplyMaxScale: a matrix without one lets its
// decode kernels drop the second multiply's case (Mxfp4ExpertsView::big_scales). Trained gpt-oss
// experts have none (their groups' scales are far below 2).
bool mxfp4_any_big_scale(const uint8_t* scales, size_t n);

}  // namespace osprey

namespace osprey {

// MXFP4 as FP8 E4M3 with power-of-two fp32 block scales, for the tensor-core GEMMs of long prompt
// chunks (W4A8). A block is 128 columns of `block_rows` rows: 1 (one scale per 128 columns of a
// row, cuBLASLt's VEC128_32F) or 128 (BLK128x128_32F, the FP8 checkpoint's shape, faster in
// cuBLASLt). The block's E8M0 scales share the largest, Smax, and each value E2M1 * 2^(S - 127)
// becomes the code e4m3(E2M1 * 2^(S - Smax + 6)) with the block scale 2^(Smax - 133). E2M1 times
// 2^6 is at most 384 (E4M3 holds 448), and E4M3's subnormal step 2^-9 holds 0.5 * 2^(6 - d)
// exactly for d = Smax - S up to 14: a block whose scales span at most 2^14 converts exactly.
// Past that its values more than 2^14 below the block's scale round (to nearest even, at most
// 2^-10 of the block scale; beyond 2^20 to a signed zero). A block that K cuts (2880 = 22.5
// blocks) or N cuts takes Smax over the groups it has.
constexpr int kMxfp4Fp8Shift = 6;        // E2M1 max 6 * 2^6 = 384 <= 448
constexpr int kMxfp4Fp8ExactSpan = 14;   // d <= 14: exact
constexpr int kMxfp4Fp8ZeroSpan = 20;    // d > 20: a signed zero (the rounding would give it too)
// The E4M3 code of E2M1 code `c` (4 bits) at scale distance d = Smax - S >= 0.
uint8_t mxfp4_e2m1_to_e4m3(int c, int d);
// Smax of the block of rows [rb * block_rows, +block_rows) and columns [128 kb, +128).
int mxfp4_fp8_block_smax(const uint8_t* scales, int N, int K, int block_rows, int rb, int kb);
// The scale layout of the converted matrix: block_rows 1: [KB][N] (N contiguous); 128:
// [round4(NB)][round4(KB)] as formats/fp8.h Matrix (padding entries untouched). KB = ceil(K/128).
constexpr size_t mxfp4_fp8_scale_index(int N, int K, int block_rows, int n, int kb) {
  if (block_rows == 1) return size_t(kb) * N + n;
  return size_t(n / block_rows) * ((K + 511) / 512 * 4) + kb;
}
constexpr size_t mxfp4_fp8_scales_size(int N, int K, int block_rows) {
  if (block_rows == 1) return size_t((K + 127) / 128) * N;
  return size_t((N + 4 * block_rows - 1) / (4 * block_rows) * 4) * ((K + 511) / 512 * 4);
}
// One matrix, blocks [N][K/32][16] and scales [N][K/32] (the checkpoint's) -> codes [N][K] and
// block scales in the layout above. K % 32 == 0.
void mxfp4_to_fp8(const uint8_t* blocks, const uint8_t* scales, int N, int K, int block_rows, uint8_t* codes,
                  float* block_scales);
// The blocks whose scales span more than 2^14 (those whose small values round).
size_t mxfp4_fp8_inexact_blocks(const uint8_t* scales, int N, int K, int block_rows);
// A matrix of `experts` experts (scales [experts][N][K/32]), in one pass over its scales (OpenMP
// over experts): the block shape it converts with, 128 rows where every 128x128 block of every
// expert converts exactly, else 1; and the Smax of every 128x128 block, [experts][ceil(N/128)][KB],
// what the GPU conversion reads for block_rows 128.
struct Mxfp4Fp8Blocks {
  int block_rows = 1;
  std::vector<uint8_t> smax;
};
Mxfp4Fp8Blocks mxfp4_fp8_blocks(const uint8_t* scales, int experts, int N, int K);

}  // namespace osprey
