// The tensor-core decode attention's body (attention_decode.cu launches it as its own kernel; the
// persistent decode kernel runs it as a phase): internal to kernels/cuda.
#pragma once
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/phase_sync.cuh"

namespace osprey::cuda {

// The partial state of one (row, head, split): D accumulator values, the running max, the sum.
__device__ inline float* partial_at(float* scratch, int r, int h, int heads, int splits, int sp, int D) {
  return scratch + ((size_t(r) * heads + h) * splits + sp) * (D + 2);
}

// Tensor-core decode attention, d = 64: a block of W warps per (KV head, row, split), warp w
// taking every W-th tile of the split, the W states merged in shared memory at the end (one
// partial per block). The query heads of the KV head are the rows of m16n8k16 BF16 MMAs (up to
// 16); keys come in 64-key tiles (one page),
// straight from global memory into the B fragments. Q and P enter as hi + lo BF16 pairs (two MMAs
// each), so scores and weights keep ~16 bits and the result stays close to fp32 arithmetic; over
// the FP16 cache (kF16) as hi + lo FP16 pairs (~22 bits), the MMAs FP16.
// Because a dot product may visit dimensions in any order as long as both operands agree, each
// thread loads 16 contiguous bytes of a key (dims 32j + 8c .. + 7 feed k-steps 2j, 2j + 1) and of
// a value row (dims 8g .. 8g + 7 are the output columns g of the 8 n-tiles), with Q and the
// output permuted to match. Splits cover whole tiles; the sink enters split 0 only.
// kFp8 (the FP8 cache, page tables): the same fragments as 8 E4M3 codes (8 bytes) each, made FP16
// at use (one conversion a pair, exact), and the MMAs FP16 with Q and P as hi + lo FP16 pairs, as
// over the FP16 cache. A lane also loads the row exponents of keys 2 lane and 2 lane + 1 of the
// tile, and the scores and the weights of the keys it holds are scaled by them: a key's 2^e_k on
// its score; its value row's 2^e_v on its weight P before P meets V, relative to the largest valid
// e_v of the tile (e_ref, in whose units acc is kept and rescaled from tile to tile: P 2^(e_v -
// e_ref) is at most 1, and in FP16's normal range down to 2^-14 for the tile's largest rows), the
// sum l taking P unscaled. Powers of two: the same values as the codes times 2^e would give.
constexpr int kDecKeys = 64;
static_assert(kDecKeys == kPage, "a decode tile is one page");

// One warp: the merge of the splits of row r over output columns [128 kb, 128 kb + 128) (4 per
// lane, of one head), written in fp32 to out (when given) and/or quantized in 1x128 (when q is).
// Partials read through L2 (.cg): in the attention kernel's tail, other blocks wrote them.
__device__ inline void merge_splits_warp(const float* scratch, int r, int kb, int heads, int D, int splits, float* out,
                                  const Quantized1x128& quant) {
  const int K = heads * D, lane = threadIdx.x & 31, col0 = kb * 128 + lane * 4;
  float v[4] = {};
  if (col0 < K) {
    const int h = col0 / D, d0 = col0 % D;
    const float* sc = scratch + (size_t(r) * heads + h) * splits * (D + 2);
    float M = -FLT_MAX;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) M = fmaxf(M, __ldcg(sc + s * (D + 2) + D));
    float den = 0, o[4] = {};
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const float* p = sc + s * (D + 2);
      const float ps = __ldcg(p + D + 1);
      const float f = merge_weight(__ldcg(p + D), ps, M);
      den += ps * f;
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] += __ldcg(p + d0 + i) * f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = o[i] / den;
    if (out) *reinterpret_cast<float4*>(out + size_t(r) * K + col0) = make_float4(v[0], v[1], v[2], v[3]);
  }
  if (!quant.q) return;
  const float scl = warp_quantize_block128(v, kb * 128, K, quant.q + size_t(r) * K);
  if (lane == 0) quant.s[size_t(kb) * quant.ld + r] = scl;
}

// The arguments of one decode attention launch.
struct DecodeAttentionArgs {
  KvLayerView L;
  const float* q;
  const bf16* sinks;
  const int32_t *slots, *positions;
  int heads, window;
  float scale_log2;
  int splits;
  float* scratch;
  int32_t* merge_count;
  float* out;
  Quantized1x128 quant;
};

