// FP8 E4M3 ("fn": no infinities, max 448) and 128x128 block scaling, the weight format of the
// Hopper path. Shared by the CPU emulation (--precision fp8), the converter and the CUDA kernels'
// tests: the CUDA quantizers must produce these exact bytes and scales.
//
// Scales: one fp32 per 128x128 block, scale = amax / 448 (1 for an all-zero block), code =
// e4m3(w / scale) rounded to nearest even and saturated to +-448. A dimension that is not a
// multiple of 128 (2880 = 22.5 blocks) ends in a partial block: its scale covers only the
// columns (rows) that exist; nothing is padded in the data. The scale tensor is row-major
// [row_blocks_padded][scale_stride] with both dimensions rounded up to a multiple of 4 (what
// cuBLASLt's BLK128x128_32F mode reads); padding entries are 1.
// Activations use 1x128 blocks per row (VEC128_32F): codes [T][K], scales [K/128 blocks][ld]
// with the token index contiguous (ld >= T, a multiple of 4).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace osprey::fp8 {

constexpr int kBlock = 128;
constexpr float kMax = 448.0f;

inline int blocks(int n) { return (n + kBlock - 1) / kBlock; }
inline int round4(int n) { return (n + 3) / 4 * 4; }

// Round to nearest even, saturate to the largest finite value; NaN -> 0x7F (with sign).
inline uint8_t from_f32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  if (std::isnan(x)) return sign | 0x7F;
  const float a = std::fabs(x);
  if (a >= kMax) return sign | 0x7E;
  if (a < 0.015625f) return sign | uint8_t(std::nearbyint(a * 512.0f));  // subnormals: steps of 2^-9 (8 -> 0x08, the smallest normal)
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int E = e2 - 1;      // a in [2^E, 2^(E+1))
  int q = int(std::nearbyint(std::ldexp(a, 3 - E)));  // 8..16
  if (q == 16) q = 8, ++E;
  const int code = ((E + 7) << 3) | (q - 8);
  return sign | uint8_t(code > 0x7E ? 0x7E : code);
}

inline float to_f32(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp(float(m), -9);
  else v = std::ldexp(float(8 + m), e - 10);
  return (c & 0x80) ? -v : v;
}

// All 256 codes decoded.
struct DecodeTable {
  float v[256];
  DecodeTable() {
    for (int i = 0; i < 256; ++i) v[i] = to_f32(uint8_t(i));
  }
};
inline const DecodeTable& decode_table() {
  static const DecodeTable t;
  return t;
}

inline float block_scale(float amax) { return amax > 0.0f ? amax / kMax : 1.0f; }

// v / sc through the block's reciprocal inv = 1 / sc (correctly rounded, once a block): q = v inv,
// then one FMA correction, q + (v - q sc) inv (Markstein), with v's sign. For a block's finite
// values (|v| <= 448 sc) and a scale that scaled_quotient_exact accepts, its E4M3 code (from_f32,
// or the GPU's conversion) is that of the division v / sc: the two are the same float wherever the
// quotient reaches 2^-20, and below that both give code 0 with v's sign (E4M3 holds nothing under
// 2^-10). Three operations where a division takes about ten and a branch; tested by
// Fp8.ScaledQuotientGivesTheDivisionsCodes. Outside [2^-90, 2^100] (a block whose largest value is
// under about 2^-81, or a scale that is not finite) the caller divides.
#if defined(__CUDACC__)
#define OSPREY_FP8_HD __host__ __device__
#else
#define OSPREY_FP8_HD
#endif
OSPREY_FP8_HD inline bool scaled_quotient_exact(float sc) { return sc >= 0x1p-90f && sc <= 0x1p100f; }
OSPREY_FP8_HD inline float scaled_quotient(float v, float sc, float inv) {
  const float q = v * inv;
  return copysignf(fmaf(fmaf(-q, sc, v), inv, q), v);  // the sign of v: -0 / sc is -0, the FMAs' sum +0
}
#undef OSPREY_FP8_HD

