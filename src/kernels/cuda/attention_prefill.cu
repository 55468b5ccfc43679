// Prefill attention on the tensor cores (attention.cuh flash_prefill): FlashAttention-2 over the
// paged BF16, FP16 or FP8 cache (mma.sync), with the sink and the sliding window, split over the
// keys when a chunk's queries alone cannot fill the GPU; and full-attention layers over the BF16 or
// FP16 cache on wgmma (FlashAttention-3's structure, below). Q and P enter the tensor cores in the
// cache's 16-bit type: BF16 (also for the FP8 cache, whose tiles are made BF16), or FP16.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/sm90.cuh"
#include "kernels/cuda/tma.cuh"

namespace osprey::cuda {

namespace {

// A block: 8 warps x 16 query rows = 128 rows, row r = token t0 + r / group, query head
// g_kv * group + r % group (the query heads of one KV head, so each K/V tile serves all of them).
// Keys come in tiles of 64 (one page of a full layer), double-buffered through cp.async; shared
// rows are padded to 72 16-bit values (144 bytes) so that ldmatrix's eight row addresses hit distinct banks.
constexpr int kFaWarps = 8, kFaRows = 16 * kFaWarps, kFaKeys = 64, kFaD = 64, kFaPad = 72;
constexpr int kFaThreads = 32 * kFaWarps;
static_assert(kFaKeys == kPage, "a key tile is one page: one page-table lookup per tile");

struct FaTile {  // BF16 or FP16 values
  uint16_t k[kFaKeys][kFaPad];
  uint16_t v[kFaKeys][kFaPad];
};

// Issues the cp.async copies of key tile j0's K and V rows into t (zeros outside [lo, hi]: the
// masked weights multiply them, and cache rows outside the written range may hold anything).
__device__ inline void load_kv_tile(FaTile& t, const KvLayerView& L, int slot, int g_kv, int j0, int lo, int hi) {
  const int kvn = L.kv_heads * kFaD;
  const size_t page_row = L.page_table ? size_t(L.page_table[size_t(slot) * L.max_pages + j0 / kPage]) * kPage : 0;
#pragma unroll
  for (int i = 0; i < kFaKeys * kFaD / 8 / kFaThreads; ++i) {
    const int p = threadIdx.x + i * kFaThreads, key = p >> 3, d0 = (p & 7) * 8, j = j0 + key;
    const bool ok = j >= lo && j <= hi;
    const size_t row = L.page_table ? page_row + key : size_t(slot) * L.ring + (j % L.ring);
    const size_t at = ok ? row * kvn + size_t(g_kv) * kFaD + d0 : 0;
    cp_async16(&t.k[key][d0], L.k + at, ok);
    cp_async16(&t.v[key][d0], L.v + at, ok);
  }
}

// The FP8 cache's tiles (kFp8): each thread's two pieces of 8 keys' or values' codes and their
// rows' exponents, loaded into registers one tile ahead and stored into the shared tile as BF16
// (codes times 2^e: exact) after the current tile's products, so that the loads overlap them as
// cp.async's do for BF16. Zeros outside [lo, hi], as load_kv_tile's. Page tables only.
struct KvFp8Stage {
  static constexpr int kPieces = kFaKeys * kFaD / 8 / kFaThreads;
  uint2 k[kPieces], v[kPieces];
  int ek[kPieces], ev[kPieces];
  __device__ void load(const KvLayerView& L, int slot, int g_kv, int j0, int lo, int hi) {
    const int kvn = L.kv_heads * kFaD;
    const size_t page_row = size_t(L.page_table[size_t(slot) * L.max_pages + j0 / kPage]) * kPage;
#pragma unroll
    for (int i = 0; i < kPieces; ++i) {
      const int p = threadIdx.x + i * kFaThreads, key = p >> 3, d0 = (p & 7) * 8, j = j0 + key;
      const bool ok = j >= lo && j <= hi;
      const size_t row = page_row + key, at = row * kvn + size_t(g_kv) * kFaD + d0;
      const size_t e = kv_exp_index(row, g_kv, L.kv_heads);
      k[i] = ok ? *reinterpret_cast<const uint2*>(L.k8 + at) : make_uint2(0, 0);
      v[i] = ok ? *reinterpret_cast<const uint2*>(L.v8 + at) : make_uint2(0, 0);
      ek[i] = ok ? L.k_exp[e] : 0;
      ev[i] = ok ? L.v_exp[e] : 0;
    }
  }
  __device__ void store(FaTile& t) const {
#pragma unroll
    for (int i = 0; i < kPieces; ++i) {
      const int p = threadIdx.x + i * kFaThreads, key = p >> 3, d0 = (p & 7) * 8;
      *reinterpret_cast<uint4*>(&t.k[key][d0]) = e4m3x8_to_bf16x8_scaled(k[i], kv_pow2(ek[i]));
      *reinterpret_cast<uint4*>(&t.v[key][d0]) = e4m3x8_to_bf16x8_scaled(v[i], kv_pow2(ev[i]));
    }
  }
};

// A block's 128 rows: row r = token t0 + r / group, query head g_kv * group + r % group. Warp w
// (0..7, in both kernels) holds MMA rows 16w .. 16w + 15; lane g * 4 + c holds rows 16w + g and
// 16w + g + 8 (i = 0, 1).
struct FaRows {
  int t0, group, g_kv, T, heads, tokens_per_block, warp, g;
  __device__ int r(int i) const { return warp * 16 + g + 8 * i; }
  __device__ int tok(int i) const { return t0 + r(i) / group; }
  __device__ int head(int i) const { return g_kv * group + r(i) % group; }
  __device__ bool valid(int i) const { return r(i) < tokens_per_block * group && tok(i) < T; }
};

// The end of a block (or of its split): the quad's shares of l summed, then the unnormalized
// partial state (splits > 1: `part` [T][heads][splits][d + 2], acc then m and l), or the rows
// quantized for the o-projection (quant.q), or the normalized rows of `out`.
__device__ inline void flash_store(const FaRows& R, const float (&acc)[8][4], const float (&m)[2], float (&l)[2],
                                   int split, int splits, float* part, float* out, const Quantized1x128& quant) {
  const int lane = threadIdx.x & 31, c = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  if (splits > 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!R.valid(i)) continue;
      float* pp = part + ((size_t(R.tok(i)) * R.heads + R.head(i)) * splits + split) * (kFaD + 2);
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<float2*>(pp + n * 8 + 2 * c) = make_float2(acc[n][2 * i], acc[n][2 * i + 1]);
      if (c == 0) pp[kFaD] = m[i], pp[kFaD + 1] = l[i];
    }
    return;
  }
  if (quant.q) {
    // Group 8 (the launcher's condition): the warp's rows g + 8i are head g of token 2 warp + i,
    // so the 8 lanes of heads 2b and 2b + 1 (lanes 8b..8b+7) hold one 128-column block of that
    // token's output row; they quantize it as quantize_act_1x128 would (warp_quantize_block128's
    // amax, scale and codes).
    const int K = R.heads * kFaD;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int tok = R.tok(i);
      if (!R.valid(i)) continue;  // warp-uniform: row i of every lane is token 2 warp + i
      const float inv = 1.0f / l[i];
      float v[16], amax = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        v[2 * n] = acc[n][2 * i] * inv, v[2 * n + 1] = acc[n][2 * i + 1] * inv;
        amax = fmaxf(amax, fmaxf(fabsf(v[2 * n]), fabsf(v[2 * n + 1])));
      }
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float sc = fp8_block_scale(amax);
      uint8_t* qrow = quant.q + size_t(tok) * K + size_t(R.head(i)) * kFaD;
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<uint16_t*>(qrow + n * 8 + 2 * c) =
            uint16_t(e4m3_code(v[2 * n] / sc) | (uint32_t(e4m3_code(v[2 * n + 1] / sc)) << 8));
      if ((lane & 7) == 0) quant.s[size_t(R.head(i) * kFaD / 128) * quant.ld + tok] = sc;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!R.valid(i)) continue;
    float* op = out + (size_t(R.tok(i)) * R.heads + R.head(i)) * kFaD;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int n = 0; n < 8; ++n)
      *reinterpret_cast<float2*>(op + n * 8 + 2 * c) = make_float2(acc[n][2 * i] * inv, acc[n][2 * i + 1] * inv);
  }
}