// kStaged (the BF16 cache; the persistent kernel at two blocks an SM, 128 registers): the same
// MMAs in the same order on every accumulator (the same bits), with a warp's tile held where
// registers are not needed: its K and its value rows 32-63 are copied (cp.async) into the warp's
// shared memory, each lane's 16-byte pieces in slots only that lane reads back, and Q's hi + lo
// fragments into the block's (every warp of a block has the same Q); value rows 0-31 stay in
// registers. The shared memory is decode_tc_smem(W, true); the warps' states for their merge go
// into their own staging slices.
constexpr int kStagedWarpBytes = 12 * 1024;  // K [8 n][2 j][32 lanes] x 16 B, then V rows 32-63 [2][4][32] x 16 B
constexpr int kStagedQBytes = 4 * 1024;      // Q [hi, lo][4 ks][32 lanes] x 16 B
constexpr int kDecodeStateFloats = 36;       // a lane's state for the warps' merge: m[2], l[2], acc[8][4]
// The body's dynamic shared memory with W warps: the staged slices and Q, or (W > 1) the warps'
// states for their merge.
__host__ __device__ constexpr int decode_tc_smem(int warps, bool staged) {
  return staged ? warps * kStagedWarpBytes + kStagedQBytes : warps > 1 ? warps * 32 * kDecodeStateFloats * 4 : 0;
}

