// The grouped FP8 GEMM of a prompt chunk's experts (moe_gemm_fp8.cuh), DeepGEMM's contiguous
// layout on Hopper: a persistent grid of one block an SM walks the (expert row tile, column tile)
// pairs, column tiles inner. A tile is 128 rows by 256 columns. Per block, one producer thread
// streams each K block's 128x128 boxes of the rows and of the weights with TMA (128-byte swizzle)
// and their scales with bulk copies into a ring of four stages; its warpgroup hands its registers
// to the two consumer warpgroups (setmaxnreg). Consumer c takes rows 64c .. 64c + 63: per K block
// and per 128-column half, four wgmma m64n128k32 into fp32 block sums, folded into the
// accumulators times the row's and the weights' scales (the block-scaled promotion, the same
// operations in the same order as cuBLASLt's: the outputs are bit-identical to its, probe call 5).
//
// Tiles: each expert's rows are cut into tiles of 128 from its first row; a tile past the
// expert's end reads the next expert's rows (or TMA's zeros past the buffer) and does not store
// them. K = 2,880 is 22.5 blocks of 128: the last box reads 64 columns and zeros past K (in the
// rows and in the weights), and the last scale covers it as the checkpoint's does. N = 2,880 (the
// second GEMM) ends in a quarter tile that reads the next expert's weight rows (or zeros) and
// stores only its own columns. The row tiles' starts are a prefix sum over the experts that every
// block computes from seg at its start: no host round trip.
//
// The first GEMM of a prompt chunk's experts takes the SwiGLU epilogue (_swiglu): no fp32 outputs,
// the quantized SwiGLU of each tile written by the consumers that computed it (swiglu_epilogue).
#include "kernels/cuda/moe_gemm_fp8.cuh"

#include <string>
#include <type_traits>

#include "formats/fp8.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/tma.cuh"