// Whether key tile [j0, j0 + keys) needs masks: it crosses a row's causal edge (any key past the
// block's first position) or window edge, or the block's first key.
__device__ inline bool tile_crosses_edge(int j0, int keys, int pos_lo, int key_begin, int key_end, int window) {
  return j0 + keys - 1 > pos_lo || (window > 0 && j0 < key_end - window + 1) || j0 < key_begin;
}
// Masks the scores s [NT][4] (n-tile n: keys j0 + 8n + 2c + {0, 1}; e >> 1: the row) of the
// thread's rows at positions pos_r: keys after the row's position or outside its window.
template <int NT>
__device__ inline void mask_scores(float (&s)[NT][4], int j0, const int (&pos_r)[2], int window) {
  const int c = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = j >> 1, key = j0 + n * 8 + 2 * c + (j & 1);
      const bool ok = key <= pos_r[i] && (window == 0 || pos_r[i] - key < window);
      if (!ok) s[n][j] = -INFINITY;
    }
}

// Split-KV (gridDim.z = splits > 1): split z takes its share of the block's key tiles and writes
// its unnormalized partial state to `part` [T][heads][splits][d + 2] (acc, then m and l, base 2);
// only split 0 owns the sink. flash_merge_kernel combines them.
template <KvFormat kKv>
__global__ void __launch_bounds__(kFaThreads, 2)
    flash_prefill_kernel(KvLayerView L, const float* __restrict__ q, const bf16* __restrict__ sinks, int slot, int p0,
                         float* __restrict__ out, int T, int heads, int window, float scale_log2,
                         float* __restrict__ part, Quantized1x128 quant) {
  constexpr bool kFp8 = kKv == KvFormat::Fp8, kF16 = kKv == KvFormat::F16;
  __shared__ __align__(128) FaTile tiles[2];
  const int g_kv = blockIdx.x, group = heads / L.kv_heads, tokens_per_block = kFaRows / group;
  // The heaviest blocks (the last queries see the most keys) start first.
  const int t0 = (gridDim.y - 1 - blockIdx.y) * tokens_per_block;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  // This thread's two rows (recomputed where needed: registers are the kernel's limit).
  const FaRows R{t0, group, g_kv, T, heads, tokens_per_block, warp, g};
  int pos_r[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) pos_r[i] = p0 + (R.valid(i) ? R.tok(i) : 0);
  // Q fragments (A operand, 16 rows x 64 dims = 4 k-steps), BF16 or FP16.
  uint32_t qa[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)  // dims ks*16 + 2c (+8)
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // rows g, g+8
        float2 v = make_float2(0.f, 0.f);
        if (R.valid(i))
          v = *reinterpret_cast<const float2*>(q + (size_t(R.tok(i)) * heads + R.head(i)) * kFaD + ks * 16 + 2 * c +
                                               8 * hi);
        qa[ks][hi * 2 + i] = pack_q16<kF16>(v.x, v.y);
      }
  const int split = blockIdx.z, splits = gridDim.z;
  float m[2], l[2], acc[8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) seed_softmax_with_sink(m[i], l[i], sinks, R.head(i), split == 0, c == 0);
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[n][j] = 0.0f;
  const int last_tok = min(T, t0 + tokens_per_block) - 1;
  const int pos_lo = p0 + t0, key_end = p0 + last_tok;  // the block's first and last positions
  const int key_begin = window > 0 ? max(0, pos_lo - window + 1) : 0;
  // This split's key tiles: an equal share of the block's.
  const int tile_first = key_begin / kFaKeys, tiles_all = key_end / kFaKeys - tile_first + 1;
  const int per_split = (tiles_all + splits - 1) / splits;
  const int ta = tile_first + split * per_split, tb = min(tile_first + tiles_all, ta + per_split);

  // ldmatrix row addresses: K (non-transposed) gives B fragments of S = Q K^T, V (transposed)
  // those of O = P V. Lane l addresses row l % 8 of matrix l / 8.
  const int mi = lane >> 3, mr = lane & 7;
  const unsigned k_addr = unsigned(__cvta_generic_to_shared(&tiles[0].k[mr][mi * 8]));
  const unsigned v_addr = unsigned(__cvta_generic_to_shared(&tiles[0].v[(mi & 1) * 8 + mr][(mi >> 1) * 8]));
  constexpr unsigned kStage = sizeof(FaTile);

  [[maybe_unused]] KvFp8Stage stage;
  if constexpr (kFp8) {
    if (ta < tb) {
      stage.load(L, slot, g_kv, ta * kFaKeys, key_begin, key_end);
      stage.store(tiles[0]);
    }
    __syncthreads();
  } else {
    if (ta < tb) load_kv_tile(tiles[0], L, slot, g_kv, ta * kFaKeys, key_begin, key_end);
    cp_async_commit();
  }
  for (int t = ta; t < tb; ++t) {
    const int j0 = t * kFaKeys, st = (t - ta) & 1;
    if constexpr (kFp8) {
      if (t + 1 < tb) stage.load(L, slot, g_kv, j0 + kFaKeys, key_begin, key_end);
    } else {
      if (t + 1 < tb) load_kv_tile(tiles[st ^ 1], L, slot, g_kv, j0 + kFaKeys, key_begin, key_end);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
    }
    // S = Q K^T (16 rows x 64 keys per warp): one ldmatrix.x4 gives two k-steps of an n-tile.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) s[n][j] = 0.0f;
#pragma unroll
      for (int kp = 0; kp < 2; ++kp) {
        uint32_t b[4];  // dims 32kp + 8i..: k-step 2kp is b[0], b[1]; 2kp + 1 is b[2], b[3]
        ldmatrix_x4(b, k_addr + st * kStage + (n * 8 * kFaPad + kp * 32) * 2);
        mma_16816<kF16>(s[n], qa[2 * kp][0], qa[2 * kp][1], qa[2 * kp][2], qa[2 * kp][3], b[0], b[1]);
        mma_16816<kF16>(s[n], qa[2 * kp + 1][0], qa[2 * kp + 1][1], qa[2 * kp + 1][2], qa[2 * kp + 1][3], b[2], b[3]);
      }
    }
    // Masks only where a tile crosses a row's causal edge or window edge.
    if (tile_crosses_edge(j0, kFaKeys, pos_lo, key_begin, key_end, window)) mask_scores(s, j0, pos_r, window);
    online_softmax_tile(s, m, l, acc, scale_log2);
    // O += P V (P as the A operand straight from the S fragments).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t a0 = pack_16<kF16>(s[2 * kk][0], s[2 * kk][1]), a1 = pack_16<kF16>(s[2 * kk][2], s[2 * kk][3]);
      const uint32_t a2 = pack_16<kF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      const uint32_t a3 = pack_16<kF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];  // n-tile 2np: b[0], b[1]; 2np + 1: b[2], b[3]
        ldmatrix_x4_trans(b, v_addr + st * kStage + (kk * 16 * kFaPad + np * 16) * 2);
        mma_16816<kF16>(acc[2 * np], a0, a1, a2, a3, b[0], b[1]);
        mma_16816<kF16>(acc[2 * np + 1], a0, a1, a2, a3, b[2], b[3]);
      }
    }
    if constexpr (kFp8) {
      if (t + 1 < tb) stage.store(tiles[st ^ 1]);  // read last in the previous iteration
    }
    __syncthreads();  // stage st is refilled in the next iteration (kFp8: st ^ 1 is read in it)
  }
  if constexpr (!kFp8) cp_async_wait<0>();
  flash_store(R, acc, m, l, split, splits, part, out, quant);
}