template <bool kEarlyKv, KvFormat kKv = KvFormat::Bf16, bool kStaged = false, class Sync>
__device__ inline void paged_decode_tc_body(const DecodeAttentionArgs& args, VBlock blk, const Sync& sync) {
  static_assert(!kStaged || (kKv == KvFormat::Bf16 && !kEarlyKv), "the staged tiles: the BF16 cache, loaded after the wait");
  constexpr bool kFp8 = kKv == KvFormat::Fp8, kF16 = kKv == KvFormat::F16;
  constexpr bool kMmaF16 = kF16 || kFp8;  // the MMAs' 16-bit type: FP16 over the FP16 and FP8 caches
  const KvLayerView& L = args.L;
  const float* q = args.q;
  const bf16* sinks = args.sinks;
  const int32_t *slots = args.slots, *positions = args.positions;
  const int heads = args.heads, window = args.window, splits = args.splits;
  const float scale_log2 = args.scale_log2;
  float* scratch = args.scratch;
  int32_t* merge_count = args.merge_count;
  float* out = args.out;
  const Quantized1x128& quant = args.quant;
  extern __shared__ __align__(16) float states[];  // W > 1: [W][32 lanes][36] = m[2], l[2], acc[8][4]
  constexpr int D = 64, kState = kDecodeStateFloats;
  uint8_t* const stage = reinterpret_cast<uint8_t*>(states);  // kStaged: [W][kStagedWarpBytes], then Q
  const int g_kv = blk.x, r = blk.y, sp = blk.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5, g = lane >> 2, c = lane & 3;
  const int group = heads / L.kv_heads, kvn = L.kv_heads * D;
  // kStaged: this lane's slots in its warp's slice (K, then V rows 32-63 from byte 8192) and in the
  // block's Q region.
  uint8_t* const lane_slots = stage + size_t(warp) * kStagedWarpBytes + lane * 16;
  uint4* const q_slots = reinterpret_cast<uint4*>(stage + size_t(W) * kStagedWarpBytes) + lane;
  const int slot = slots[r], pos = positions[r];
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int tile_lo = first / kDecKeys, tile_hi = pos / kDecKeys + 1;
  const int per = (tile_hi - tile_lo + splits - 1) / splits;
  const int ta = tile_lo + sp * per, tb = min(tile_hi, ta + per);
  const bool ok_r[2] = {g < group, g + 8 < group};
  const int head_r[2] = {g_kv * group + g, g_kv * group + g + 8};
  auto valid = [&](int key) { return key >= first && key <= pos; };

  // Tile t's keys and values straight into MMA fragments, one memory round trip.
  using Frag = std::conditional_t<kFp8, uint2, uint4>;  // 8 values: E4M3 codes, or BF16 or FP16
  // kFp8: two tiles in flight a warp (their fragments take the registers one BF16 tile's do), so
  // that a warp has as many bytes in flight as with BF16 while it converts and multiplies.
  constexpr int kBuf = kFp8 ? 2 : 1;
  Frag kf[kBuf][8][2], vf[kBuf][4][4];
  uint32_t ex[kBuf] = {};  // kFp8: exponents of keys 2 lane, 2 lane + 1: K in bytes 0, 1, V in bytes 2, 3
  auto load_frag = [&](const void* p, bool ok) -> Frag {
    if constexpr (kFp8) return ok ? __ldcg(reinterpret_cast<const uint2*>(p)) : make_uint2(0, 0);
    else return ok ? __ldcg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
  };
  auto load_tile = [&]<int B>(int t) {
    const int j0 = t * kDecKeys;
    const size_t page_row = L.page_table ? size_t(__ldcg(L.page_table + size_t(slot) * L.max_pages + t)) * kPage : 0;
    auto row_of = [&](int key) -> size_t {
      return L.page_table ? page_row + (key - j0) : size_t(slot) * L.ring + (key % L.ring);
    };
    // The BF16 loads keep their own form (addresses under the validity test): written as the
    // FP8 ones are, the BF16 kernel compiled to other code (233 registers against 254).
    if constexpr (kStaged) {  // K and V rows 32-63 into the warp's slots, V rows 0-31 into registers
      uint8_t* const ws = lane_slots;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int key = j0 + n * 8 + g;
        const uint16_t* kp = L.k + row_of(key) * kvn + size_t(g_kv) * D + 8 * c;
#pragma unroll
        for (int j = 0; j < 2; ++j) cp_async16(ws + (n * 2 + j) * 512, kp + 32 * j, valid(key));
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = j0 + 16 * kk + 2 * c + (i & 1) + (i >> 1) * 8;
          const uint16_t* vp = L.v + row_of(key) * kvn + size_t(g_kv) * D + 8 * g;
          if (kk >= 2) cp_async16(ws + 8192 + ((kk - 2) * 4 + i) * 512, vp, valid(key));
          else vf[B][kk][i] = valid(key) ? __ldcg(reinterpret_cast<const uint4*>(vp)) : make_uint4(0, 0, 0, 0);
        }
      cp_async_commit();
    } else if constexpr (kFp8) {
      auto at = [&](bool is_v, int key, int dim) -> const void* {
        return (is_v ? L.v8 : L.k8) + row_of(key) * kvn + size_t(g_kv) * D + dim;
      };
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int key = j0 + n * 8 + g;
#pragma unroll
        for (int j = 0; j < 2; ++j) kf[B][n][j] = load_frag(at(false, key, 8 * c + 32 * j), valid(key));
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = j0 + 16 * kk + 2 * c + (i & 1) + (i >> 1) * 8;
          vf[B][kk][i] = load_frag(at(true, key, 8 * g), valid(key));
        }
    } else {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int key = j0 + n * 8 + g;
        const uint16_t* kp = L.k + row_of(key) * kvn + size_t(g_kv) * D + 8 * c;
#pragma unroll
        for (int j = 0; j < 2; ++j)
          kf[B][n][j] = valid(key) ? __ldcg(reinterpret_cast<const uint4*>(kp + 32 * j)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = j0 + 16 * kk + 2 * c + (i & 1) + (i >> 1) * 8;
          vf[B][kk][i] = valid(key) ? __ldcg(reinterpret_cast<const uint4*>(L.v + row_of(key) * kvn + size_t(g_kv) * D + 8 * g))
                                    : make_uint4(0, 0, 0, 0);
        }
    }
    if constexpr (kFp8) {  // page tables only (the launcher's condition): a tile is one page
      const size_t e0 = kv_exp_index(page_row, g_kv, L.kv_heads) + 2 * lane;
      ex[B] = uint32_t(__ldcg(reinterpret_cast<const uint16_t*>(L.k_exp + e0))) |
           (uint32_t(__ldcg(reinterpret_cast<const uint16_t*>(L.v_exp + e0))) << 16);
    }
  };
  auto to_mma = [](const Frag& f) -> uint4 {  // E4M3 codes made FP16; 16-bit values as they are
    if constexpr (kFp8) return e4m3x8_to_f16x8(f);
    else return f;
  };
  // kEarlyKv (decode rows: the kernel before wrote only each row's own newest position): a warp's
  // first tile, when it is not the tile of that position, holds keys of earlier steps only and is
  // loaded before the wait, while the kernels before this one finish (slots, positions and page
  // tables were copied before the step). A separate instantiation: it costs registers (255 and a
  // spill against 243) that the large batches, with many tiles per warp, do not get back.
  const int t_first = ta + warp;
  const bool early = kEarlyKv && t_first < tb && t_first < tile_hi - 1;
  if (early) load_tile.template operator()<0>(t_first);
  sync.wait();  // q and the newest K/V come from the kernel before: coherent (.cg) loads only
  sync.release();

  // Q * scale_log2 (base-2 scores) as A fragments: k-step ks = 2j + h holds dims 32j + 8c + 4h + {0,1} (a0/a1) and
  // + {2,3} (a2/a3); rows g (a0, a2) and g + 8 (a1, a3).
  uint32_t qh[4][4], ql[4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float v[8] = {};
      if (ok_r[i]) {
        const float* qp = q + (size_t(r) * heads + head_r[i]) * D + 32 * j + 8 * c;
        const float4 a = *reinterpret_cast<const float4*>(qp), b = *reinterpret_cast<const float4*>(qp + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        split_16<kMmaF16>(v[4 * h] * scale_log2, v[4 * h + 1] * scale_log2, qh[2 * j + h][i], ql[2 * j + h][i]);
        split_16<kMmaF16>(v[4 * h + 2] * scale_log2, v[4 * h + 3] * scale_log2, qh[2 * j + h][2 + i], ql[2 * j + h][2 + i]);
      }
    }
  if constexpr (kStaged) {  // warp 0's Q fragments (every warp's are the same) into the block's Q slots
    uint4* const qs = q_slots;
    if (warp == 0)
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        qs[ks * 32] = make_uint4(qh[ks][0], qh[ks][1], qh[ks][2], qh[ks][3]);
        qs[(4 + ks) * 32] = make_uint4(ql[ks][0], ql[ks][1], ql[ks][2], ql[ks][3]);
      }
    __syncthreads();
  }
  float m[2], l[2], acc[8][4] = {};
  // kFp8: acc is in units of 2^e_ref (the largest valid e_v of the last tile, at least e_max - 64,
  // e_max the largest of all tiles so far).
  int e_ref = kv_fp8::kExpMin, e_max = kv_fp8::kExpMin;
  const bool sink_here = sp == 0 && warp == 0;  // the sink enters one state of all