namespace osprey::cuda {
namespace {

constexpr int kBM = 128, kBK = 128, kThreads = 384, kMaxExperts = 256;
constexpr int kConsumerWarps = 8;

// What the model runs (bench/probes/grouped_fp8_gemm.cu, call 5 of the twentieth session: 256
// columns with 4 stages beat 128 columns with 4 or 6 stages, and 3 stages, at 8,192 tokens over
// 32 and 128 experts).
constexpr int kTileCols = 256, kTileStages = 4;
constexpr int kTileShare = 0;  // Share: kShareNone

// The SwiGLU epilogue's staging (kSwiglu): each consumer warpgroup's 64 rows of 128 E4M3 codes,
// rows 144 bytes apart (16-byte aligned rows whose 8 rows of one store instruction fall in 8
// different banks), and the tile's 128 (gate, up) bias pairs.
constexpr int kCodeStride = 144;
template <bool kSwiglu>
struct EpilogueSmem {
  alignas(16) uint8_t codes[2][64][kCodeStride];
  uint32_t bias[2][128];
};
template <>
struct EpilogueSmem<false> {};

// A tile of 128 rows by kHalves x 128 columns, a ring of kStages_ K blocks.
template <int kHalves, int kStages_, bool kSwiglu = false>
struct Ring {
  static constexpr int kBN = 128 * kHalves, kStages = kStages_;
  struct Smem {
    uint8_t a[kStages][kBM * kBK];  // rows' codes, swizzled (1,024-byte aligned)
    uint8_t b[kStages][kBN * kBK];  // weights' codes, swizzled
    float as[kStages][kBM];         // the rows' scales of the stage's K block
    float bs[kStages][kBN];         // the weights' column scales (Row1x128)
    uint64_t full[kStages], empty[kStages];
    int seg[kMaxExperts + 1];
    int tile_start[kMaxExperts + 1];  // first row tile of each expert; [experts]: the total
    EpilogueSmem<kSwiglu> epi;
  };
  static constexpr size_t kSmemBytes = sizeof(Smem) + 1024;
};

struct Args {
  const int32_t* seg;
  int experts;
  const float* xs;
  const float* ws;
  size_t ws_per;
  int ws_ld;  // Block128x128: scales of a block row
  float* y;
  int N, KB, NB;
  // The SwiGLU epilogue (GroupedFp8Swiglu; unset for the plain GEMM): bias pairs, clamp, and the
  // 1x128 quantization of the I = N / 2 outputs into q [rows][I] and the scales by expert qs.
  const bf16* b1 = nullptr;
  float alpha = 0.0f, limit = 0.0f;
  uint8_t* q = nullptr;
  float* qs = nullptr;
  int I = 0, KBI = 0;
};

// A tile of the walk: expert e's row tile mb, column tile nb.
struct Tile {
  int e, mb, nb;
};
// Row tile mt of the walk (every expert's row tiles in order), column tile nb.
template <class S>
__device__ inline Tile tile_of(const S& s, int experts, int mt, int nb) {
  int lo = 0, hi = experts - 1;  // the last expert whose first tile is at most mt (the one that owns it)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (s.tile_start[mid] <= mt) lo = mid;
    else hi = mid - 1;
  }
  return {lo, mt - s.tile_start[lo], nb};
}

// How the two blocks of a cluster share a tile's operands: not at all (no clusters), the row tile
// (each loads half of the rows into both, TMA multicast; they take adjacent column tiles), or the
// weight tile (each loads one 128-row half of the weights into both; they take adjacent row tiles
// of one expert).
enum Share { kShareNone = 0, kShareRows = 1, kShareWeights = 2 };

// The walk of one block: units u = first, first + step, ...; a unit is (row tile, column tile),
// or for pairs (row tile, column tile pair) with kShareRows, (row tile pair, column tile) with
// kShareWeights (row tile starts then count pairs). This block takes its rank's tile of the pair;
// past the end (NB, or the expert's row tiles) it loads its share for its peer and stores nothing.
template <int kShare>
struct Walk {
  int first, step, per_row, rank;
  __device__ Walk(int NB, uint32_t r) {
    rank = int(r);
    first = kShare ? blockIdx.x / 2 : blockIdx.x;
    step = kShare ? gridDim.x / 2 : gridDim.x;
    per_row = kShare == kShareRows ? (NB + 1) / 2 : NB;
  }
  template <class S>
  __device__ Tile tile(const S& s, int experts, int u) const {
    const int mt = u / per_row, c = u - mt * per_row;
    Tile t = tile_of(s, experts, mt, kShare == kShareRows ? 2 * c + rank : c);
    if (kShare == kShareWeights) t.mb = 2 * t.mb + rank;
    return t;
  }
};

// The SwiGLU epilogue of consumer warpgroup c's 64 rows of a 256-column tile (one 1x128 block of
// 128 outputs a row), what moe_swiglu_quantize makes of the fp32 outputs, bit for bit: the clamped
// SwiGLU of each (gate, up) column pair plus the expert's bias pair (staged in shared memory when
// the tile began: no global load here), the row's largest magnitude over the quad of lanes that
// holds its 128 outputs, the E4M3 codes (of v / sc by fp8::scaled_quotient: the division's codes
// in three operations) staged by rows in shared memory and stored 16 bytes a lane (a row's 128
// bytes by 8 lanes), the scale by the quad's first lane. No branch an output: the epilogue runs
// while the tensor cores wait (ncu, session 24: the divisions' branches and checks had made the
// fused GEMM slower than the GEMM then the SwiGLU kernel). acc: rows rl, rl + 8 (h2) at columns
// 128h + 8j + cl + {0, 1}; braw: this thread's bias pair (tile column pair t).
template <class S>
__device__ inline void swiglu_epilogue(S& s, const Args& g, const Tile& T, const float (&acc)[128], uint32_t braw,
                                       int c, int rows, int r0, int seg_e, int len) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, qd = lane % 4, n0 = T.nb * 256;
  // The previous tile's reads of the staging are done: its bias reads came before its last barrier
  // (below) and its code reads before this barrier.
  s.epi.bias[c][t] = braw;
  sm90::named_barrier_sync(1 + c, 128);
  const bool bias = g.b1 != nullptr;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float v[2][16];
    float amax = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        // The output (column pair) p of the tile; past N a 0 (selected, not branched around).
        const int p = 64 * h + 4 * j + qd;
        float gt = acc[64 * h + 4 * j + 2 * h2], up = acc[64 * h + 4 * j + 2 * h2 + 1];
        if (bias) {
          const uint32_t bb = s.epi.bias[c][p];
          gt += __uint_as_float(bb << 16), up += __uint_as_float(bb & 0xFFFF0000u);
        }
        const float o = swiglu_clamped(gt, up, g.alpha, g.limit);
        v[h][j] = n0 + 2 * p < g.N ? o : 0.0f;
        amax = fmaxf(amax, fabsf(v[h][j]));
      }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float sc = fp8_block_scale(amax), inv = 1.0f / sc;
    const int rr = warp * 16 + lane / 4 + 8 * h2;  // the row in the warpgroup's 64
    // The codes of v / sc: by the reciprocal and one correction (fp8::scaled_quotient, the same
    // codes) for every scale but the extreme ones, which divide.
    auto stage = [&](auto by_reciprocal) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          float q;
          if constexpr (decltype(by_reciprocal)::value) q = fp8::scaled_quotient(v[h][j], sc, inv);
          else q = v[h][j] / sc;
          s.epi.codes[c][rr][64 * h + 4 * j + qd] = e4m3_code(q);
        }
    };
    if (fp8::scaled_quotient_exact(sc)) stage(std::true_type{});
    else stage(std::false_type{});
    const int r = c * 64 + rr;
    if (qd == 0 && r < rows) g.qs[size_t(g.KBI) * seg_e + size_t(T.nb) * len + (r0 - seg_e) + r] = sc;
  }
  sm90::named_barrier_sync(1 + c, 128);
  const int i0 = T.nb * 128;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int ch = t + 128 * k, rr = ch / 8, part = ch % 8, r = c * 64 + rr, i = i0 + 16 * part;
    if (r >= rows || i >= g.I) continue;
    uint8_t* dst = g.q + size_t(r0 + r) * g.I + i;
    const uint8_t* src = s.epi.codes[c][rr] + 16 * part;
    if (g.I % 16 == 0) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      for (int b = 0; b < 16 && i + b < g.I; ++b) dst[b] = src[b];
    }
  }
}

