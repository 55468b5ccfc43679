// The MXFP4 expert GEMMs' shared pieces and the decode path's body (moe_gemm_mxfp4.cu launches it
// as its own kernel; the persistent decode kernel runs it as a phase): internal to kernels/cuda.
#pragma once
#include "formats/mxfp4.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

constexpr int kWarps = 8;
constexpr int kBlk = kMxfp4ActBlock;  // columns per weight stage (4 groups of 32)
constexpr int kMaxExperts = 256;

__device__ inline uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Nibbles j and j + 4 of a word of E2M1 codes (its bits packed at load: formats/mxfp4.h
// mxfp4_pack_word) as a BF16 pair worth (value * 2^-126): the nibble's sign lands on bit 15 and
// its exponent and mantissa bits on 8..6, so exponent field e and mantissa m read
// 2^(e - 127) (1 + m/2), and the subnormal code 1 reads 2^-127. Pairs 0-2 are one shift (a
// multiply, on the FMA pipe) and one mask; pair 3 takes its sign, exponent and mantissa from three
// places (the right shifts as high multiplies, also on the FMA pipe).
__device__ inline uint32_t e2m1_pair_bits(uint32_t word, int j) {
  constexpr uint32_t kPair = 0x81C081C0u;
  if (j < 3) return (word << (3 * j)) & kPair;
  return ((word << 1) & 0x80008000u) | (__umulhi(word, 1u << 29) & 0x01800180u) | (__umulhi(word, 1u << 25) & 0x00400040u);
}

// 2^(S - 1) as BF16 factors (a pair each): a = 2^(min(S, M) - 1); b = 2^(S - M) for S > M, M =
// kMxfp4OneMultiplyMaxScale (a single BF16 holds at most 2^127). The decoded weight is bits * a
// (* b): exact.
struct E8m0Factors {
  uint32_t a, b;
  bool big;
};
__device__ inline E8m0Factors e8m0_factors(uint32_t S) {
  constexpr uint32_t M = kMxfp4OneMultiplyMaxScale;
  static_assert(M == 128, "a's exponent field M - 1 + 127 is the largest BF16 power of two");
  const uint32_t ea = min(S, M) + 126u, eb = S > M ? S - 1u : 127u;
  return {(ea << 7) | (ea << 23), (eb << 7) | (eb << 23), S > M};
}

// The 16 BF16 pairs (w = 4m + j: word m, nibble pair j) of one 16-byte group, scaled.
__device__ inline void decode_group(const uint4& v, const E8m0Factors& f, bool any_big, uint32_t (&out)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int m = 0; m < 4; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j) out[4 * m + j] = mul_bf16x2(e2m1_pair_bits(words[m], j), f.a);
  if (any_big && f.big)
#pragma unroll
    for (int w = 0; w < 16; ++w) out[w] = mul_bf16x2(out[w], f.b);
}

// ---------------------------------------------------------------------------------------------
// Decode paths: 16 weight rows per warp on the M side, 8 NT rows (tokens) a pass on the N side, K
// split over ks warps of a block (partial sums added in a fixed order through shared memory).
// Both paths run the same MMAs in the same order on every accumulator, so they give the same bits.

// One K block of a warp's 16 weight rows against the pass's row groups t < NT with t * 8 < nrows:
// word u of the two 16-byte groups (rows g and g + 8) decoded to BF16 pairs, then MMA steps 2u and
// 2u + 1. b(t, u): the row group's 16 activation bytes for word u (uint4).
template <int NT, class LoadB>
__device__ inline void mxfp4_kb_mma(const uint4& lo, const uint4& hi, const E8m0Factors& flo, const E8m0Factors& fhi,
                                    bool any_big, int nrows, float (&acc)[NT][4], const LoadB& b) {
  const uint32_t wlo[4] = {lo.x, lo.y, lo.z, lo.w}, whi[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t alo[4], ahi[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      alo[j] = mul_bf16x2(e2m1_pair_bits(wlo[u], j), flo.a);
      ahi[j] = mul_bf16x2(e2m1_pair_bits(whi[u], j), fhi.a);
      if (any_big) {
        if (flo.big) alo[j] = mul_bf16x2(alo[j], flo.b);
        if (fhi.big) ahi[j] = mul_bf16x2(ahi[j], fhi.b);
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t * 8 >= nrows) break;  // uniform: the pass's rows end
      const uint4 v = b(t, u);
      mma_bf16_16816(acc[t], alo[0], ahi[0], alo[1], ahi[1], v.x, v.y);
      mma_bf16_16816(acc[t], alo[2], ahi[2], alo[3], ahi[3], v.z, v.w);
    }
  }
}