// out [T][heads][d] from the splits' partial states (attention_common.cuh's merge). One thread per
// output value.
__global__ void flash_merge_kernel(const float* __restrict__ part, float* __restrict__ out, int rows, int splits) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(rows) * kFaD) return;
  const size_t row = i / kFaD, d = i % kFaD;
  const float* p = part + row * splits * (kFaD + 2);
  float M = -FLT_MAX;
  for (int z = 0; z < splits; ++z) M = fmaxf(M, p[z * (kFaD + 2) + kFaD]);
  float num = 0.0f, den = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const float w = merge_weight(p[z * (kFaD + 2) + kFaD], p[z * (kFaD + 2) + kFaD + 1], M);
    num += w * p[z * (kFaD + 2) + d];
    den += w * p[z * (kFaD + 2) + kFaD + 1];
  }
  out[i] = num / den;
}

// ---- Hopper: full-attention layers on wgmma (FlashAttention-3's structure) --------------------
// A block takes the same 128 rows with two consumer warpgroups (warps 0..7, rows 64w .. 64w + 63
// each) and one producer warp (warp 8). The producer streams key tiles of 128 (two pages) of K
// and V by TMA (128-byte swizzle) into a ring of kWgStages; per tile a consumer warpgroup computes
// S = Q K^T (4 wgmma m64n128k16, Q and K from shared memory), the online softmax in registers,
// and O += P V (8 wgmma m64n64k16, P from registers, V transposed from shared memory), in the
// cache's 16-bit type (kF16: FP16, else BF16).
// Within a warpgroup the tiles overlap (kWgOverlap): tile t's S and tile t - 1's P V are issued
// together, so the tensor cores run P V while the warpgroup computes tile t's softmax; the two
// warpgroups also run out of step.
// Keys past the block's last position are masked in S; in V they must be zeros (0 times a row
// that is not finite is NaN, and cache rows past the written range hold anything): a page wholly
// past it is not read, and the producer zeroes the rows past it in the last tile before it hands
// the tile over. Full attention only (windowed layers: flash_prefill_on_wgmma), one split, the
// BF16 or FP16 cache with page tables.
constexpr int kWgKeys = 128, kWgStages = 4, kWgThreads = kFaThreads + 32;
constexpr bool kWgOverlap = true;