// The loop of consumer warpgroup c (0 or 1): rows 64c .. 64c + 63 of each tile.
template <bool kRowScales, int kHalves, int kShare, bool kSwiglu, class S>
__device__ inline void consume(S& s, const Args& g, const Walk<kShare>& walk, int total, int c, uint32_t peer) {
  constexpr int kBN = 128 * kHalves, kStages = sizeof(s.full) / sizeof(s.full[0]);
  const int E = g.experts, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int rl = c * 64 + warp * 16 + lane / 4;  // this thread's rows rl and rl + 8 of the tile
  const int cl = 2 * (lane % 4);                 // and columns 128h + 8j + cl + {0, 1}
  int stage = 0;
  uint32_t phase = 0;
  // The wgmma descriptors of stage 0 (this warpgroup's rows, the weights' first half): a stage, a
  // half and a K step add fixed offsets to their start-address field. c is warp-uniform (the
  // caller broadcasts it), and so are these: they live in uniform registers, and the K loop does
  // not rebuild eight descriptors from vector registers (ptxas had ~100 instructions a K block
  // doing so, between the stage's barrier and its first MMA).
  const uint64_t da0 = sm90::desc_k128_swizzle(sm90::smem_u32(s.a[0]) + c * 64 * kBK);
  const uint64_t db0 = sm90::desc_k128_swizzle(sm90::smem_u32(s.b[0]));
  float tmp[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) tmp[i] = 0.0f;
  for (int u = walk.first; u < total; u += walk.step) {
    const Tile T = walk.tile(s, E, u);
    const int seg_e = s.seg[T.e], len = s.seg[T.e + 1] - seg_e, r0 = seg_e + T.mb * kBM;
    // rows or cols <= 0: a pair's spare tile
    const int rows = min(kBM, len - T.mb * kBM), n0 = T.nb * kBN, cols = min(kBN, g.N - n0);
    // The weights' block scales of this tile's column halves, one a K block (Block128x128).
    const float* wsb[kHalves];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) wsb[h] = g.ws + T.e * g.ws_per + size_t(T.nb * kHalves + h) * g.ws_ld;
    const bool spare = kShare != kShareNone && cols <= 0;  // a pair's spare tile reads no scales
    // The SwiGLU epilogue's bias pair of this thread's tile column pair, loaded now so that its
    // latency hides behind the K loop.
    uint32_t braw = 0;
    if constexpr (kSwiglu) {
      const int pc = n0 + 2 * int(threadIdx.x % 128);
      if (g.b1 && pc < g.N) braw = __ldg(reinterpret_cast<const uint32_t*>(g.b1 + size_t(T.e) * g.N + pc));
    }
    float acc[64 * kHalves];
#pragma unroll
    for (int i = 0; i < 64 * kHalves; ++i) acc[i] = 0.0f;
    for (int kb = 0; kb < g.KB; ++kb) {
      float sw[kHalves];
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
        sw[h] = kRowScales || spare ? 1.0f : __ldg(wsb[h] + kb);
      sm90::mbar_wait(&s.full[stage], phase);
      const uint64_t da = sm90::desc_advance(da0, stage * sizeof(s.a[0]));
      const float as0 = s.as[stage][rl], as1 = s.as[stage][rl + 8];
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        const uint64_t db = sm90::desc_advance(db0, stage * sizeof(s.b[0]) + h * 128 * kBK);
        sm90::fence_regs(tmp);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk)
          sm90::wgmma_m64n128k32_e4m3(tmp, sm90::desc_advance(da, kk * 32), sm90::desc_advance(db, kk * 32), kk > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::fence_regs(tmp);
        const float sa0 = as0 * sw[h], sa1 = as1 * sw[h];
        float* ah = acc + 64 * h;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          if (kRowScales) {
            const float2 w = *reinterpret_cast<const float2*>(&s.bs[stage][128 * h + 8 * j + cl]);
            ah[4 * j + 0] = fmaf(tmp[4 * j + 0] * sa0, w.x, ah[4 * j + 0]);
            ah[4 * j + 1] = fmaf(tmp[4 * j + 1] * sa0, w.y, ah[4 * j + 1]);
            ah[4 * j + 2] = fmaf(tmp[4 * j + 2] * sa1, w.x, ah[4 * j + 2]);
            ah[4 * j + 3] = fmaf(tmp[4 * j + 3] * sa1, w.y, ah[4 * j + 3]);
          } else {
            ah[4 * j + 0] = fmaf(tmp[4 * j + 0], sa0, ah[4 * j + 0]);
            ah[4 * j + 1] = fmaf(tmp[4 * j + 1], sa0, ah[4 * j + 1]);
            ah[4 * j + 2] = fmaf(tmp[4 * j + 2], sa1, ah[4 * j + 2]);
            ah[4 * j + 3] = fmaf(tmp[4 * j + 3], sa1, ah[4 * j + 3]);
          }
        }
      }
      // The stage's scales were read with ld.shared; the producer's next bulk copy into the stage
      // writes through the async proxy: every lane fences its reads before the warp releases it.
      sm90::fence_proxy_async_shared();
      __syncwarp();
      if (lane == 0) {
        sm90::mbar_arrive(&s.empty[stage]);
        if constexpr (kShare != kShareNone) sm90::mbar_arrive_cluster(&s.empty[stage], peer);
      }
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    if constexpr (kSwiglu) {
      static_assert(!kSwiglu || kHalves == 2, "the SwiGLU epilogue takes 256-column tiles: one 1x128 block of outputs");
      swiglu_epilogue(s, g, T, acc, braw, c, rows, r0, seg_e, len);
    } else {
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = rl + 8 * h2;
        if (r >= rows) continue;
        float* yr = g.y + size_t(r0 + r) * g.N + n0;
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const int col = 128 * h + 8 * j + cl;
            if (col < cols)
              *reinterpret_cast<float2*>(yr + col) =
                  make_float2(acc[64 * h + 4 * j + 2 * h2], acc[64 * h + 4 * j + 2 * h2 + 1]);
          }
      }
    }
  }
}

