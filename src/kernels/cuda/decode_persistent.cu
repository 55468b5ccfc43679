// The persistent decode kernel (decode_persistent.cuh).
#include "kernels/cuda/decode_persistent.cuh"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/cuda/argmax_body.cuh"
#include "kernels/cuda/attention_decode_tc.cuh"
#include "kernels/cuda/gemm_fp8_skinny.cuh"
#include "kernels/cuda/moe_gemm_mxfp4_decode.cuh"
#include "kernels/cuda/moe_route_body.cuh"
#include "kernels/cuda/residual_rows.cuh"
#include "kernels/cuda/rope_kv_body.cuh"

namespace osprey::cuda {

namespace {

constexpr int kThreads = 256;  // every body's block: 8 warps
static_assert(kThreads == kRouteThreads && kThreads == kSkinnyWarps * 32 && kThreads == kWarps * 32,
              "the bodies' blocks are the persistent kernel's");
// The streaming bodies' weight rings (the FP8 and the MXFP4 GEMMs'): with one block an SM deeper
// than their own kernels' (the block is alone with the SM's shared memory), so that 8 warps keep as
// many bytes in flight as 16-24 did; with two, their own kernels' depth (what fits twice).
__host__ __device__ constexpr int persistent_ring(int blocks_per_sm) { return blocks_per_sm == 1 ? 8 : 4; }

enum class PhaseKind : int32_t {
  EmbedNorm,
  Fp8GemmRow1,  // the skinny GEMM's one-row tile (batch 1)
  Fp8GemmRow8,  // its 8-row tile
  Rope,
  Attention,
  Route,
  Mxfp4Gemm,
  CombineNorm,
  ArgmaxPartial,
  ArgmaxFinal,
};

struct EmbedNormArgs {
  const bf16* table;
  const int32_t* tokens;
  float* x;
  int H;
  const bf16* gain;
  float eps;
  uint8_t* q;
  float* s;
  int ld;
};
struct RopeArgs {
  KvLayerView L;
  const float* qkv;
  const int32_t *slot, *pos;
  const float* inv_freq;
  float c;
  int heads;
  float* q;
};
struct RouteArgs {
  const float* x;
  const bf16* gain;
  int H;
  float eps;
  uint8_t* q;
  float* s;
  int ld;
  bf16* h_mxfp4;
  const bf16* router;  // BF16, as the checkpoint ships it
  const bf16* router_bias;
  int E, k;
  float* logits;
  int32_t *counters, *idx;
  float* w;
  MoeSorted sorted;
};
struct Mxfp4Args {
  Mxfp4ExpertsView W;
  const bf16* x;
  ExpertRows rows;
  float* y;
  int ks;
  SwigluOut sw;  // sw.a: the clamped SwiGLU as the epilogue (y unwritten)
  // Each block's own copy of the sorted routing, [grid][stride] (seg, active, row_token at 0,
  // E + 1, 2 E + 1): the expert GEMMs read the copy their block wrote, not rows' buffers.
  int32_t* mine;
  int stride, E;
  RouteChoicesArgs ch;  // ch.logits: this phase first routes (every block, before its work)
};
struct CombineArgs {
  float* x;
  const float* y;
  const int32_t* pair_row;
  const float* w;
  const int32_t* idx;
  int k, H;
  const bf16* gain;
  float eps;
  uint8_t* q;
  float* s;
  int ld;
};
struct ArgmaxArgs {
  const float* logits;
  int V;
  float* val;
  int* idx;
  int32_t* out;
  int rows;
};

constexpr int kArgBytes = 256;

__device__ inline uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ inline uint32_t sm_id() {
  uint32_t s;
  asm volatile("mov.u32 %0, %smid;" : "=r"(s));
  return s;
}

}  // namespace

struct PersistentPhase {
  PhaseKind kind;
  int nx, ny, nz;
  int first;   // the block that takes the phase's virtual block 0 (round robin across phases)
  int smem;    // dynamic shared memory the body needs
  alignas(16) unsigned char args[kArgBytes];
  template <typename A>
  static PersistentPhase of(PhaseKind k, int nx, int ny, int nz, int smem, const A& a) {
    static_assert(sizeof(A) <= kArgBytes, "a phase's arguments fit its block");
    PersistentPhase p{};
    p.kind = k, p.nx = nx, p.ny = ny, p.nz = nz, p.smem = smem;
    std::memcpy(p.args, &a, sizeof(A));
    return p;
  }
  template <typename A>
  __device__ const A& as() const {
    return *reinterpret_cast<const A*>(args);
  }
};

namespace {

// The persistent phase's wait, stamping the time it first returned on this block (timeline).
struct TimedPhaseSync {
  PhaseSync sync;
  uint64_t* stamp;  // shared; null: no timeline
  __device__ void wait() const {
    sync.wait();
    if (stamp && threadIdx.x == 0 && *stamp == 0) *stamp = global_ns();
  }
  __device__ void release() const {}
};

// Each phase kind's body as a function of its own (not inlined): the register allocator then
// fits each body alone into the kernel's budget instead of all of them at once. Inlined into one
// switch, the bodies that fit alone spilled together (ptxas, sm_90a: 372 bytes of spill loads at
// one block an SM and 1,164 at two; so, none at one, and at two 56 in the kernel and at most 112 in
// a phase; docs/PERF.md). A call a virtual block costs next to nothing.
#define OSPREY_PHASE(name) \
  template <int MINB>      \
  __device__ __noinline__ void name(const PersistentPhase& ph, VBlock b, TimedPhaseSync sync)
OSPREY_PHASE(embed_norm_phase) {
  const auto& a = ph.as<EmbedNormArgs>();
  embed_norm_body<kThreads, kRowThreads>(a.table, a.tokens, a.x, a.H, a.gain, a.eps, a.q, a.s, a.ld, b, sync);
}
template <int MINB, int R>
__device__ __noinline__ void fp8_gemm_phase(const PersistentPhase& ph, VBlock b, TimedPhaseSync sync) {
  fp8_skinny_body<1, R, TimedPhaseSync, persistent_ring(MINB)>(ph.as<Fp8SkinnyArgs>(), b, sync);
}
OSPREY_PHASE(rope_phase) {
  const auto& a = ph.as<RopeArgs>();
  qkv_rope_to_cache_body(a.L, a.qkv, a.slot, a.pos, a.inv_freq, a.c, a.heads, a.q, /*release_early=*/true, b, sync);
}
// Without the first tile's loads before the wait: they kept 128 registers live across it and the
// whole kernel spilled (20b batch 1: 3.89 against 4.34 ms a step). At two blocks an SM the tiles
// go through shared memory (kStaged): the body in 128 registers.
OSPREY_PHASE(attention_phase) {
  paged_decode_tc_body</*kEarlyKv=*/false, KvFormat::Bf16, /*kStaged=*/MINB == 2>(ph.as<DecodeAttentionArgs>(), b, sync);
}
// At one block an SM each warp's router row goes into registers before the wait, as in the route
// kernel (the phase is a function of its own: its registers do not raise the other phases'); at two
// it is read from memory in the dot product (the same sums either way).
OSPREY_PHASE(route_phase) {
  const auto& a = ph.as<RouteArgs>();
  moe_route_body<TimedPhaseSync, /*kRouterInRegs=*/MINB == 1, /*kChoicesLater=*/true>(a.x, a.gain, a.H, a.eps, a.q, a.s, a.ld, nullptr,
                                                              a.h_mxfp4, a.router, a.router_bias, a.E, a.k, a.logits,
                                                              a.counters, a.idx, a.w, a.sorted, b, sync);
}
// The top-k and the sort of the route phase's logits, by every block (each into its own copy;
// block 0 also into the canonical buffers the combine reads), before the experts' first GEMM:
// no block waits for one block to route.
template <int MINB>
__device__ __noinline__ void route_choices_phase(const PersistentPhase& ph, TimedPhaseSync sync) {
  extern __shared__ __align__(16) float route_sh[];
  const auto& a = ph.as<Mxfp4Args>();
  sync.wait();
  route_choices_block(a.ch.logits, a.ch.T, a.E, a.ch.k, a.mine + size_t(blockIdx.x) * a.stride, blockIdx.x == 0,
                      a.ch.idx, a.ch.w, a.ch.sorted, route_sh);
}
OSPREY_PHASE(mxfp4_gemm_phase) {
  const auto& a = ph.as<Mxfp4Args>();
  ExpertRows rows = a.rows;
  const int32_t* m = a.mine + size_t(blockIdx.x) * a.stride;  // this block's routing copy
  rows.seg = m, rows.active = m + a.E + 1, rows.row_live = m + 2 * a.E + 1;
  if (rows.x_rows) rows.x_rows = rows.row_live;
  mxfp4_decode_body<1, TimedPhaseSync, persistent_ring(MINB)>(a.W, a.x, rows, a.y, a.ks, b, sync, /*pass_rows=*/8, a.sw);
}
OSPREY_PHASE(combine_norm_phase) {
  const auto& a = ph.as<CombineArgs>();
  moe_combine_norm_body<kThreads, kRowThreads>(a.x, a.y, a.pair_row, a.w, a.idx, nullptr, a.k, a.H, a.gain, a.eps, a.q, a.s, a.ld,
                                  nullptr, b, sync);
}
OSPREY_PHASE(argmax_partial_phase) {
  const auto& a = ph.as<ArgmaxArgs>();
  argmax_partial_body(a.logits, a.V, a.val, a.idx, b, sync);
}
OSPREY_PHASE(argmax_final_phase) {
  const auto& a = ph.as<ArgmaxArgs>();
  argmax_final_body(a.val, a.idx, a.out, a.rows, b, sync);
}
#undef OSPREY_PHASE

template <int MINB>
__global__ void __launch_bounds__(kThreads, MINB)
    persistent_decode_kernel(const PersistentPhase* phases, int n_phases, uint32_t* counters, uint64_t* timeline) {
  __shared__ uint64_t waited;
  const uint32_t G = gridDim.x;
  for (int p = 0; p < n_phases; ++p) {
    // What a body reads before its wait was written two or more phases back (launch.cuh's rule
    // for kernels): those phases are complete on every block before this one starts.
    if (p >= 2) wait_counter(counters + p - 2, G);
    const PersistentPhase& ph = phases[p];
    const uint64_t t0 = timeline ? global_ns() : 0;
    if (timeline && threadIdx.x == 0) waited = 0;
    __syncthreads();
    // Phase 0 waits for nothing (counters[n_phases] stays at G).
    const TimedPhaseSync sync{{p > 0 ? counters + p - 1 : counters + n_phases, G}, timeline ? &waited : nullptr};
    if (ph.kind == PhaseKind::Mxfp4Gemm && ph.as<Mxfp4Args>().ch.logits) {
      route_choices_phase<MINB>(ph, sync);  // every block, work in the phase or not: the down GEMM reads its copy
    }
    const int n = ph.nx * ph.ny * ph.nz;
    for (int v = int((blockIdx.x + G - uint32_t(ph.first) % G) % G); v < n; v += int(G)) {
      const VBlock b{v % ph.nx, v / ph.nx % ph.ny, v / (ph.nx * ph.ny), ph.nx, ph.ny, ph.nz};
      switch (ph.kind) {
        case PhaseKind::EmbedNorm: embed_norm_phase<MINB>(ph, b, sync); break;
        case PhaseKind::Fp8GemmRow1: fp8_gemm_phase<MINB, 1>(ph, b, sync); break;
        case PhaseKind::Fp8GemmRow8: fp8_gemm_phase<MINB, 8>(ph, b, sync); break;
        case PhaseKind::Rope: rope_phase<MINB>(ph, b, sync); break;
        case PhaseKind::Attention: attention_phase<MINB>(ph, b, sync); break;
        case PhaseKind::Route: route_phase<MINB>(ph, b, sync); break;
        case PhaseKind::Mxfp4Gemm: mxfp4_gemm_phase<MINB>(ph, b, sync); break;
        case PhaseKind::CombineNorm: combine_norm_phase<MINB>(ph, b, sync); break;
        case PhaseKind::ArgmaxPartial: argmax_partial_phase<MINB>(ph, b, sync); break;
        case PhaseKind::ArgmaxFinal: argmax_final_phase<MINB>(ph, b, sync); break;
      }
      __syncthreads();  // a body's shared memory is free for the next virtual block
    }
    // Done with phase p: the block's writes, then its arrival (release). An arrival that waits for
    // the counter's old value waits for the round trip to its L2 slice, so only the last phase's
    // does: its last arrival, after every block's last wait, sets every counter back to zero for
    // the next step (the next launch starts after this one ends).
    __syncthreads();
    const uint64_t t_end = timeline ? global_ns() : 0;
    if (threadIdx.x == 0) {
      __threadfence();
      if (p + 1 < n_phases) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counters + p) : "memory");
      } else if (atomicAdd(counters + p, 1u) == G - 1) {
        __threadfence();  // every block's arrivals before the reset
        for (int i = 0; i < n_phases; ++i) counters[i] = 0;
      }
    }
    if (timeline && threadIdx.x == 0) {
      uint64_t* rec = timeline + (size_t(p) * G + blockIdx.x) * 4;
      rec[0] = sm_id(), rec[1] = t0, rec[2] = waited, rec[3] = t_end;
    }
  }
}