struct WgSmem {  // BF16 or FP16 values
  uint16_t q[kFaRows * kFaD];               // 128 rows of 128 bytes, swizzled
  uint16_t k[kWgStages][kWgKeys * kFaD];    // [key][dim], swizzled
  uint16_t v[kWgStages][kWgKeys * kFaD];
  uint64_t full[kWgStages], empty[kWgStages], last;
};
constexpr size_t kWgSmemBytes = sizeof(WgSmem) + 1024;  // and the 1,024-byte alignment

// The producer warp: TMA loads of tiles 0 .. tb - 1 of (slot, KV head g_kv), the pages that hold
// keys up to key_end; the last tile's loads complete on s.last, the warp zeroes its V rows past
// key_end and then releases it on s.full.
__device__ inline void flash_wgmma_produce(WgSmem& s, const CUtensorMap& tk, const CUtensorMap& tv,
                                           const KvLayerView& L, int slot, int g_kv, int tb, int key_end) {
  const int lane = threadIdx.x & 31;
  constexpr uint32_t kPageBytes = kPage * kFaD * 2;
  int stage = 0;
  uint32_t phase = 0;
  for (int t = 0; t < tb; ++t) {
    const int j0 = t * kWgKeys;
    const bool last = t == tb - 1;
    if (lane == 0) {
      sm90::mbar_wait(&s.empty[stage], phase ^ 1);
      uint64_t* bar = last ? &s.last : &s.full[stage];
      const int pages = j0 + kPage <= key_end ? 2 : 1;
      sm90::mbar_arrive_expect_tx(bar, pages * 2 * kPageBytes);
      for (int h = 0; h < pages; ++h) {
        const int row = L.page_table[size_t(slot) * L.max_pages + j0 / kPage + h] * kPage;
        sm90::tma_load_3d(s.k[stage] + h * kPage * kFaD, &tk, bar, 0, g_kv, row);
        sm90::tma_load_3d(s.v[stage] + h * kPage * kFaD, &tv, bar, 0, g_kv, row);
      }
    }
    __syncwarp();
    if (last) {
      sm90::mbar_wait(&s.last, 0);
      for (int i = (key_end - j0 + 1) * 8 + lane; i < kWgKeys * 8; i += 32)  // 16-byte pieces of rows past key_end
        *reinterpret_cast<uint4*>(s.v[stage] + (i >> 3) * kFaD + (i & 7) * 8) = make_uint4(0, 0, 0, 0);
      sm90::fence_proxy_async_shared();  // the zeros before the consumers' wgmma reads (async proxy)
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&s.full[stage]);
    }
    if (++stage == kWgStages) stage = 0, phase ^= 1;
  }
}