// A pass's sums, through `store(t, i, v)` (called by every lane of the warps that store, in the
// same order: it may shuffle): accumulator i of row group t; with ks > 1 the splits' sums added in
// split order through red [kWarps][NT][4][32] (shared, free when called) and stored by split 0.
template <int NT, class Store>
__device__ inline void mxfp4_reduce_pass(const float (&acc)[NT][4], int ks, float* red, const Store& store) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, split = warp % ks;
  if (ks == 1) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) store(t, i, acc[t][i]);
    return;
  }
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[((warp * NT + t) * 4 + i) * 32 + lane] = acc[t][i];
  __syncthreads();
  if (split == 0)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = red[((warp * NT + t) * 4 + i) * 32 + lane];
        for (int w = 1; w < ks; ++w) v += red[(((warp + w) * NT + t) * 4 + i) * 32 + lane];
        store(t, i, v);
      }
}

// A pass's outputs: rows base + 8t + 2c + (i & 1) < s1 of weight rows n0 + g (+ 8), fp32 into y
// [.][N], or, with sw.a, through the clamped SwiGLU (gate and up interleaved: outputs 2o, 2o + 1
// make column o) as BF16 into sw.a [.][round128(N / 2)] in the MXFP4 activation layout: what
// moe_swiglu_bf16 makes of the fp32 outputs, bit for bit. The warp of weight rows 0 (n0 == 0)
// also writes the zeros of the layout's columns past N / 2.
template <int NT>
__device__ inline void mxfp4_store_pass(const float (&acc)[NT][4], int ks, int base, int s1, int n0, int N, float* y,
                                        float* red, const SwigluOut& sw = {}) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  auto row = [&](int t, int i) { return base + t * 8 + 2 * c + (i & 1); };
  auto col = [&](int i) { return n0 + g + (i >= 2 ? 8 : 0); };
  if (!sw.a) {
    mxfp4_reduce_pass<NT>(acc, ks, red, [&](int t, int i, float v) {
      const int r = row(t, i), n = col(i);
      if (r < s1 && n < N) y[size_t(r) * N + n] = v;
    });
    return;
  }
  const int I = N / 2, Ip = mxfp4_act_cols(I);
  mxfp4_reduce_pass<NT>(acc, ks, red, [&](int t, int i, float v) {
    const float up = __shfl_down_sync(0xffffffffu, v, 4);  // lane + 4: weight row n + 1, the same rows
    const int r = row(t, i), n = col(i);
    if (g % 2 == 0 && r < s1 && n < N)
      sw.a[size_t(r) * Ip + mxfp4_act_position(n / 2)] = __float2bfloat16_rn(swiglu_clamped(v, up, sw.alpha, sw.limit));
  });
  if (n0 == 0 && (threadIdx.x >> 5) % ks == 0 && Ip > I)
    for (int j = lane; j < NT * 8 * (Ip - I); j += 32) {
      const int r = base + j / (Ip - I), o = I + j % (Ip - I);
      if (r < s1) sw.a[size_t(r) * Ip + mxfp4_act_position(o)] = __float2bfloat16_rn(0.0f);
    }
}