// A 128x128 block-scaled matrix, or a stack of `count` of them (the experts of a layer). Owns its
// bytes (allocate) or views them in a mapped checkpoint written by `osprey convert` (view).
struct Matrix {
  int count = 1, rows = 0, cols = 0;
  std::vector<uint8_t> q;      // [count][rows][cols]               (owned)
  std::vector<float> scales;   // [count][scale_rows()][scale_stride()] (owned)
  const uint8_t* q_view = nullptr;
  const float* s_view = nullptr;
  int scale_rows() const { return round4(blocks(rows)); }
  int scale_stride() const { return round4(blocks(cols)); }
  size_t scales_per_matrix() const { return size_t(scale_rows()) * scale_stride(); }
  size_t codes_per_matrix() const { return size_t(rows) * cols; }
  const uint8_t* data(int e = 0) const { return (q_view ? q_view : q.data()) + size_t(e) * codes_per_matrix(); }
  const float* scale(int e = 0) const { return (s_view ? s_view : scales.data()) + size_t(e) * scales_per_matrix(); }
  void allocate(int n, int r, int c) {
    count = n, rows = r, cols = c;
    q.assign(size_t(n) * r * c, 0);
    scales.assign(size_t(n) * scales_per_matrix(), 1.0f);
  }
  static Matrix view(int n, int r, int c, const uint8_t* codes, const float* s) {
    Matrix m;
    m.count = n, m.rows = r, m.cols = c, m.q_view = codes, m.s_view = s;
    return m;
  }
};

// Quantizes row blocks [rb0, rb1) of matrix e of m from a row source: row(r, out) writes row r's
// `cols` fp32 values. Row blocks are independent (callers may run them in parallel).
template <typename RowFn>
void quantize_row_blocks(Matrix& m, int e, int rb0, int rb1, RowFn&& row) {
  const int R = m.rows, C = m.cols, stride = m.scale_stride();
  uint8_t* q = m.q.data() + size_t(e) * R * C;
  float* s = m.scales.data() + size_t(e) * m.scales_per_matrix();
  std::vector<float> buf(size_t(kBlock) * C);
  for (int rb = rb0; rb < rb1; ++rb) {
    const int r0 = rb * kBlock, nr = std::min(kBlock, R - r0);
    for (int i = 0; i < nr; ++i) row(r0 + i, buf.data() + size_t(i) * C);
    for (int cb = 0; cb < blocks(C); ++cb) {
      const int c0 = cb * kBlock, nc = std::min(kBlock, C - c0);
      float amax = 0;
      for (int i = 0; i < nr; ++i)
        for (int j = 0; j < nc; ++j) amax = std::fmax(amax, std::fabs(buf[size_t(i) * C + c0 + j]));
      const float sc = block_scale(amax);
      s[size_t(rb) * stride + cb] = sc;
      for (int i = 0; i < nr; ++i)
        for (int j = 0; j < nc; ++j) q[size_t(r0 + i) * C + c0 + j] = from_f32(buf[size_t(i) * C + c0 + j] / sc);
    }
  }
}

// 1x128 activation quantization of x [T][K]: codes [T][K], scales [blocks(K)][ld] (token-contiguous).
inline void quantize_activations(const float* x, int T, int K, uint8_t* q, float* scales, int ld) {
  for (int t = 0; t < T; ++t)
    for (int kb = 0; kb < blocks(K); ++kb) {
      const int k0 = kb * kBlock, nk = std::min(kBlock, K - k0);
      float amax = 0;
      for (int j = 0; j < nk; ++j) amax = std::fmax(amax, std::fabs(x[size_t(t) * K + k0 + j]));
      const float sc = block_scale(amax);
      scales[size_t(kb) * ld + t] = sc;
      for (int j = 0; j < nk; ++j) q[size_t(t) * K + k0 + j] = from_f32(x[size_t(t) * K + k0 + j] / sc);
    }
}

}  // namespace osprey::fp8