// S = Q K^T of a warpgroup's 64 rows and a 128-key tile, issued (the caller commits and waits).
template <bool kF16>
__device__ inline void issue_scores(float (&sc)[64], uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
  for (int kk = 0; kk < kFaD / 16; ++kk)
    sm90::wgmma_m64n128k16_16bit<kF16>(sc, sm90::desc_k128_swizzle(q_addr + kk * 32), sm90::desc_k128_swizzle(k_addr + kk * 32),
                                kk > 0);
}
// O += P V, issued: P's 16-key steps pa (the m16n8k16 A fragments of the S accumulators).
template <bool kF16>
__device__ inline void issue_pv(float (&o)[32], const uint32_t (&pa)[8][4], uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) sm90::wgmma_m64n64k16_16bit_rs<kF16>(o, pa[kk], sm90::desc_mn128_swizzle(v_addr + kk * 16 * 128));
}
template <bool kF16>
__device__ inline void pack_weights(const float (&s4)[16][4], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    pa[kk][0] = pack_16<kF16>(s4[2 * kk][0], s4[2 * kk][1]), pa[kk][1] = pack_16<kF16>(s4[2 * kk][2], s4[2 * kk][3]);
    pa[kk][2] = pack_16<kF16>(s4[2 * kk + 1][0], s4[2 * kk + 1][1]);
    pa[kk][3] = pack_16<kF16>(s4[2 * kk + 1][2], s4[2 * kk + 1][3]);
  }
}