// A decode block's warp and what it works on: its expert e and that expert's live rows [s0, s1),
// its 16 weight rows from n0 (live: any of them exist) and its split's K blocks [kb0, kb1) of
// per_split, the bias its accumulators start from (split 0 only), and this lane's 16 bytes of the
// warp's first weight tile. Found after the sync; false (uniform over the block) when the block
// has nothing to do.
struct Mxfp4WarpWork {
  int e, s0, s1, n0, per_split, kb0, kb1;
  bool live;
  float b_lo, b_hi;
  const uint8_t* wl;
};
__device__ inline bool mxfp4_warp_work(const Mxfp4ExpertsView& W, const ExpertRows& rows, int ks, VBlock blk,
                                       Mxfp4WarpWork& w) {
  const int N = W.N, K = W.K, KB = mxfp4_act_cols(K) / kBlk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  // The block's warps (8, or 4 for the decode row path's small grids): a warp's rows and K split,
  // and the order its split is summed in, do not depend on them.
  const int tile = warp / ks, split = warp % ks, tiles_per_block = int(blockDim.x >> 5) / ks;
  w.e = rows.active ? __ldcg(rows.active + blk.y) : blk.y;
  if (w.e < 0) return false;
  w.s0 = __ldcg(rows.seg + w.e);
  const int s_end = __ldcg(rows.seg + w.e + 1);
  w.s1 = rows.row_live ? w.s0 + live_rows(rows.row_live, w.s0, s_end) : s_end;
  if (w.s1 <= w.s0) return false;
  w.n0 = (blk.x * tiles_per_block + tile) * 16;
  w.per_split = (KB + ks - 1) / ks;
  w.kb0 = min(KB, split * w.per_split), w.kb1 = min(KB, w.kb0 + w.per_split);
  w.live = w.n0 < N;
  const bf16* be = W.bias ? W.bias + size_t(w.e) * N : nullptr;
  w.b_lo = (split == 0 && be && w.n0 + g < N) ? __bfloat162float(be[w.n0 + g]) : 0.0f;
  w.b_hi = (split == 0 && be && w.n0 + g + 8 < N) ? __bfloat162float(be[w.n0 + g + 8]) : 0.0f;
  // The warp's tiles, one per K block: one contiguous kilobyte each, copied as they lie.
  w.wl = W.tiles + mxfp4_tiles_bytes(N, K) * w.e + size_t(w.live ? w.n0 / 16 : 0) * KB * kMxfp4TileBytes + lane * 16;
  return true;
}

// The row path, up to 8 NT rows a pass (pass_rows: the rows the stage holds, 8 NT in the kernels;
// bench/probes/mxfp4_decode_ring.cu tries fewer): each warp streams
// its rows' codes and scales through a ring of its own (kStages, a power of two: the slot is a
// mask), so no warp waits for another's loads. The pass's activation rows (only the rows it has)
// are staged by the block in kChunks chunks of each split's K blocks (a block barrier between
// chunks): with two chunks the stage takes half the shared memory, and three blocks an SM fit at
// 8 rows. Experts with more rows take more passes, the later ones mostly from L2. An MMA column
// past the pass's rows reads the stage's last row (its result is never stored), so a stage of
// fewer rows than 8 NT leaves room for a deeper ring.
// Four stages: eight (a deeper ring at two blocks an SM instead of three) measured 0.82-0.92x at
// 8 to 128 rows an expert and no faster at one (bench/probes/mxfp4_decode_ring.cu, docs/PERF.md):
// the kernel is held by its instructions and their latency, so warps an SM matter more than bytes
// in flight.
__host__ __device__ constexpr int decode_stages(int) { return 4; }

// K blocks of a chunk, and the byte stride of a staged chunk row (64 past a multiple of 128: a
// warp's 16-byte loads are free of bank conflicts).
__host__ __device__ inline int decode_chunk_blocks(int K, int ks, int chunks) {
  const int KB = mxfp4_act_cols(K) / kBlk, per_split = (KB + ks - 1) / ks;
  return (per_split + chunks - 1) / chunks;
}
__host__ __device__ inline int decode_chunk_stride(int K, int ks, int chunks) {
  return decode_chunk_blocks(K, ks, chunks) * kBlk * 2 + 64;
}
__host__ __device__ inline size_t mxfp4_decode_smem(int NT, int K, int ks, int chunks, int stages = decode_stages(1),
                                                    int pass_rows = 0, int warps = kWarps) {
  const int rows = pass_rows > 0 ? pass_rows : 8 * NT;
  return size_t(ks) * rows * decode_chunk_stride(K, ks, chunks) + size_t(warps) * stages * kMxfp4TileBytes;
}

