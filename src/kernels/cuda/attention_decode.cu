// Decode attention over the paged BF16 KV cache (attention.cuh paged_attention): split along the
// KV length, on the tensor cores for d = 64 and on the CUDA cores otherwise, with a merge that can
// quantize its output for the next GEMM (in the attention kernel's tail or as its own kernel).
#include <algorithm>
#include <string>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

namespace {

// The partial state of one (row, head, split): D accumulator values, the running max, the sum.
__device__ inline float* partial_at(float* scratch, int r, int h, int heads, int splits, int sp, int D) {
  return scratch + ((size_t(r) * heads + h) * splits + sp) * (D + 2);
}

// CUDA-core decode attention (any D): a block per (KV head, row, split); its warps are the query
// heads of that KV head (they share every K/V row through L1). Each lane scores its own key of a
// group of 32, the group's max and sum update the running softmax once, and the lanes, each
// owning D/32 output dimensions, accumulate the 32 value rows. Writes partial states.
template <int D>
__global__ void paged_attention_kernel(KvLayerView L, const float* q, const bf16* sinks, const int32_t* slots,
                                       const int32_t* positions, int heads, int window, float scale_log2, int splits,
                                       float* scratch) {
  pdl_wait();
  pdl_launch_dependents();
  constexpr int PER = (D + 31) / 32;  // output dims per lane (lane + 32 i < D)
  const int g = blockIdx.x, r = blockIdx.y, sp = blockIdx.z;
  const int group = heads / L.kv_heads, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = slots[r], pos = positions[r];
  const int first = window > 0 ? max(0, pos - window + 1) : 0, n = pos + 1 - first;
  const int chunk = (n + splits - 1) / splits;
  const int k0 = first + sp * chunk, k1 = min(pos + 1, k0 + chunk);
  const int kvn = L.kv_heads * D;
  for (int h = g * group + warp; h < (g + 1) * group; h += blockDim.x >> 5) {
    float qv[D];
    const float* qp = q + (size_t(r) * heads + h) * D;
#pragma unroll
    for (int i = 0; i < D; i += 4) {
      const float4 t = *reinterpret_cast<const float4*>(qp + i);
      qv[i] = t.x * scale_log2, qv[i + 1] = t.y * scale_log2, qv[i + 2] = t.z * scale_log2, qv[i + 3] = t.w * scale_log2;
    }
    float m, l;
    seed_softmax_with_sink(m, l, sinks, h, sp == 0);
    float acc[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) acc[i] = 0.0f;
    for (int j0 = k0; j0 < k1; j0 += 32) {
      const int j = j0 + lane;
      float s = -FLT_MAX;
      if (j < k1) {
        const bf16* kp = L.k + kv_row(L, slot, j) * kvn + size_t(g) * D;
        float dot = 0;
#pragma unroll
        for (int i = 0; i < D; i += 8) {
          const uint4 w = *reinterpret_cast<const uint4*>(kp + i);
          const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float2 f = __bfloat1622float2(p2[u]);
            dot += qv[i + 2 * u] * f.x + qv[i + 2 * u + 1] * f.y;
          }
        }
        s = dot;
      }
      const float m_new = fmaxf(m, warp_max(s));
      const float p = j < k1 ? exp2_approx(s - m_new) : 0.0f;
      const float corr = exp2_approx(m - m_new);
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < PER; ++i) acc[i] *= corr;
      const int cnt = min(32, k1 - j0);
      for (int u = 0; u < cnt; ++u) {
        const float pu = __shfl_sync(0xffffffffu, p, u);
        const bf16* vp = L.v + kv_row(L, slot, j0 + u) * kvn + size_t(g) * D;
#pragma unroll
        for (int i = 0; i < PER; ++i)
          if (lane + 32 * i < D) acc[i] += pu * __bfloat162float(vp[lane + 32 * i]);
      }
      m = m_new;
    }
    float* sc = partial_at(scratch, r, h, heads, splits, sp, D);
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (lane + 32 * i < D) sc[lane + 32 * i] = acc[i];
    if (lane == 0) sc[D] = m, sc[D + 1] = l;
  }
}