void* kernel_for(int blocks_per_sm) {
  return blocks_per_sm == 1 ? reinterpret_cast<void*>(persistent_decode_kernel<1>)
                            : reinterpret_cast<void*>(persistent_decode_kernel<2>);
}

constexpr int kMaxDynamicSmem = 200 * 1024;

}  // namespace

PersistentDecode::PersistentDecode(int blocks_per_sm) : blocks_per_sm_(blocks_per_sm) {
  if (blocks_per_sm != 1 && blocks_per_sm != 2) fail_plain("PersistentDecode: 1 or 2 blocks per SM");
  grid_ = blocks_per_sm * sm_count();
}

PersistentDecode::~PersistentDecode() {
  if (device_) cudaFree(device_);
  if (counter_) cudaFree(counter_);
  if (argmax_val_) cudaFree(argmax_val_);
  if (argmax_idx_) cudaFree(argmax_idx_);
  if (mine_) cudaFree(mine_);
}

int PersistentDecode::phases() const { return int(host_.size()); }

void PersistentDecode::add(const PersistentPhase& p0, const char* kind) {
  if (device_) fail_plain("PersistentDecode: the plan is finished");
  names_.push_back(label_.empty() ? std::string(kind) : label_ + " " + kind);
  PersistentPhase p = p0;
  p.first = vblocks_ % grid_;
  vblocks_ = (vblocks_ + p.nx * p.ny * p.nz) % grid_;
  host_.push_back(p);
}