// kBigScales false: the matrix has no scale above 128 (Mxfp4ExpertsView::big_scales), so no
// K block takes the second multiply and its test is left out (the same MMAs on the same values).
template <int NT, class Sync, int kStages = decode_stages(NT), int kChunks = 1, bool kBigScales = true>
__device__ inline void mxfp4_decode_body(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                                         int ks, VBlock blk, const Sync& sync, int pass_rows = 8 * NT,
                                         const SwigluOut& sw = {}) {
  static_assert((kStages & (kStages - 1)) == 0, "the ring's slot is a mask");
  const int R = min(pass_rows, 8 * NT);
  __shared__ float red[kWarps * NT * 4 * 32];
  extern __shared__ __align__(16) uint8_t smem[];
  const int N = W.N, K = W.K, KB = mxfp4_act_cols(K) / kBlk, Kp = KB * kBlk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int split = warp % ks;
  // The expert list and the offsets come from the route kernel: before the wait where it has
  // finished when this kernel starts (rows.routed_early), so the first weight stages stream while
  // the kernel before ends. The activations come from the kernel before: after the wait.
  const bool early = rows.routed_early;
  if (!early) sync.wait(), sync.release();
  Mxfp4WarpWork w;
  if (!mxfp4_warp_work(W, rows, ks, blk, w)) {
    if (early) sync.wait(), sync.release();
    return;
  }
  const int s0 = w.s0, s1 = w.s1, n0 = w.n0, per_split = w.per_split, kb0 = w.kb0, kb1 = w.kb1;
  const bool live = w.live;
  const uint8_t* wl = w.wl;
  const int L = decode_chunk_blocks(K, ks, kChunks), xs = decode_chunk_stride(K, ks, kChunks);
  uint8_t* stage = smem;  // [ks][R][xs]: each split's chunk of the pass's rows
  uint8_t* ring = smem + size_t(ks) * R * xs + size_t(warp) * kStages * kMxfp4TileBytes;
  const unsigned ring_s = unsigned(__cvta_generic_to_shared(ring)) + lane * 16;
  auto issue = [&](int kb) {  // block kb into its slot; always one commit group
    if (live && kb < kb1) {
      const unsigned d = ring_s + ((kb - kb0) & (kStages - 1)) * kMxfp4TileBytes;
      const uint8_t* src = wl + size_t(kb) * kMxfp4TileBytes;
      cp_async16_shared(d, src);
      cp_async16_shared(d + 512, src + 512);
      if (lane < 4) cp_async16_shared(d + 1024, src + 1024);
    }
    cp_async_commit();
  };
  const float b_lo = w.b_lo, b_hi = w.b_hi;
  const int pieces = L * 16;  // 16-byte pieces of a staged chunk row
  size_t xoff[NT];             // this lane's staged row of each row group (the last row past R)
#pragma unroll
  for (int t = 0; t < NT; ++t) xoff[t] = (size_t(split) * R + min(t * 8 + g, R - 1)) * xs;
  for (int i = 0; i < kStages - 1; ++i) issue(kb0 + i);  // the first pass's first stages
  if (early) sync.wait(), sync.release();
  for (int base = s0; base < s1; base += R) {
    const int nrows = min(R, s1 - base);
    if (base != s0)
      for (int i = 0; i < kStages - 1; ++i) issue(kb0 + i);
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = b_lo, acc[t][2] = acc[t][3] = b_hi;
    for (int q = 0; q < kChunks; ++q) {
      if (q > 0) __syncthreads();  // every warp is done with the chunk before
      // Only the pass's rows: an MMA column (a row here) reads only its own activations, so the
      // columns past them compute from whatever the stage holds and are never stored. Piece i of
      // the pass is (split s, row rl, piece p), i = (s nrows + rl) pieces + p; a thread finds its
      // first once and steps it by the block's size with carries (dividing every i by these runtime
      // counts cost more instructions than the copy).
      const int step = int(blockDim.x), step_rows = step / pieces, step_p = step % pieces;
      int p = int(threadIdx.x) % pieces, rl = int(threadIdx.x) / pieces, s = rl / nrows;
      rl %= nrows;
      for (int i = threadIdx.x; i < ks * nrows * pieces; i += step) {
        const int sk0 = min(KB, s * per_split), sk1 = min(KB, sk0 + per_split), kb = sk0 + q * L + p / 16, r = base + rl;
        const int src = kb < sk1 ? (rows.x_rows ? __ldcg(rows.x_rows + r) : r) : -1;
        const uint4 v = src >= 0 ? __ldcg(reinterpret_cast<const uint4*>(x + size_t(src) * Kp) + kb * 16 + p % 16)
                                 : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(stage + (size_t(s) * R + rl) * xs + p * 16) = v;
        p += step_p, rl += step_rows;
        if (p >= pieces) p -= pieces, ++rl;
        while (rl >= nrows) rl -= nrows, ++s;
      }
      __syncthreads();
      const int c0 = min(kb1, kb0 + q * L), c1 = min(kb1, c0 + L);
      if (live)
#pragma unroll 2
        for (int kb = c0; kb < c1; ++kb) {
          __syncwarp();  // every lane is done with the slot the next issue overwrites
          issue(kb + kStages - 1);
          cp_async_wait<kStages - 1>();
          __syncwarp();  // lanes 0-3's scale words are visible to the warp
          const uint8_t* src = ring + ((kb - kb0) & (kStages - 1)) * kMxfp4TileBytes;
          const uint4 lo = *reinterpret_cast<const uint4*>(src + lane * 16);
          const uint4 hi = *reinterpret_cast<const uint4*>(src + 512 + lane * 16);
          const E8m0Factors flo = e8m0_factors(src[1024 + g * 4 + c]), fhi = e8m0_factors(src[1024 + (g + 8) * 4 + c]);
          bool any_big = false;
          if constexpr (kBigScales) any_big = __any_sync(0xffffffffu, flo.big || fhi.big);
          const uint8_t* xr = stage + size_t(kb - c0) * 256 + c * 16;
          mxfp4_kb_mma<NT>(lo, hi, flo, fhi, any_big, R, acc, [&](int t, int u) {
            return *reinterpret_cast<const uint4*>(xr + xoff[t] + u * 64);
          });
        }
    }
    mxfp4_store_pass<NT>(acc, ks, base, min(s1, base + R), n0, N, y, red, sw);  // the columns past R: not this pass's
    cp_async_wait<0>();
    __syncthreads();  // the stage, red and the rings are reused by the next pass
  }
}