template <bool kRowScales, int kHalves, int kStagesT, bool kRegs = true, int kShare = kShareNone, bool kSwiglu = false>
__global__ void __launch_bounds__(kThreads, 1)
    m_grouped_fp8_wgmma_kernel(const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tw, Args g) {
  using R = Ring<kHalves, kStagesT, kSwiglu>;
  using Smem = typename R::Smem;
  constexpr int kBN = R::kBN, kStages = R::kStages;
  extern __shared__ uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, E = g.experts;
  static_assert(kShare != kShareWeights || kHalves == 2, "weight halves are 128-row boxes");
  const uint32_t rank = kShare ? sm90::cluster_ctarank() : 0, peer = rank ^ 1;
  if (tid <= E) s.seg[tid] = g.seg[tid];
  if (tid == 0) {
    // A stage is free when the consumers of both blocks of a pair have read it.
    for (int i = 0; i < kStages; ++i)
      sm90::mbar_init(&s.full[i], 1), sm90::mbar_init(&s.empty[i], kConsumerWarps * (kShare ? 2 : 1));
    sm90::mbar_fence_init();
    sm90::tma_prefetch_descriptor(&tx), sm90::tma_prefetch_descriptor(&tw);
  }
  __syncthreads();
  if (tid < 32) {  // each lane sums the row tiles of 8 experts; an exclusive scan gives the starts
    int cnt[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = tid * 8 + i;
      cnt[i] = e < E ? (s.seg[e + 1] - s.seg[e] + kBM - 1) / kBM : 0;
      if (kShare == kShareWeights) cnt[i] = (cnt[i] + 1) / 2;
      sum += cnt[i];
    }
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += v;
    }
    int run = incl - sum;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int e = tid * 8 + i;
      if (e < E) s.tile_start[e] = run;
      run += cnt[i];
    }
    if (tid == 31) s.tile_start[E] = incl;
  }
  __syncthreads();
  if constexpr (kShare != kShareNone) sm90::cluster_sync();  // the peer's barriers exist before any arrives on them
  const Walk<kShare> walk(g.NB, rank);
  // The walk's length, broadcast from lane 0: a shared-memory load is not known to be warp-uniform,
  // and a loop bound that is not keeps the consumers' stage index (and so their wgmma descriptors)
  // out of the uniform registers.
  const int total = __shfl_sync(0xffffffffu, s.tile_start[E] * walk.per_row, 0);
  const int wg = tid / 128;

  if (wg == 0) {  // the producer: one thread; its warpgroup gives its registers to the consumers
    if constexpr (kRegs) sm90::setmaxnreg_dec<40>();
    if (tid == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int u = walk.first; u < total; u += walk.step) {
        const Tile T = walk.tile(s, E, u);
        const int len = s.seg[T.e + 1] - s.seg[T.e], r0 = s.seg[T.e] + T.mb * kBM;
        const int rows = max(0, min(kBM, len - T.mb * kBM)), n0 = T.nb * kBN, cols = max(0, min(kBN, g.N - n0));
        const float* xs = g.xs + size_t(g.KB) * s.seg[T.e] + T.mb * kBM;
        const float* ws = g.ws + T.e * g.ws_per + n0;
        for (int kb = 0; kb < g.KB; ++kb) {
          sm90::mbar_wait(&s.empty[stage], phase ^ 1);
          const uint32_t bytes = (kBM + kBN) * kBK + 4 * rows + (kRowScales ? 4 * cols : 0);
          sm90::mbar_arrive_expect_tx(&s.full[stage], bytes);
          if constexpr (kShare == kShareRows)  // this block's half of the rows, into both blocks
            sm90::tma_load_2d_multicast(s.a[stage] + rank * (kBM / 2) * kBK, &tx, &s.full[stage], kb * kBK,
                                        r0 + int(rank) * (kBM / 2), 0x3);
          else
            sm90::tma_load_2d(s.a[stage], &tx, &s.full[stage], kb * kBK, r0);
          if constexpr (kShare == kShareWeights) {  // this block's half of the weights, into both blocks
            sm90::tma_load_2d_multicast(s.b[stage] + rank * 128 * kBK, &tw, &s.full[stage], kb * kBK,
                                        T.e * g.N + n0 + 128 * int(rank), 0x3);
          } else {
#pragma unroll
            for (int h = 0; h < kHalves; ++h)
              sm90::tma_load_2d(s.b[stage] + h * 128 * kBK, &tw, &s.full[stage], kb * kBK, T.e * g.N + n0 + 128 * h);
          }
          if (rows > 0) sm90::bulk_load(s.as[stage], xs + size_t(kb) * len, 4 * rows, &s.full[stage]);
          if (kRowScales && cols > 0) sm90::bulk_load(s.bs[stage], ws + size_t(kb) * g.N, 4 * cols, &s.full[stage]);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      }
    }
  } else {  // the consumers: warpgroup c takes rows 64c .. 64c + 63 of each tile
    if constexpr (kRegs) sm90::setmaxnreg_inc<232>();
    // The consumer index broadcast from lane 0: ptxas then knows it is warp-uniform.
    consume<kRowScales, kHalves, kShare, kSwiglu>(s, g, walk, total, __shfl_sync(0xffffffffu, wg - 1, 0), peer);
  }
  if constexpr (kShare != kShareNone) sm90::cluster_sync();  // no block leaves while its peer may still signal it
}

