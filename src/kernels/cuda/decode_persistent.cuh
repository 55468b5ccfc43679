// The persistent decode kernel: a whole decode step (embedding, every layer, unembedding, greedy
// token selection) as one launch of one block per SM. The step is planned once per batch size as
// a list of phases, each the body of one of the kernel-per-op path's kernels (phase_sync.cuh) over
// its own virtual grid; the persistent blocks take a phase's virtual blocks in turn (round robin,
// continuing where the phase before ended) and wait on a counter instead of a kernel boundary, so a
// block that finishes a phase starts streaming the weights of its next one while others still
// work. The arithmetic is the per-op kernels' own, with the same roundings and the same order of
// fp32 sums, so a step's logits are the per-op step's bits: the dense GEMMs take fp8_gemm_dense's
// K-splits, the norms sum as 1,024-thread blocks do (rmsnorm_quantize_row's VTHREADS), and the
// attention's KV splits are decode_attention_splits' (the model refuses a plan whose per-op kernel
// would run fewer than 8 warps a split).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"

namespace osprey::cuda {

// One phase of the plan (the argument block of its body; defined in decode_persistent.cu).
struct PersistentPhase;
// What the experts' first GEMM phase routes first: the top-k and sort of moe_route's logits.
struct RouteChoicesArgs {
  const float* logits = nullptr;  // [T][E]; null: no routing before this phase
  int T = 0, k = 0;
  int32_t* idx = nullptr;
  float* w = nullptr;
  MoeSorted sorted;
};

class PersistentDecode {
 public:
  // blocks_per_sm: the persistent grid's blocks per SM (1: every body keeps its registers; 2:
  // twice the warps streaming, bodies capped at 128 registers).
  explicit PersistentDecode(int blocks_per_sm = 1);
  ~PersistentDecode();
  PersistentDecode(const PersistentDecode&) = delete;
  PersistentDecode& operator=(const PersistentDecode&) = delete;

  int grid() const { return grid_; }
  int phases() const;
  // The phases' names: each kind's, after the label given last (e.g. "layer 3").
  const std::vector<std::string>& names() const { return names_; }
  void label(std::string l) { label_ = std::move(l); }

  // The phases, in step order; each takes what its per-op kernel's launcher takes.
  // x[t] = embedding of tokens[t]; its RMSNorm with gain quantized (codes q [rows][H], scales [H/128][ld]).
  void embed_norm(const bf16* table, const int32_t* tokens, float* x, int rows, int H, const bf16* gain, float eps,
                  uint8_t* q, float* s, int ld);
  // fp8_gemm_dense (name: the phase's, e.g. "qkv").
  void fp8_gemm(const char* name, const uint8_t* W, const float* ws, int ws_stride, const bf16* bias, const uint8_t* x,
                const float* xs, int x_ld, float* y, int y_ld, bool accumulate, int N, int K, int rows);
  // qkv_rope_to_cache with decode_rows.
  void qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                         const float* inv_freq, float concentration, int rows, int heads, float* q);
  // paged_attention (d = 64, the tensor-core kernel with its merge in the tail and the output
  // quantized) with decode_rows. Its blocks' 8 warps split the keys as the per-op kernel's do
  // where that one runs 8 warps a split (decode_attention_warps): only there the same sums.
  void attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot, const int32_t* pos,
                 int rows, int heads, int window, float scale, int splits, float* scratch, Quantized1x128 quant,
                 int32_t* merge_count);
  // moe_route (the per-token front) with h_mxfp4. Its top-k and sort run at the start of the next
  // mxfp4_gemm phase on every block, each into a routing copy of its own that both expert GEMMs
  // of the layer read (the same choices and rows as moe_route's, found the same way by every block:
  // moe_route_body.cuh route_choices_block); block 0 also fills idx, w and sorted, which the
  // combine reads.
  void moe_route(const float* x, const bf16* gain, int rows, int H, float eps, uint8_t* q, float* s, int ld,
                 bf16* h_mxfp4, const bf16* router, const bf16* router_bias, int E, int k, float* logits,
                 int32_t* counters, int32_t* idx, float* w, MoeSorted sorted);
  // m_grouped_mxfp4_gemm_bf16_contiguous (the decode path's row body, 8 rows a pass), with
  // swiglu.a: the clamped SwiGLU of the outputs into swiglu.a as its epilogue (what moe_swiglu_bf16
  // without a bias makes of y, bit for bit, for the rows the next GEMM reads; y is not written).
  void mxfp4_gemm(const char* name, const Mxfp4ExpertsView& W, const bf16* x, const ExpertRows& rows, float* y,
                  const SwigluOut& swiglu = {});
  // moe_combine_norm.
  void combine_norm(float* x, const float* y, const int32_t* pair_row, const float* w, const int32_t* idx, int rows,
                    int k, int H, const bf16* gain, float eps, uint8_t* q, float* s, int ld);
  // argmax_rows: out[r] = argmax of logits [rows][V].
  void argmax(const float* logits, int rows, int V, int32_t* out);

  // Copies the plan to the device (after the last phase is added).
  void finish();
  // One step: the plan's phases in one launch (capturable in a graph). timeline (optional, null:
  // none): [phases][grid][4] uint64 = the block's SM, the phase's start on that block, the time its
  // first wait returned (0: the block had no work in the phase) and its end (before its arrival),
  // in globaltimer ns.
  void launch(cudaStream_t s, uint64_t* timeline = nullptr) const;

 private:
  void add(const PersistentPhase& p, const char* kind);
  std::vector<std::string> names_;
  std::string label_;
  int blocks_per_sm_ = 1, grid_ = 0, vblocks_ = 0, smem_ = 0;
  std::vector<PersistentPhase> host_;
  PersistentPhase* device_ = nullptr;
  uint32_t* counter_ = nullptr;  // [phases + 1]
  float* argmax_val_ = nullptr;
  int* argmax_idx_ = nullptr;
  int argmax_rows_ = 0;
  int32_t* mine_ = nullptr;  // the blocks' routing copies [grid][mine_stride_] (Mxfp4Args::mine)
  int mine_stride_ = 0, mine_E_ = 0;
  RouteChoicesArgs pending_;  // the last moe_route's, for the next mxfp4_gemm
};

}  // namespace osprey::cuda