template <bool kF16>
__global__ void __launch_bounds__(kWgThreads, 1)
    flash_prefill_wgmma_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                               KvLayerView L, const float* __restrict__ q, const bf16* __restrict__ sinks, int slot,
                               int p0, float* __restrict__ out, int T, int heads, float scale_log2,
                               Quantized1x128 quant) {
  extern __shared__ uint8_t smem_raw[];
  WgSmem& s = *reinterpret_cast<WgSmem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int g_kv = blockIdx.x, group = heads / L.kv_heads, tokens_per_block = kFaRows / group;
  const int t0 = (gridDim.y - 1 - blockIdx.y) * tokens_per_block;  // the heaviest blocks first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pos_lo = p0 + t0, key_end = p0 + min(T, t0 + tokens_per_block) - 1;
  const int tb = key_end / kWgKeys + 1;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kWgStages; ++i) sm90::mbar_init(&s.full[i], 1), sm90::mbar_init(&s.empty[i], kFaWarps);
    sm90::mbar_init(&s.last, 1);
    sm90::mbar_fence_init();
    sm90::tma_prefetch_descriptor(&tk), sm90::tma_prefetch_descriptor(&tv);
  }
  __syncthreads();
  if (warp == kFaWarps) {
    flash_wgmma_produce(s, tk, tv, L, slot, g_kv, tb, key_end);
    return;
  }
  const int wg = warp >> 2;
  const FaRows R{t0, group, g_kv, T, heads, tokens_per_block, warp, lane >> 2};
  // The warpgroup's 64 query rows into shared memory as BF16 or FP16, 128-byte swizzled (16-byte piece p
  // of row r at piece p ^ (r % 8)); rows past the block's tokens are zeros.
  for (int i = threadIdx.x & 127; i < 64 * 8; i += 128) {
    const int r = 64 * wg + (i >> 3), p = i & 7, tok = t0 + r / group;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < tokens_per_block * group && tok < T) {
      const float4* src =
          reinterpret_cast<const float4*>(q + (size_t(tok) * heads + g_kv * group + r % group) * kFaD + p * 8);
      const float4 a = src[0], b = src[1];
      v = make_uint4(pack_q16<kF16>(a.x, a.y), pack_q16<kF16>(a.z, a.w), pack_q16<kF16>(b.x, b.y),
                     pack_q16<kF16>(b.z, b.w));
    }
    *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(s.q) + r * 128 + ((p ^ (r & 7)) * 16)) = v;
  }
  sm90::fence_proxy_async_shared();  // the generic stores before wgmma's reads
  sm90::named_barrier_sync(1 + wg, 128);

  int pos_r[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) pos_r[i] = p0 + (R.valid(i) ? R.tok(i) : 0);
  float m[2], l[2], o[32], sc[64], corr[2];
  uint32_t pa[8][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) seed_softmax_with_sink(m[i], l[i], sinks, R.head(i), true, (lane & 3) == 0);
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) sc[i] = 0.0f;
  auto& s4 = reinterpret_cast<float(&)[16][4]>(sc);
  auto& o4 = reinterpret_cast<float(&)[8][4]>(o);
  const uint32_t q_addr = sm90::smem_u32(s.q) + wg * 64 * 128;
  // The scores of tile t, in stage st, masked and turned into weights (m, l and corr updated).
  auto scores_to_weights = [&](int t) {
    if (t * kWgKeys + kWgKeys - 1 > pos_lo) mask_scores(s4, t * kWgKeys, pos_r, 0);
    online_softmax_weights(s4, m, l, scale_log2, corr);
  };
  auto release = [&](int st) {
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(&s.empty[st]);
  };
  int stage = 0;
  uint32_t phase = 0;
  if constexpr (kWgOverlap) {
    // Tile 0's scores alone; then per tile t: S(t) and P(t - 1) V(t - 1) issued together, S(t)
    // awaited, its weights computed while P V runs, then O rescaled once P V is done.
    sm90::mbar_wait(&s.full[0], 0);
    sm90::wgmma_fence();
    issue_scores<kF16>(sc, q_addr, sm90::smem_u32(s.k[0]));
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(sc);
    scores_to_weights(0);
    pack_weights<kF16>(s4, pa);
    int prev = 0;
    stage = 1, phase = kWgStages == 1;
    for (int t = 1; t < tb; ++t) {
      sm90::mbar_wait(&s.full[stage], phase);
      sm90::fence_regs(sc);
      sm90::fence_regs(o);
      sm90::wgmma_fence();
      issue_scores<kF16>(sc, q_addr, sm90::smem_u32(s.k[stage]));
      sm90::wgmma_commit();
      issue_pv<kF16>(o, pa, sm90::smem_u32(s.v[prev]));
      sm90::wgmma_commit();
      sm90::wgmma_wait<1>();
      sm90::fence_regs(sc);
      scores_to_weights(t);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o);
      release(prev);
      rescale_rows(o4, corr);
      pack_weights<kF16>(s4, pa);
      prev = stage;
      if (++stage == kWgStages) stage = 0, phase ^= 1;
    }
    sm90::wgmma_fence();
    issue_pv<kF16>(o, pa, sm90::smem_u32(s.v[prev]));
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o);
    release(prev);
  } else {
    for (int t = 0; t < tb; ++t) {
      sm90::mbar_wait(&s.full[stage], phase);
      sm90::fence_regs(sc);
      sm90::wgmma_fence();
      issue_scores<kF16>(sc, q_addr, sm90::smem_u32(s.k[stage]));
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(sc);
      scores_to_weights(t);
      rescale_rows(o4, corr);
      pack_weights<kF16>(s4, pa);
      sm90::fence_regs(o);
      sm90::wgmma_fence();
      issue_pv<kF16>(o, pa, sm90::smem_u32(s.v[stage]));
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o);
      release(stage);
      if (++stage == kWgStages) stage = 0, phase ^= 1;
    }
  }
  flash_store(R, o4, m, l, 0, 1, nullptr, out, quant);
}