// A [rows][cols] byte matrix read in boxes of 128 columns by box_rows, 128-byte swizzled.
CUtensorMap box128_map(const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows = kBM) {
  const uint64_t dims[2] = {cols, rows}, strides[1] = {cols};
  const uint32_t box[2] = {kBK, box_rows};
  return tma_map_swizzled(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, "m_grouped_fp8_gemm_nt");
}

template <bool kRowScales, int kHalves, int kStagesT, bool kRegs = true, int kShare = kShareNone, bool kSwiglu = false>
void launch(const GroupedFp8Gemm& g, const Args& a, cudaStream_t st) {
  using R = Ring<kHalves, kStagesT, kSwiglu>;
  static_assert(R::kSmemBytes <= 227 * 1024, "the ring and the staging fit an SM's shared memory");
  auto* kernel = m_grouped_fp8_wgmma_kernel<kRowScales, kHalves, kStagesT, kRegs, kShare, kSwiglu>;
  static const bool configured = [&] {
    OSPREY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(R::kSmemBytes)));
    return true;
  }();
  (void)configured;
  const CUtensorMap tx = box128_map(g.x, uint64_t(g.rows), uint64_t(g.K), kShare == kShareRows ? kBM / 2 : kBM);
  const CUtensorMap tw = box128_map(g.w, uint64_t(g.experts) * g.N, uint64_t(g.K));
  // Row tiles: at most rows / 128 whole ones plus one partial an expert.
  const long tiles = (long(g.rows) / kBM + g.experts) * a.NB;
  int grid = int(std::min<long>(sm_count(), tiles));
  if (kShare == kShareNone) {
    kernel<<<grid, kThreads, R::kSmemBytes, st>>>(tx, tw, a);
  } else {  // blocks in pairs (a cluster of two)
    grid = std::max(2, grid / 2 * 2);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid), cfg.blockDim = dim3(kThreads), cfg.dynamicSmemBytes = R::kSmemBytes, cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    OSPREY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, tx, tw, a));
  }
  OSPREY_CUDA_CHECK(cudaGetLastError());
}