#pragma unroll
  for (int i = 0; i < 2; ++i) seed_softmax_with_sink(m[i], l[i], sinks, head_r[i], sink_here && ok_r[i], c == 0);

  // One tile of the online softmax, from buffer B.
  auto tile = [&]<int B>(int t) {
    const int j0 = t * kDecKeys;
    // S = (Q K^T) * scale_log2: rows g (s[n][0..1]) and g + 8 (s[n][2..3]), keys j0 + 8n + 2c + {0,1}.
    float s[8][4];
    if constexpr (kStaged) {  // per s[n] the MMAs of the loop below, in its order: k-steps 0-3, hi then lo
      const uint8_t* const ws = lane_slots;
      const uint4* const qs = q_slots;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4 h0 = qs[(2 * j) * 32], l0 = qs[(4 + 2 * j) * 32], h1 = qs[(2 * j + 1) * 32], l1 = qs[(5 + 2 * j) * 32];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const uint4 w = *reinterpret_cast<const uint4*>(ws + (n * 2 + j) * 512);
          mma_16816<kMmaF16>(s[n], h0.x, h0.y, h0.z, h0.w, w.x, w.y);
          mma_16816<kMmaF16>(s[n], l0.x, l0.y, l0.z, l0.w, w.x, w.y);
          mma_16816<kMmaF16>(s[n], h1.x, h1.y, h1.z, h1.w, w.z, w.w);
          mma_16816<kMmaF16>(s[n], l1.x, l1.y, l1.z, l1.w, w.z, w.w);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < 8 && !kStaged; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
      if constexpr (kFp8) {  // each fragment made BF16 once, for its two k-steps
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint4 w = to_mma(kf[B][n][j]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int ks = 2 * j + h;
            const uint32_t b0 = h ? w.z : w.x, b1 = h ? w.w : w.y;
            mma_16816<kMmaF16>(s[n], qh[ks][0], qh[ks][1], qh[ks][2], qh[ks][3], b0, b1);
            mma_16816<kMmaF16>(s[n], ql[ks][0], ql[ks][1], ql[ks][2], ql[ks][3], b0, b1);
          }
        }
      } else {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint4& w = kf[B][n][ks >> 1];
          const uint32_t b0 = (ks & 1) ? w.z : w.x, b1 = (ks & 1) ? w.w : w.y;
          mma_16816<kMmaF16>(s[n], qh[ks][0], qh[ks][1], qh[ks][2], qh[ks][3], b0, b1);
          mma_16816<kMmaF16>(s[n], ql[ks][0], ql[ks][1], ql[ks][2], ql[ks][3], b0, b1);
        }
      }
    }
    // kFp8: the exponents of this thread's keys 8n + 2c + {0, 1} (lane 4n + c loaded them).
    uint32_t exn[8] = {};
    if constexpr (kFp8) {
#pragma unroll
      for (int n = 0; n < 8; ++n) exn[n] = __shfl_sync(0xffffffffu, ex[B], 4 * n + c);
    }
    auto byte_exp = [](uint32_t word, int i) { return int(int8_t(word >> (8 * i))); };  // byte i, signed
    auto exp_of = [&](int n, int e, bool is_v) { return byte_exp(exn[n], (e & 1) + (is_v ? 2 : 0)); };
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kFp8) s[n][e] *= kv_pow2(exp_of(n, e, false));
        if (!valid(j0 + n * 8 + 2 * c + (e & 1))) s[n][e] = -INFINITY;
      }
    online_softmax_tile(s, m, l, acc, 1.0f);
    if constexpr (kFp8) {  // each weight times 2^(e_v - e_ref), e_ref the tile's largest valid e_v
      int e_tile = -128;   // this lane's keys 2 lane, 2 lane + 1 of the tile (bytes 2, 3 of ex)
#pragma unroll
      for (int b = 0; b < 2; ++b)
        if (valid(j0 + 2 * lane + b)) e_tile = max(e_tile, byte_exp(ex[B], 2 + b));
      // Units at most 2^64 below the largest so far (acc, at most keys x 448 x 2^64 in them, stays
      // finite); up without bound (exact, or underflowing what the new units dwarf).
      e_tile = max(__reduce_max_sync(0xffffffffu, e_tile), e_max - 64);
      e_max = max(e_max, e_tile);
      if (e_tile != e_ref) {  // warp-uniform
        const int d = e_ref - e_tile;
        const float f = d < -126 ? 0.0f : kv_pow2(d), both[2] = {f, f};
        rescale_rows(acc, both);
        e_ref = e_tile;
      }
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= kv_pow2(min(0, max(-126, exp_of(n, e, true) - e_ref)));
    }
    // O += P V: P's A fragments straight from S (keys 16kk + 2c (+1) and + 8), hi + lo; P <= 1
    // (exp2(s - m), times 2^(e_v - e_ref) <= 1 over the FP8 cache), so FP16 pairs need no clip.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t ph[4], pl[4];
      split_16<kMmaF16, false>(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_16<kMmaF16, false>(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_16<kMmaF16, false>(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_16<kMmaF16, false>(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
      auto v_frag = [&](int i) -> uint4 {  // kStaged: value rows 32-63 from the warp's slots
        if constexpr (kStaged) {
          if (kk >= 2)
            return *reinterpret_cast<const uint4*>(lane_slots + 8192 + ((kk - 2) * 4 + i) * 512);
        }
        return to_mma(vf[B][kk][i]);
      };
      const uint4 w0 = v_frag(0), w1 = v_frag(1), w2 = v_frag(2), w3 = v_frag(3);
      const uint32_t* v0 = reinterpret_cast<const uint32_t*>(&w0);
      const uint32_t* v1 = reinterpret_cast<const uint32_t*>(&w1);
      const uint32_t* v2 = reinterpret_cast<const uint32_t*>(&w2);
      const uint32_t* v3 = reinterpret_cast<const uint32_t*>(&w3);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {  // output column g of n-tile nt = dim 8g + nt
        const uint32_t sel = (nt & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(v0[nt >> 1], v1[nt >> 1], sel), b1 = __byte_perm(v2[nt >> 1], v3[nt >> 1], sel);
        mma_16816<kMmaF16>(acc[nt], ph[0], ph[1], ph[2], ph[3], b0, b1);
        mma_16816<kMmaF16>(acc[nt], pl[0], pl[1], pl[2], pl[3], b0, b1);
      }
    }
  };
  for (int t = t_first; t < tb; t += kBuf * W) {
    if (t != t_first || !early) load_tile.template operator()<0>(t);
    if constexpr (kBuf == 2) {
      if (t + W < tb) load_tile.template operator()<1>(t + W);
    }
    if constexpr (kStaged) cp_async_wait<0>();  // a lane reads back only the slots it filled
    tile.template operator()<0>(t);
    if constexpr (kBuf == 2) {
      if (t + W < tb) tile.template operator()<1>(t + W);
    }
  }
  if constexpr (kFp8) {  // acc back to plain units before the merges (|e_ref| <= 100)
    const float f = kv_pow2(e_ref), both[2] = {f, f};
    rescale_rows(acc, both);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  // Warp w's lane's state for the merge (kStaged: in the warp's staging slice, free now).
  auto state_at = [&](int w) -> float* {
    if constexpr (kStaged) return reinterpret_cast<float*>(stage + size_t(w) * kStagedWarpBytes) + lane * kState;
    return states + (size_t(w) * 32 + lane) * kState;
  };
  if (W > 1) {  // merge the warps' states into warp 0's
    if constexpr (kStaged) __syncwarp();  // the warp's lanes are done with their slots
    float* st = state_at(warp);
#pragma unroll
    for (int i = 0; i < 2; ++i) st[i] = m[i], st[2 + i] = l[i];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[4 + nt * 4 + e] = acc[nt][e];
    __syncthreads();
  }
  if (warp == 0 && W > 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float M = m[i];
      for (int w = 1; w < W; ++w) M = fmaxf(M, state_at(w)[i]);
      const float f0 = exp2_approx(m[i] - M);
      l[i] *= f0;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) acc[nt][2 * i] *= f0, acc[nt][2 * i + 1] *= f0;
      for (int w = 1; w < W; ++w) {
        const float* o = state_at(w);
        const float f = exp2_approx(o[i] - M);
        l[i] += o[2 + i] * f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) acc[nt][2 * i] += o[4 + nt * 4 + 2 * i] * f, acc[nt][2 * i + 1] += o[4 + nt * 4 + 2 * i + 1] * f;
      }
      m[i] = M;
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!ok_r[i] || warp != 0) continue;
    float* sc = partial_at(scratch, r, head_r[i], heads, splits, sp, D);
    // acc[nt][2i] is output column 2c of n-tile nt = dim 16c + nt; acc[nt][2i + 1]: dim 16c + 8 + nt.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) sc[16 * c + nt] = acc[nt][2 * i], sc[16 * c + 8 + nt] = acc[nt][2 * i + 1];
    if (c == 0) sc[D] = m[i], sc[D + 1] = l[i];
  }
  if (!merge_count) return;
  // The merge in the tail: the block that writes the last split of (row, KV head) merges that KV
  // head's query heads (whole 128-column blocks: group * D % 128 == 0), its warps one block each;
  // the arrival counter goes back to zero for the next use.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* cnt = merge_count + size_t(r) * L.kv_heads + g_kv;
    last = atomicAdd(cnt, 1) == splits - 1;
    if (last) *cnt = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int kb0 = g_kv * group * D / 128, kb1 = (g_kv + 1) * group * D / 128;
  for (int kb = kb0 + warp; kb < kb1; kb += W) merge_splits_warp(scratch, r, kb, heads, D, splits, out, quant);
}

// Warps a decode step's attention aims to have in flight over all (row, KV head) pairs (enough to
// keep the memory system busy), and the most warps one split takes.
constexpr int kDecodeWarps = 1024, kMaxWarpsPerSplit = 8;

}  // namespace osprey::cuda