void PersistentDecode::embed_norm(const bf16* table, const int32_t* tokens, float* x, int rows, int H, const bf16* gain,
                                  float eps, uint8_t* q, float* s, int ld) {
  check_row(H, "PersistentDecode::embed_norm");
  add(PersistentPhase::of(PhaseKind::EmbedNorm, rows, 1, 1, H * 4, EmbedNormArgs{table, tokens, x, H, gain, eps, q, s, ld}), "embed+norm");
}

void PersistentDecode::fp8_gemm(const char* name, const uint8_t* W, const float* ws, int ws_stride, const bf16* bias,
                                const uint8_t* x, const float* xs, int x_ld, float* y, int y_ld, bool accumulate, int N,
                                int K, int rows) {
  if (K % 16) fail_plain("PersistentDecode::fp8_gemm: K must be a multiple of 16");
  if (rows > 8) fail_plain("PersistentDecode::fp8_gemm: at most 8 rows");
  ActSegments sg;
  sg.rows = rows, sg.ld = x_ld;
  const int R = rows == 1 ? 1 : 8;
  // The per-op path's K-splits (fp8_gemm_dense's), not the ones this grid would pick: the same
  // fp32 sums in the same order, so the step's logits are the per-op step's bits.
  const int ks = fp8_dense_k_splits(N, K, rows);
  const int smem = int(skinny_smem_bytes(1, R, K, persistent_ring(blocks_per_sm_)));
  add(PersistentPhase::of(R == 1 ? PhaseKind::Fp8GemmRow1 : PhaseKind::Fp8GemmRow8, skinny_grid_x(N, ks), 1, 1, smem,
                          Fp8SkinnyArgs{W, ws, ws_stride, bias, x, xs, sg, y, y_ld, accumulate, N, K, ks}), name);
}