Args args_of(const GroupedFp8Gemm& g, int bn) {
  const int KB = (g.K + kBK - 1) / kBK;
  return Args{g.seg, g.experts, g.xs, g.ws, g.ws_per, (KB + 3) / 4 * 4, g.y, g.N, KB, (g.N + bn - 1) / bn};
}

void check(const GroupedFp8Gemm& g, const char* what) {
  if (!m_grouped_fp8_gemm_nt_supported(g.N, g.K, g.experts))
    fail_plain(std::string(what) + ": needs K % 16 == 0, N % 4 == 0 and 1 to 256 experts (got N " +
               std::to_string(g.N) + ", K " + std::to_string(g.K) + ", " + std::to_string(g.experts) + " experts)");
  if (!g.seg || !g.x || !g.xs || !g.w || !g.ws || g.rows < 1) fail_plain(std::string(what) + ": missing operands");
  // The scales arrive by bulk copies of whole 16-byte units.
  if ((reinterpret_cast<uintptr_t>(g.xs) | reinterpret_cast<uintptr_t>(g.ws)) % 16 || g.ws_per % 4)
    fail_plain(std::string(what) + ": the scales must start 16-byte aligned, each expert's a multiple of 4 floats on");
}

}  // namespace

bool m_grouped_fp8_gemm_nt_supported(int N, int K, int experts) {
  return K >= 16 && K % 16 == 0 && N >= 4 && N % 4 == 0 && experts >= 1 && experts <= kMaxExperts;
}

