// The MoE's routing front (fp8.cuh moe_route): the MLP norm, the fp32 router logits, the top-k
// softmax and the sort of the (token, choice) pairs by expert into the row layout every grouped
// GEMM reads (MoeSorted), in one kernel; moe_sort for choices made elsewhere.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>
#include <cuda_fp8.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/fp8_rows.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_route_body.cuh"

namespace osprey::cuda {

namespace {

// Up to this many tokens (decode steps and verify chunks, whose buckets go to 128 and more), a
// block per (token, 8 experts) that loads its router rows before its PDL wait; above, prompt
// chunks take moe_route_tiled_kernel (at 128 tokens its 8 blocks of 16 took a 20b batch-128 step
// from 20.4 to 21.4 ms).
constexpr int kRouteTiledAbove = 512;

__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* x, const bf16* gain, int H, float eps,
                                                                  uint8_t* q, float* s, int ld, float* h_out,
                                                                  bf16* h_mxfp4, const float* router, const bf16* router_bias, int E,
                                                                  int k, float* logits, int32_t* counter, int32_t* idx,
                                                                  float* w, MoeSorted sorted) {
  moe_route_body(x, gain, H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias, E, k, logits, counter, idx, w, sorted,
                 VBlock::this_block(), PdlSync{});
}

// The same front for a prompt chunk: block b takes `tile` tokens. Their rows are copied to shared
// memory together, each warp normalizes rows of its own (warp_rmsnorm_quantize_row: the sums
// of the block-wide norm, without its barriers; out, quantized, as in moe_route_kernel), then
// each warp holds one expert's router row in registers at a time and scores every token of the
// tile with it, so the router weights are read once per tile instead of once per token; a warp
// per token does the top-k, and the last block sorts. The same functions of the same values as
// moe_route_kernel: the same bits.
__global__ void __launch_bounds__(kRouteThreads) moe_route_tiled_kernel(const float* x, const bf16* gain, int T, int H,
                                                                        float eps, uint8_t* q, float* s, int ld,
                                                                        float* h_out, bf16* h_mxfp4,
                                                                        const float* router,
                                                                        const bf16* router_bias, int E, int k,
                                                                        int tile, float* logits, int32_t* counter,
                                                                        int32_t* idx, float* w, MoeSorted sorted) {
  extern __shared__ float sm[];  // [tile][Hp] normalized rows, then [tile][E] logits
  const int Hp = (H + 3) & ~3, t0 = blockIdx.x * tile, nt = min(tile, T - t0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* rows = sm;
  float* lg = sm + size_t(tile) * Hp;
  pdl_wait();
  pdl_launch_dependents();
  if (H % 4 == 0) {  // 16-byte copies, all in flight at once
    const int per_row = H / 4;
    const float* src = x + size_t(t0) * H;
    for (int i = threadIdx.x; i < nt * per_row; i += blockDim.x) {
      const int r = i / per_row, c = i % per_row;
      cp_async16(rows + size_t(r) * Hp + 4 * c, src + size_t(r) * H + 4 * c, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
  } else {
    for (int i = threadIdx.x; i < nt * H; i += blockDim.x)
      rows[size_t(i / H) * Hp + i % H] = x[size_t(t0) * H + i];
  }
  __syncthreads();
  for (int i = warp; i < nt; i += kRouteThreads / 32) {
    const int t = t0 + i;
    warp_rmsnorm_quantize_row<kRouteThreads>(rows + size_t(i) * Hp, gain, H, eps, q + size_t(t) * H, s, ld, t,
                                             h_out ? h_out + size_t(t) * H : nullptr);
    if (h_mxfp4) store_row_mxfp4_layout(rows + size_t(i) * Hp, H, h_mxfp4 + size_t(t) * mxfp4_act_cols(H), lane, 32);
  }
  __syncthreads();
  for (int e = warp; e < E; e += kRouteThreads / 32) {
    float4 wr[kRouterW4];
    load_router_row(router, e, E, H, wr);
    const float bias = __bfloat162float(router_bias[e]);
    // Two tokens at a time (independent sums in flight), each summed as router_logit sums it.
    int i = 0;
    for (; i + 1 < nt; i += 2) {
      const float* const pair[2] = {rows + size_t(i) * Hp, rows + size_t(i + 1) * Hp};
      float l[2];
      router_logits<2>(wr, router, e, pair, H, l);
      if (lane == 0)
        for (int n = 0; n < 2; ++n) {
          const float v = l[n] + bias;
          lg[(i + n) * E + e] = v, logits[size_t(t0 + i + n) * E + e] = v;
        }
    }
    for (; i < nt; ++i) {
      const float l = router_logit(wr, router, e, rows + size_t(i) * Hp, H) + bias;
      if (lane == 0) lg[i * E + e] = l, logits[size_t(t0 + i) * E + e] = l;
    }
  }
  __syncthreads();
  for (int i = warp; i < nt; i += kRouteThreads / 32)
    warp_topk_softmax(lg + i * E, E, k, idx + size_t(t0 + i) * k, w + size_t(t0 + i) * k);
  if (!last_block_to_arrive(counter + T, int(gridDim.x))) return;
  moe_sort_block(idx, T * k, k, E, sorted.seg, sorted.row_token, sorted.pair_row, sorted.active,
                 reinterpret_cast<int*>(sm));
}

// Counting sort of (token, choice) pairs by expert; each expert's run padded to a multiple of 4.
__global__ void moe_sort_kernel(const int32_t* idx, int P, int k, int E, int32_t* seg, int32_t* row_token,
                                int32_t* pair_row, int32_t* active) {
  extern __shared__ int sh[];
  pdl_wait();
  pdl_launch_dependents();
  moe_sort_block(idx, P, k, E, seg, row_token, pair_row, active, sh);
}

}  // namespace

void moe_route(const float* x, const bf16* gain, int T, int H, float eps, uint8_t* q, float* s, int ld, float* h_out,
               const float* router, const bf16* router_bias, int E, int k, float* logits, int32_t* counters,
               int32_t* idx, float* w, MoeSorted sorted, cudaStream_t st, bf16* h_mxfp4) {
  if (T == 0) return;
  if (k > 16 || k > E) fail_plain("moe_route: at most 16 experts per token, and no more than there are");
  check_row(H, "moe_route");
  const size_t Hp = size_t((H + 3) & ~3);
  if (T > kRouteTiledAbove) {
    // Prompt chunks: tiles of up to 16 tokens (as many as about 200 KB of shared memory holds), and
    // no larger than gives every SM two blocks of the grid.
    constexpr size_t kSmem = 200 * 1024;
    const int fits = int(std::clamp<size_t>((kSmem / sizeof(float) - 3 * E - 1) / (Hp + E), 1, 16));
    const int tile = std::clamp(T / (2 * sm_count()), 1, fits);
    const size_t smem = std::max((Hp + E) * tile, size_t(3 * E + 1)) * sizeof(float);
    static const bool attr = [&] {
      OSPREY_CUDA_CHECK(cudaFuncSetAttribute(moe_route_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(kSmem + 16 * 1024)));
      return true;
    }();
    (void)attr;
    launch_pdl("route", moe_route_tiled_kernel, unsigned((T + tile - 1) / tile), kRouteThreads, smem, st, x, gain, T,
               H, eps, q, s, ld, h_out, h_mxfp4, router, router_bias, E, k, tile, logits, counters, idx, w, sorted);
    return;
  }
  const size_t smem = std::max(Hp + E, size_t(3 * E + 1)) * sizeof(float);
  const dim3 grid(unsigned(T), unsigned((E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock));
  launch_pdl("route", moe_route_kernel, grid, kRouteThreads, smem, st, x, gain, H, eps, q, s, ld, h_out, h_mxfp4, router,
             router_bias, E, k, logits, counters, idx, w, sorted);
}

void moe_sort(const int32_t* idx, int T, int k, int E, int32_t* seg, int32_t* row_token, int32_t* pair_row,
              int32_t* active, cudaStream_t st) {
  launch_pdl("sort", moe_sort_kernel, 1, 1024, (3 * E + 1) * sizeof(int), st, idx, T * k, k, E, seg, row_token, pair_row,
             active);
}

}  // namespace osprey::cuda