// The wide path, up to 8 NT rows a pass (NT = 4 for rows that the row path would take in several
// passes): one ring of kStages stages for the whole block. Stage i holds each warp's weight tile
// of its i-th K block and, for each split, the pass's rows' 128 activation columns of that
// split's i-th K block (16-byte pieces XOR-swizzled by row parity: a warp's loads are free of bank
// conflicts), so the shared memory does not grow with K and two blocks an SM stream 32 rows in one
// pass over the weights. The price is a block barrier a K block: measured slower than the row
// path where that one takes a single pass (docs/PERF.md).
constexpr int kActChunkBytes = kBlk * 2;  // one row's 128 activation columns, BF16
__host__ __device__ inline int wide_stage_bytes(int NT, int ks) {
  return kWarps * kMxfp4TileBytes + ks * 8 * NT * kActChunkBytes;
}
__host__ __device__ inline size_t mxfp4_wide_smem(int NT, int ks, int stages) { return size_t(stages) * wide_stage_bytes(NT, ks); }
// The activation pieces a thread copies a stage: ks * 8 NT * 16 of them over the block's threads.
constexpr int kWideMaxPieces = 4;
__host__ __device__ constexpr bool wide_fits(int NT, int ks) { return ks * 8 * NT * 16 <= kWideMaxPieces * kWarps * 32; }