void m_grouped_fp8_gemm_nt_contiguous(const GroupedFp8Gemm& g, cudaStream_t st) {
  check(g, "m_grouped_fp8_gemm_nt_contiguous");
  if (!g.y) fail_plain("m_grouped_fp8_gemm_nt_contiguous: no output");
  const Args a = args_of(g, kTileCols);
  if (g.wmode == WeightScales::Row1x128) launch<true, kTileCols / 128, kTileStages, true, kTileShare>(g, a, st);
  else launch<false, kTileCols / 128, kTileStages, true, kTileShare>(g, a, st);
}

void m_grouped_fp8_gemm_nt_contiguous_swiglu(const GroupedFp8Gemm& g, const GroupedFp8Swiglu& sw, cudaStream_t st) {
  check(g, "m_grouped_fp8_gemm_nt_contiguous_swiglu");
  if (!sw.q || !sw.s || sw.I < 1 || g.N != 2 * sw.I)
    fail_plain("m_grouped_fp8_gemm_nt_contiguous_swiglu: needs the codes, the scales and N = 2 I (got N " +
               std::to_string(g.N) + ", I " + std::to_string(sw.I) + ")");
  if (sw.b1 && reinterpret_cast<uintptr_t>(sw.b1) % 4)
    fail_plain("m_grouped_fp8_gemm_nt_contiguous_swiglu: the bias must be 4-byte aligned (pairs)");
  if (sw.I % 16 == 0 && reinterpret_cast<uintptr_t>(sw.q) % 16)
    fail_plain("m_grouped_fp8_gemm_nt_contiguous_swiglu: the codes must be 16-byte aligned");
  Args a = args_of(g, 256);
  a.b1 = sw.b1, a.alpha = sw.alpha, a.limit = sw.limit, a.q = sw.q, a.qs = sw.s, a.I = sw.I;
  a.KBI = fp8::blocks(sw.I);
  if (g.wmode == WeightScales::Row1x128) launch<true, 2, kTileStages, true, kShareNone, true>(g, a, st);
  else launch<false, 2, kTileStages, true, kShareNone, true>(g, a, st);
}

}  // namespace osprey::cuda