// Tensor-core decode attention, d = 64: a block of W warps per (KV head, row, split), warp w
// taking every W-th tile of the split, the W states merged in shared memory at the end (one
// partial per block). The query heads of the KV head are the rows of m16n8k16 BF16 MMAs (up to
// 16); keys come in 64-key tiles (one page),
// straight from global memory into the B fragments. Q and P enter as hi + lo BF16 pairs (two MMAs
// each), so scores and weights keep ~16 bits and the result stays close to fp32 arithmetic.
// Because a dot product may visit dimensions in any order as long as both operands agree, each
// thread loads 16 contiguous bytes of a key (dims 32j + 8c .. + 7 feed k-steps 2j, 2j + 1) and of
// a value row (dims 8g .. 8g + 7 are the output columns g of the 8 n-tiles), with Q and the
// output permuted to match. Splits cover whole tiles; the sink enters split 0 only.
constexpr int kDecKeys = 64;
static_assert(kDecKeys == kPage, "a decode tile is one page");

// One warp: the merge of the splits of row r over output columns [128 kb, 128 kb + 128) (4 per
// lane, of one head), written in fp32 to out (when given) and/or quantized in 1x128 (when q is).
// Partials read through L2 (.cg): in the attention kernel's tail, other blocks wrote them.
__device__ void merge_splits_warp(const float* scratch, int r, int kb, int heads, int D, int splits, float* out,
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

template <bool kEarlyKv>
__global__ void __launch_bounds__(256) paged_decode_tc_kernel(KvLayerView L, const float* q, const bf16* sinks,
                                                              const int32_t* slots, const int32_t* positions, int heads,
                                                              int window, float scale_log2, int splits, float* scratch,
                                                              int32_t* merge_count, float* out, Quantized1x128 quant) {
  extern __shared__ float states[];  // W > 1: [W][32 lanes][36] = m[2], l[2], acc[8][4]
  constexpr int D = 64, kState = 36;
  const int g_kv = blockIdx.x, r = blockIdx.y, sp = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5, g = lane >> 2, c = lane & 3;
  const int group = heads / L.kv_heads, kvn = L.kv_heads * D;
  const int slot = slots[r], pos = positions[r];
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int tile_lo = first / kDecKeys, tile_hi = pos / kDecKeys + 1;
  const int per = (tile_hi - tile_lo + splits - 1) / splits;
  const int ta = tile_lo + sp * per, tb = min(tile_hi, ta + per);
  const bool ok_r[2] = {g < group, g + 8 < group};
  const int head_r[2] = {g_kv * group + g, g_kv * group + g + 8};
  auto valid = [&](int key) { return key >= first && key <= pos; };

  // Tile t's keys and values straight into MMA fragments, one memory round trip.
  uint4 kf[8][2], vf[4][4];
  auto load_tile = [&](int t) {
    const int j0 = t * kDecKeys;
    const size_t page_row = L.page_table ? size_t(__ldcg(L.page_table + size_t(slot) * L.max_pages + t)) * kPage : 0;
    auto row_of = [&](int key) -> size_t {
      return L.page_table ? page_row + (key - j0) : size_t(slot) * L.ring + (key % L.ring);
    };
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int key = j0 + n * 8 + g;
      const bf16* kp = L.k + row_of(key) * kvn + size_t(g_kv) * D + 8 * c;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        kf[n][j] = valid(key) ? __ldcg(reinterpret_cast<const uint4*>(kp + 32 * j)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = j0 + 16 * kk + 2 * c + (i & 1) + (i >> 1) * 8;
        vf[kk][i] = valid(key) ? __ldcg(reinterpret_cast<const uint4*>(L.v + row_of(key) * kvn + size_t(g_kv) * D + 8 * g))
                               : make_uint4(0, 0, 0, 0);
      }
  };
  // kEarlyKv (decode rows: the kernel before wrote only each row's own newest position): a warp's
  // first tile, when it is not the tile of that position, holds keys of earlier steps only and is
  // loaded before the wait, while the kernels before this one finish (slots, positions and page
  // tables were copied before the step). A separate instantiation: it costs registers (255 and a
  // spill against 243) that the large batches, with many tiles per warp, do not get back.
  const int t_first = ta + warp;
  const bool early = kEarlyKv && t_first < tb && t_first < tile_hi - 1;
  if (early) load_tile(t_first);
  pdl_wait();  // q and the newest K/V come from the kernel before: coherent (.cg) loads only
  pdl_launch_dependents();

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
        split_bf16(v[4 * h] * scale_log2, v[4 * h + 1] * scale_log2, qh[2 * j + h][i], ql[2 * j + h][i]);
        split_bf16(v[4 * h + 2] * scale_log2, v[4 * h + 3] * scale_log2, qh[2 * j + h][2 + i], ql[2 * j + h][2 + i]);
      }
    }
  float m[2], l[2], acc[8][4] = {};
  const bool sink_here = sp == 0 && warp == 0;  // the sink enters one state of all