// K or V of the cache as [rows][kv_heads][d] BF16 or FP16, read in boxes of one page of one KV head.
CUtensorMap kv_page_map(const uint16_t* base, const KvLayerView& L) {
  const uint64_t dims[3] = {uint64_t(L.d), uint64_t(L.kv_heads), uint64_t(L.rows)};
  const uint64_t strides[2] = {uint64_t(L.d) * 2, uint64_t(L.kv_heads) * L.d * 2};
  const uint32_t box[3] = {uint32_t(kFaD), 1, uint32_t(kPage)};
  return tma_map_swizzled(L.f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims,
                          strides, box, "flash_prefill");
}

}  // namespace

// Windowed layers stay on the mma.sync kernel: a block's 16 tokens see about 143 keys, and with
// one block an SM the wgmma kernel's start and end weigh more than its faster products (20b, 8k
// prompt: 0.267 ms a layer against 0.216, docs/PERF.md).
bool flash_prefill_on_wgmma(const KvLayerView& L, int heads, int window, int splits) {
  return window == 0 && !L.fp8() && L.page_table && L.rows > 0 && L.d == kFaD && splits == 1 &&
         heads % L.kv_heads == 0 && kFaRows % (heads / L.kv_heads) == 0;
}

int flash_prefill_splits(int T, int p0, int heads, int kv_heads, int window, size_t scratch_floats) {
  if (window > 0 || T == 0) return 1;  // a window's keys are few
  const int per_block = kFaRows / (heads / kv_heads);
  const long blocks = long(kv_heads) * ((T + per_block - 1) / per_block);
  const long tiles = (long(p0) + T + kFaKeys - 1) / kFaKeys;
  // About 4 waves of 2 blocks on each of 132 SMs, at least 16 key tiles (1024 keys) per split,
  // within the scratch.
  long s = std::min<long>({(8L * 132 + blocks - 1) / blocks, tiles / 16, 32,
                           long(scratch_floats / (size_t(T) * heads * (kFaD + 2)))});
  return int(std::max<long>(1, s));
}