template <int NT, class Sync, int kStages>
__device__ inline void mxfp4_wide_body(const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                                       int ks, VBlock blk, const Sync& sync) {
  static_assert(kStages >= 2, "a ring of at least two stages");
  constexpr int R = 8 * NT, kThreads = kWarps * 32;
  extern __shared__ __align__(16) uint8_t smem[];
  const int N = W.N, K = W.K, KB = mxfp4_act_cols(K) / kBlk, Kp = KB * kBlk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int split = warp % ks;
  sync.wait();
  sync.release();
  Mxfp4WarpWork w;
  if (!mxfp4_warp_work(W, rows, ks, blk, w)) return;
  const int s0 = w.s0, s1 = w.s1, n0 = w.n0, per_split = w.per_split, kb0 = w.kb0, kb1 = w.kb1;
  const bool live = w.live;
  const uint8_t* wl = w.wl;
  const float b_lo = w.b_lo, b_hi = w.b_hi;
  const int stage_bytes = wide_stage_bytes(NT, ks), w_bytes = kWarps * kMxfp4TileBytes;
  const unsigned smem_s = unsigned(__cvta_generic_to_shared(smem));
  const unsigned w_slot = smem_s + warp * kMxfp4TileBytes + lane * 16;
  const int act_pieces = ks * R * 16;
  for (int base = s0; base < s1; base += R) {
    const int nrows = min(R, s1 - base);
    // This thread's activation pieces j = tid + kThreads q (split s, row r, piece p): the source
    // piece of K block 0 (-1: zeros, -2: nothing to copy) and the split's K blocks.
    int src_piece[kWideMaxPieces], kb_first[kWideMaxPieces], kb_last[kWideMaxPieces];
    unsigned dst_off[kWideMaxPieces];
#pragma unroll
    for (int q = 0; q < kWideMaxPieces; ++q) {
      const int j = int(threadIdx.x) + kThreads * q, p = j & 15, r = (j >> 4) % R, s = (j >> 4) / R;
      int src = -2;
      if (j < act_pieces && r < nrows) src = rows.x_rows ? __ldcg(rows.x_rows + base + r) : base + r;
      src_piece[q] = src >= 0 ? src * (Kp / 8) + p : src;
      kb_first[q] = min(KB, s * per_split), kb_last[q] = min(KB, kb_first[q] + per_split);
      dst_off[q] = unsigned(w_bytes + (s * R + r) * kActChunkBytes + ((p ^ ((r & 1) << 2)) * 16));
    }
    auto issue = [&](int i) {  // stage i of the pass into slot i % kStages; always one commit group
      const unsigned st = smem_s + unsigned((i % kStages) * stage_bytes);
      if (live && kb0 + i < kb1) {
        const unsigned d = w_slot + unsigned((i % kStages) * stage_bytes);
        const uint8_t* src = wl + size_t(kb0 + i) * kMxfp4TileBytes;
        cp_async16_shared(d, src);
        cp_async16_shared(d + 512, src + 512);
        if (lane < 4) cp_async16_shared(d + 1024, src + 1024);
      }
#pragma unroll
      for (int q = 0; q < kWideMaxPieces; ++q) {
        const int kb = kb_first[q] + i;
        if (src_piece[q] > -2 && kb < kb_last[q]) {
          const uint4* src = reinterpret_cast<const uint4*>(x) + (src_piece[q] >= 0 ? size_t(src_piece[q]) + size_t(kb) * 16 : 0);
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(st + dst_off[q]), "l"(src),
                       "r"(src_piece[q] >= 0 ? 16 : 0)
                       : "memory");
        }
      }
      cp_async_commit();
    };
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = b_lo, acc[t][2] = acc[t][3] = b_hi;
    for (int i = 0; i < kStages - 1; ++i) issue(i);
#pragma unroll 1
    for (int i = 0; i < per_split; ++i) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // stage i has landed for every thread; every warp is done with stage i - 1
      issue(i + kStages - 1);
      if (live && kb0 + i < kb1) {
        const uint8_t* st = smem + (i % kStages) * stage_bytes;
        const uint8_t* src = st + warp * kMxfp4TileBytes;
        const uint4 lo = *reinterpret_cast<const uint4*>(src + lane * 16);
        const uint4 hi = *reinterpret_cast<const uint4*>(src + 512 + lane * 16);
        const E8m0Factors flo = e8m0_factors(src[1024 + g * 4 + c]), fhi = e8m0_factors(src[1024 + (g + 8) * 4 + c]);
        const bool any_big = __any_sync(0xffffffffu, flo.big || fhi.big);
        const uint8_t* act = st + w_bytes + split * R * kActChunkBytes;
        mxfp4_kb_mma<NT>(lo, hi, flo, fhi, any_big, nrows, acc, [&](int t, int u) {
          const int row = t * 8 + g;
          return *reinterpret_cast<const uint4*>(act + row * kActChunkBytes + (((4 * u + c) ^ ((row & 1) << 2)) * 16));
        });
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: the split reduction uses it
    mxfp4_store_pass<NT>(acc, ks, base, s1, n0, N, y, reinterpret_cast<float*>(smem));
    __syncthreads();  // the ring is reused by the next pass
  }
}