void PersistentDecode::qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                                         const float* inv_freq, float concentration, int rows, int heads, float* q) {
  // A token's pairs over several blocks: one pair a thread.
  const int slices = ((heads + L.kv_heads) * L.d / 2 + kThreads - 1) / kThreads;
  add(PersistentPhase::of(PhaseKind::Rope, rows, slices, 1, 0, RopeArgs{L, qkv, slot, pos, inv_freq, concentration, heads, q}),
      "rope");
}

void PersistentDecode::attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot,
                                 const int32_t* pos, int rows, int heads, int window, float scale, int splits,
                                 float* scratch, Quantized1x128 quant, int32_t* merge_count) {
  const int group = heads / L.kv_heads;
  if (L.fp8() || L.f16) fail_plain("PersistentDecode::attention: the persistent kernel reads a BF16 KV cache only");
  if (L.d != 64 || heads % L.kv_heads || group > 16 || group * L.d % 128 || !merge_count || !quant.q)
    fail_plain("PersistentDecode::attention: head_dim 64, at most 16 query heads a KV head, whole 128-column blocks");
  const DecodeAttentionArgs a{L, q, sinks, slot, pos, heads, window, scale * kLog2e, splits, scratch, merge_count,
                              nullptr, quant};
  // The attention phase is staged at two blocks an SM (attention_phase).
  add(PersistentPhase::of(PhaseKind::Attention, L.kv_heads, rows, splits,
                          decode_tc_smem(kThreads / 32, /*staged=*/blocks_per_sm_ == 2), a), "attention");
}