#pragma unroll
  for (int i = 0; i < 2; ++i) seed_softmax_with_sink(m[i], l[i], sinks, head_r[i], sink_here && ok_r[i], c == 0);

  for (int t = t_first; t < tb; t += W) {
    const int j0 = t * kDecKeys;
    if (t != t_first || !early) load_tile(t);
    // S = (Q K^T) * scale_log2: rows g (s[n][0..1]) and g + 8 (s[n][2..3]), keys j0 + 8n + 2c + {0,1}.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint4& w = kf[n][ks >> 1];
        const uint32_t b0 = (ks & 1) ? w.z : w.x, b1 = (ks & 1) ? w.w : w.y;
        mma_bf16_16816(s[n], qh[ks][0], qh[ks][1], qh[ks][2], qh[ks][3], b0, b1);
        mma_bf16_16816(s[n], ql[ks][0], ql[ks][1], ql[ks][2], ql[ks][3], b0, b1);
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!valid(j0 + n * 8 + 2 * c + (e & 1))) s[n][e] = -INFINITY;
    online_softmax_tile(s, m, l, acc, 1.0f);
    // O += P V: P's A fragments straight from S (keys 16kk + 2c (+1) and + 8), hi + lo.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t ph[4], pl[4];
      split_bf16(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_bf16(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
      const uint32_t* v0 = reinterpret_cast<const uint32_t*>(&vf[kk][0]);
      const uint32_t* v1 = reinterpret_cast<const uint32_t*>(&vf[kk][1]);
      const uint32_t* v2 = reinterpret_cast<const uint32_t*>(&vf[kk][2]);
      const uint32_t* v3 = reinterpret_cast<const uint32_t*>(&vf[kk][3]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {  // output column g of n-tile nt = dim 8g + nt
        const uint32_t sel = (nt & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(v0[nt >> 1], v1[nt >> 1], sel), b1 = __byte_perm(v2[nt >> 1], v3[nt >> 1], sel);
        mma_bf16_16816(acc[nt], ph[0], ph[1], ph[2], ph[3], b0, b1);
        mma_bf16_16816(acc[nt], pl[0], pl[1], pl[2], pl[3], b0, b1);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  if (W > 1) {  // merge the warps' states into warp 0's
    float* st = states + (size_t(warp) * 32 + lane) * kState;
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
      for (int w = 1; w < W; ++w) M = fmaxf(M, states[(size_t(w) * 32 + lane) * kState + i]);
      const float f0 = exp2_approx(m[i] - M);
      l[i] *= f0;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) acc[nt][2 * i] *= f0, acc[nt][2 * i + 1] *= f0;
      for (int w = 1; w < W; ++w) {
        const float* o = states + (size_t(w) * 32 + lane) * kState;
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

// Merges the splits of each (row, head) and writes the fp32 output and/or its 1x128 FP8
// quantization: a warp per (row, 128 output columns), 4 columns (of one head) per lane.
__global__ void merge_splits_kernel(const float* scratch, float* out, int rows, int heads, int D, int splits,
                                    Quantized1x128 quant) {
  pdl_wait();
  pdl_launch_dependents();
  const int KB = (heads * D + 127) / 128;
  const int w = int((size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5);
  if (w >= rows * KB) return;
  merge_splits_warp(scratch, w / KB, w % KB, heads, D, splits, out, quant);
}

}  // namespace


// ~1024 warps in flight over all (row, KV head) pairs: up to 8 warps per block, then splits.
constexpr int kDecodeWarps = 1024, kMaxWarpsPerSplit = 8;
int decode_attention_splits(int rows, int kv_heads, int max_splits) {
  const int want = (kDecodeWarps + rows * kv_heads - 1) / (rows * kv_heads);
  return std::max(1, std::min(want / kMaxWarpsPerSplit, max_splits));
}

void paged_attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot, const int32_t* pos,
                     float* out, int rows, int heads, int window, float scale, int splits, float* scratch,
                     cudaStream_t s, const Quantized1x128 quant, int32_t* merge_count, bool decode_rows) {
  if (rows == 0) return;
  if (heads % L.kv_heads) fail_plain("paged_attention: heads must be a multiple of kv_heads");
  if (L.d % 4) fail_plain("paged_attention: head_dim must be a multiple of 4");
  const int group = heads / L.kv_heads;
  const float scale_log2 = scale * kLog2e;  // the kernels' scores are base 2
  const dim3 grid(unsigned(L.kv_heads), unsigned(rows), unsigned(splits));
  if (L.d == 64 && group <= 16) {
    int W = 1;
    while (W < kMaxWarpsPerSplit && size_t(rows) * L.kv_heads * splits * W * 2 <= kDecodeWarps) W *= 2;
    const bool tail = merge_count && group * L.d % 128 == 0;
    // Early K/V loads for decode steps of up to 8 rows (a warp's one or two tiles are then most of
    // its work; at batch 1 they took 2.50 -> 2.44 ms).
    const bool early = decode_rows && rows <= 8;
    launch_pdl("attn", early ? paged_decode_tc_kernel<true> : paged_decode_tc_kernel<false>, grid, 32 * W,
               W > 1 ? size_t(W) * 32 * 36 * sizeof(float) : 0, s, L, q, sinks, slot, pos, heads, window, scale_log2, splits,
               scratch, tail ? merge_count : nullptr, out, quant);
    if (tail) return;
  } else {
    const int warps = group < 8 ? group : 8;
    switch (L.d) {
#define OSPREY_PAGED_CASE(D)                                                                                      \
  case D:                                                                                                         \
    launch_pdl("attn", paged_attention_kernel<D>, grid, warps * 32, 0, s, L, q, sinks, slot, pos, heads, window, scale_log2, \
               splits, scratch);                                                                                  \
    break;
      OSPREY_PAGED_CASE(16)
      OSPREY_PAGED_CASE(32)
      OSPREY_PAGED_CASE(64)
      OSPREY_PAGED_CASE(128)
#undef OSPREY_PAGED_CASE
      default: fail_plain("paged_attention: head_dim " + std::to_string(L.d) + " is not compiled (16, 32, 64, 128)");
    }
  }
  const size_t warps = size_t(rows) * ((heads * L.d + 127) / 128);
  launch_pdl("attn", merge_splits_kernel, unsigned((warps * 32 + 255) / 256), 256, 0, s, scratch, out, rows, heads, L.d,
             splits, quant);
}

}  // namespace osprey::cuda