// Activations into the layout: one thread per BF16 pair (positions 2i, 2i + 1 hold columns k, k + 4).
template <class Sync>
__device__ inline void to_bf16_layout_body(const float* x, int T, int K, bf16* out, const int32_t* in_rows, VBlock blk,
                                           const Sync& sync) {
  sync.wait();
  sync.release();
  const int Kp = mxfp4_act_cols(K), pairs = Kp / 2;
  const size_t i = size_t(blk.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(T) * pairs) return;
  const int t = int(i / pairs), p = int(i % pairs) * 2, k = mxfp4_act_column(p);
  const int src = in_rows ? __ldcg(in_rows + t) : t;
  const float* row = x + size_t(src < 0 ? 0 : src) * K;
  const bool ok = src >= 0;
  const float v0 = ok && k < K ? __ldcg(row + k) : 0.0f, v1 = ok && k + 4 < K ? __ldcg(row + k + 4) : 0.0f;
  reinterpret_cast<__nv_bfloat162*>(out + size_t(t) * Kp)[p / 2] = __floats2bfloat162_rn(v0, v1);
}

// The experts' clamped SwiGLU (moe_swiglu_bf16): a thread per BF16 pair of the output row's
// activation layout; rows r < *rows_end of t [.][2I] (+ the row's expert bias when given).
template <class Sync>
__device__ inline void swiglu_bf16_body(const float* t, const int32_t* rows_end, int rows_max, int I, float alpha,
                                        float limit, bf16* a, const bf16* bias, const int32_t* seg, int experts,
                                        VBlock blk, const Sync& sync) {
  sync.wait();
  sync.release();
  __shared__ int seg_sh[kMaxExperts + 1];  // with a bias: the segments, searched per row
  if (bias) {
    for (int e = threadIdx.x; e <= experts; e += blockDim.x) seg_sh[e] = __ldcg(seg + e);
    __syncthreads();
  }
  const int Ip = mxfp4_act_cols(I), pairs = Ip / 2;
  const size_t i = size_t(blk.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows_max) * pairs) return;
  const int r = int(i / pairs), p = int(i % pairs) * 2, k = mxfp4_act_column(p);
  if (r >= __ldcg(rows_end)) return;
  const float* row = t + size_t(r) * 2 * I;
  const bf16* b = nullptr;
  if (bias) {  // the row's expert: the last e with seg[e] <= r
    int lo = 0, hi = experts;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (seg_sh[mid] <= r) lo = mid;
      else hi = mid;
    }
    b = bias + size_t(lo) * 2 * I;
  }
  float v[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int col = k + 4 * h;
    if (col < I) {
      float gt = __ldcg(row + 2 * col), up = __ldcg(row + 2 * col + 1);
      if (b) gt += __bfloat162float(b[2 * col]), up += __bfloat162float(b[2 * col + 1]);
      v[h] = swiglu_clamped(gt, up, alpha, limit);
    }
  }
  reinterpret_cast<__nv_bfloat162*>(a + size_t(r) * Ip)[p / 2] = __floats2bfloat162_rn(v[0], v[1]);
}

// The K-splits of both MXFP4 paths: the fewest that give every SM a block of the decode path
// when 4 experts have rows (a batch-1 step of gpt-oss, top-4), never more than the K blocks. They
// depend on the shape only, and both paths sum in these splits, so a row's result does not depend
// on the batch.
inline int mxfp4_k_splits(int N, int K, int sms) {
  const int row_tiles = N / 16, KB = mxfp4_act_cols(K) / kBlk;
  constexpr int kTopK = 4;
  int ks = 1;
  while (ks < kWarps && ks * 2 <= KB && size_t(row_tiles * ks + kWarps - 1) / kWarps * kTopK < size_t(sms)) ks *= 2;
  return ks;
}

}  // namespace osprey::cuda