void PersistentDecode::moe_route(const float* x, const bf16* gain, int rows, int H, float eps, uint8_t* q, float* s,
                                 int ld, bf16* h_mxfp4, const bf16* router, const bf16* router_bias, int E, int k,
                                 float* logits, int32_t* counters, int32_t* idx, float* w, MoeSorted sorted) {
  if (k > 16 || k > E) fail_plain("PersistentDecode::moe_route: at most 16 experts per token");
  check_row(H, "PersistentDecode::moe_route");
  if (E > kThreads) fail_plain("PersistentDecode::moe_route: at most 256 experts");
  const int Hp = (H + 3) & ~3, smem = std::max(Hp + E, 3 * E + 1) * 4;
  // The top-k and the sort come with the experts' first GEMM (mxfp4_gemm), by every block, each
  // into its copy of the sorted routing.
  const int stride = round4(2 * E + 1 + moe_rows_max(rows, k, E));
  if (!mine_) {
    OSPREY_CUDA_CHECK(cudaMalloc(&mine_, size_t(grid_) * stride * sizeof(int32_t)));
    mine_stride_ = stride, mine_E_ = E;
  } else if (stride > mine_stride_ || E != mine_E_) {
    fail_plain("PersistentDecode::moe_route: every route of a plan has the same experts and rows");
  }
  pending_ = RouteChoicesArgs{logits, rows, k, idx, w, sorted};
  add(PersistentPhase::of(PhaseKind::Route, rows, (E + kExpertsPerRouteBlock - 1) / kExpertsPerRouteBlock, 1, smem,
                          RouteArgs{x, gain, H, eps, q, s, ld, h_mxfp4, router, router_bias, E, k, logits, counters, idx,
                                    w, sorted}), "route");
}

void PersistentDecode::mxfp4_gemm(const char* name, const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows,
                                  float* y, const SwigluOut& swiglu) {
  if (W.N % 16 || W.K % 32 || W.experts < 1 || W.experts > kMaxExperts)
    fail_plain("PersistentDecode::mxfp4_gemm: N a multiple of 16, K of 32, 1 to 256 experts");
  if (swiglu.a && W.N % 2) fail_plain("PersistentDecode::mxfp4_gemm: the SwiGLU epilogue needs an even N");
  if (!mine_) fail_plain("PersistentDecode::mxfp4_gemm: the experts' GEMMs come after a route (moe_route)");
  // The phase reads the block's routing copy in place of rows' seg, active and row_live: the rows
  // must be a route's (active experts, padding rows marked) over the route's experts.
  if (!rows.active || !rows.row_live || W.experts != mine_E_ || rows.active_max > mine_E_)
    fail_plain("PersistentDecode::mxfp4_gemm: the rows must be the route's: its " + std::to_string(mine_E_) +
               " experts, the active list and the padding rows");
  const int ks = mxfp4_k_splits(W.N, W.K, sm_count());  // the per-op kernel's splits: the same sums
  const int segments = rows.active ? rows.active_max : W.experts;
  int smem = int(mxfp4_decode_smem(1, W.K, ks, 1, persistent_ring(blocks_per_sm_)));
  if (pending_.logits) smem = std::max(smem, route_choices_smem(pending_.T, mine_E_, pending_.k));
  add(PersistentPhase::of(PhaseKind::Mxfp4Gemm, skinny_grid_x(W.N, ks), segments, 1, smem,
                          Mxfp4Args{W, x, rows, y, ks, swiglu, mine_, mine_stride_, mine_E_, pending_}), name);
  pending_ = {};
}

