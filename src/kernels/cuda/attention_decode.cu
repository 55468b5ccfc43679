// Decode attention over the paged BF16, FP16 or FP8 KV cache (attention.cuh paged_attention): split along the
// KV length, on the tensor cores for d = 64 and on the CUDA cores otherwise, with a merge that can
// quantize its output for the next GEMM (in the attention kernel's tail or as its own kernel).
#include <algorithm>
#include <string>

#include "kernels/cuda/attention_decode_tc.cuh"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace osprey::cuda {

namespace {

// CUDA-core decode attention (any D; the BF16 cache only): a block per (KV head, row, split); its warps are the query
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
        const __nv_bfloat16* kp = reinterpret_cast<const __nv_bfloat16*>(L.k) + kv_row(L, slot, j) * kvn + size_t(g) * D;
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
        const __nv_bfloat16* vp = reinterpret_cast<const __nv_bfloat16*>(L.v) + kv_row(L, slot, j0 + u) * kvn + size_t(g) * D;
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

template <bool kEarlyKv, KvFormat kKv>
__global__ void __launch_bounds__(256) paged_decode_tc_kernel(DecodeAttentionArgs args) {
  paged_decode_tc_body<kEarlyKv, kKv>(args, VBlock::this_block(), PdlSync{});
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


int decode_attention_splits(int rows, int kv_heads, int max_splits) {
  const int want = (kDecodeWarps + rows * kv_heads - 1) / (rows * kv_heads);
  return std::max(1, std::min(want / kMaxWarpsPerSplit, max_splits));
}

int decode_attention_warps(int rows, int kv_heads, int splits) {
  int W = 1;
  while (W < kMaxWarpsPerSplit && size_t(rows) * kv_heads * splits * W * 2 <= kDecodeWarps) W *= 2;
  return W;
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
  if (L.fp8() && !(L.d == 64 && group <= 16 && L.page_table))
    fail_plain("paged_attention: the FP8 KV cache runs on the tensor-core kernel only (head_dim 64, up to 16 query "
               "heads per KV head, page tables); this layer has head_dim " + std::to_string(L.d) + ", " +
               std::to_string(group) + " heads per KV head" + (L.page_table ? "" : ", a ring"));
  if (L.f16 && !(L.d == 64 && group <= 16))
    fail_plain("paged_attention: the FP16 KV cache runs on the tensor-core kernel only (head_dim 64, up to 16 query "
               "heads per KV head); this layer has head_dim " + std::to_string(L.d) + ", " + std::to_string(group) +
               " heads per KV head");
  if (L.d == 64 && group <= 16) {
    const int W = decode_attention_warps(rows, L.kv_heads, splits);
    const bool tail = merge_count && group * L.d % 128 == 0;
    // Early K/V loads for decode steps of up to 8 rows (a warp's one or two tiles are then most of
    // its work; at batch 1 they took 2.50 -> 2.44 ms).
    // Not with the FP8 cache: its two tiles in flight take the registers (255 and a spill with
    // the early loads; 20b at 8k, batch 1: 2.62 ms a step against 2.37 with BF16).
    const bool early = decode_rows && rows <= 8 && !L.fp8();
    auto* kernel = L.fp8()  ? paged_decode_tc_kernel<false, KvFormat::Fp8>
                   : L.f16 ? (early ? paged_decode_tc_kernel<true, KvFormat::F16> : paged_decode_tc_kernel<false, KvFormat::F16>)
                           : (early ? paged_decode_tc_kernel<true, KvFormat::Bf16> : paged_decode_tc_kernel<false, KvFormat::Bf16>);
    launch_pdl("attn", kernel, grid, 32 * W,
               size_t(decode_tc_smem(W, /*staged=*/false)), s,
               DecodeAttentionArgs{L, q, sinks, slot, pos, heads, window, scale_log2, splits, scratch,
                                   tail ? merge_count : nullptr, out, quant});
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