void flash_prefill(const KvLayerView& L, const float* q, const bf16* sinks, int slot, int p0, float* out, int T,
                   int heads, int window, float scale, cudaStream_t s, int splits, float* scratch,
                   Quantized1x128 quant) {
  if (T == 0) return;
  if (L.d != kFaD) fail_plain("flash_prefill: head_dim must be 64");
  const int group = heads / L.kv_heads;
  if (heads % L.kv_heads || group > kFaRows) fail_plain("flash_prefill: unsupported head grouping");
  if (splits < 1 || (splits > 1 && !scratch)) fail_plain("flash_prefill: splits need scratch");
  const int per_block = kFaRows / group;
  dim3 grid(unsigned(L.kv_heads), unsigned((T + per_block - 1) / per_block), unsigned(splits));
  // The quantization in the epilogue: one split, and 8 query heads a KV head (see the kernel).
  const bool fused_quant = quant.q && splits == 1 && group == 8;
  if (L.fp8() && !L.page_table) fail_plain("flash_prefill: the FP8 KV cache needs page tables");
  if (flash_prefill_on_wgmma(L, heads, window, splits)) {
    static const bool configured = [] {
      for (auto* kernel : {flash_prefill_wgmma_kernel<false>, flash_prefill_wgmma_kernel<true>})
        OSPREY_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWgSmemBytes)));
      return true;
    }();
    (void)configured;
    (L.f16 ? flash_prefill_wgmma_kernel<true> : flash_prefill_wgmma_kernel<false>)<<<grid, kWgThreads, kWgSmemBytes, s>>>(
        kv_page_map(L.k, L), kv_page_map(L.v, L), L, q, sinks, slot, p0, out, T, heads, scale * kLog2e,
        fused_quant ? quant : Quantized1x128{});
  } else {
    auto* kernel = L.fp8()  ? flash_prefill_kernel<KvFormat::Fp8>
                   : L.f16 ? flash_prefill_kernel<KvFormat::F16>
                           : flash_prefill_kernel<KvFormat::Bf16>;
    kernel<<<grid, kFaThreads, 0, s>>>(L, q, sinks, slot, p0, out, T, heads, window, scale * kLog2e, scratch,
                                       fused_quant ? quant : Quantized1x128{});
  }
  OSPREY_CUDA_CHECK(cudaGetLastError());
  if (splits > 1) {
    const size_t n = size_t(T) * heads * kFaD;
    flash_merge_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(scratch, out, T * heads, splits);
    OSPREY_CUDA_CHECK(cudaGetLastError());
  }
  if (quant.q && !fused_quant)
    quantize_act_1x128(out, nullptr, T, heads * kFaD, quant.q, quant.s, ActScales::dense(quant.ld), s);
}

}  // namespace osprey::cuda