void PersistentDecode::combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w,
                                    const int32_t* idx, int rows, int k, int H, const bf16* gain, float eps, uint8_t* q,
                                    float* s, int ld) {
  check_row(H, "PersistentDecode::combine_norm");
  if (k > kMaxTopK) fail_plain("PersistentDecode::combine_norm: at most 8 experts per token");
  add(PersistentPhase::of(PhaseKind::CombineNorm, rows, 1, 1, H * 4,
                          CombineArgs{x, y, pair_row, w, idx, k, H, gain, eps, q, s, ld}), "combine+norm");
}

void PersistentDecode::argmax(const float* logits, int rows, int V, int32_t* out) {
  if (argmax_rows_ < rows) {
    if (argmax_val_) cudaFree(argmax_val_), cudaFree(argmax_idx_);
    OSPREY_CUDA_CHECK(cudaMalloc(&argmax_val_, size_t(rows) * kArgmaxChunks * sizeof(float)));
    OSPREY_CUDA_CHECK(cudaMalloc(&argmax_idx_, size_t(rows) * kArgmaxChunks * sizeof(int)));
    argmax_rows_ = rows;
  }
  const ArgmaxArgs a{logits, V, argmax_val_, argmax_idx_, out, rows};
  add(PersistentPhase::of(PhaseKind::ArgmaxPartial, rows, kArgmaxChunks, 1, 0, a), "argmax");
  add(PersistentPhase::of(PhaseKind::ArgmaxFinal, (rows * 32 + kThreads - 1) / kThreads, 1, 1, 0, a), "argmax final");
}

void PersistentDecode::finish() {
  if (host_.empty()) fail_plain("PersistentDecode: no phases");
  int smem = 0;
  for (const PersistentPhase& p : host_) smem = std::max(smem, p.smem);
  if (smem > kMaxDynamicSmem) fail_plain("PersistentDecode: a phase needs " + std::to_string(smem) + " bytes of shared memory");
  void* k = kernel_for(blocks_per_sm_);
  OSPREY_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int resident = 0;
  OSPREY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, k, kThreads, size_t(smem)));
  if (resident < blocks_per_sm_)
    fail_plain("PersistentDecode: " + std::to_string(blocks_per_sm_) + " blocks per SM do not fit (" +
               std::to_string(resident) + " with " + std::to_string(smem) + " bytes of shared memory)");
  smem_ = smem;
  // A counter per phase (zero), and one more that reads "complete" for phase 0's wait.
  std::vector<uint32_t> counters(host_.size() + 1, 0);
  counters.back() = uint32_t(grid_);
  OSPREY_CUDA_CHECK(cudaMalloc(&counter_, counters.size() * sizeof(uint32_t)));
  OSPREY_CUDA_CHECK(cudaMemcpy(counter_, counters.data(), counters.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
  OSPREY_CUDA_CHECK(cudaMalloc(&device_, host_.size() * sizeof(PersistentPhase)));
  OSPREY_CUDA_CHECK(cudaMemcpy(device_, host_.data(), host_.size() * sizeof(PersistentPhase), cudaMemcpyHostToDevice));
}

void PersistentDecode::launch(cudaStream_t s, uint64_t* timeline) const {
  if (!device_) fail_plain("PersistentDecode: launch before finish");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid_));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = size_t(smem_);
  cfg.stream = s;
  // Every block must be resident at once (they wait on each other): a cooperative launch
  // guarantees it or fails.
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const PersistentPhase* phases = device_;
  int n = int(host_.size());
  uint32_t* counters = counter_;
  void* args[] = {&phases, &n, &counters, &timeline};
  OSPREY_CUDA_CHECK(cudaLaunchKernelExC(&cfg, kernel_for(blocks_per_sm_), args));
}

}  // namespace osprey::cuda
