// Attention over the paged KV cache of the FP8 path: cache writes (rope_kv.cu), decode
// attention (attention_decode.cu) and prefill attention (attention_prefill.cu). The cache holds
// BF16 values; or (f16, --kv-cache-dtype fp16) FP16 values clipped at +-65,504, which the
// tensor-core kernels multiply with FP16 queries and weights (head_dim 64 only); or (k8/v8 set,
// --kv-cache-dtype fp8) E4M3 codes with a power-of-two exponent per (position, KV head) row,
// formats/kv_fp8.h (head_dim 64 only: the tensor-core kernels). formats/kv_dtype.h names them.
// Full-attention layers: pages of kPage positions, [pages][kPage][kv_heads][d] for K and for V,
// found through a per-slot page table [slots][max_pages]. Sliding-window layers: a ring of `ring`
// positions per slot, [slots][ring][kv_heads][d], position p at p % ring (ring >= window + the
// longest prefill chunk, so a chunk never overwrites keys its own queries still need).
// Rows: each query row r has a slot and a position; keys 0..pos (or the window) of its slot.
#pragma once
#include "kernels/cuda/ops.cuh"

namespace osprey::cuda {

constexpr int kPage = 64;

struct KvLayerView {
  uint16_t *k = nullptr, *v = nullptr;  // 16-bit cache: BF16 bits, or FP16 bits when f16
  uint8_t *k8 = nullptr, *v8 = nullptr;  // FP8 cache: codes, where k and v would be
  int8_t *k_exp = nullptr, *v_exp = nullptr;  // FP8 cache: row exponents [rows / kPage][kv_heads][kPage]
  __host__ __device__ bool fp8() const { return k8 != nullptr; }
  const int32_t* page_table = nullptr;  // full layers; null for a ring
  int max_pages = 0;                    // page-table row length
  int ring = 0;                         // ring layers: positions per slot
  int kv_heads = 0, d = 0;
  int64_t rows = 0;  // rows of k and v (each kv_heads x d): what TMA may read; 0: not known
  bool f16 = false;  // the 16-bit cache holds FP16 (--kv-cache-dtype fp16), not BF16
};

// Writes k, v [rows][kv_heads][d] (fp32) as BF16 (FP16 with L.f16, FP8 with L.fp8()) at (slot[r], pos[r]).
void kv_write(const KvLayerView& L, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int rows,
              cudaStream_t s);

// A fused QKV GEMM output qkv [rows][(heads + 2 kv_heads) d]: q heads YaRN-rotated into q
// [rows][heads][d]; k heads rotated and v written to the cache at (slot[r], pos[r]) as BF16
// (rope + kv_write in one kernel; the same arithmetic). decode_rows: the rows are decode rows (each
// its slot's newest position) and the next kernel is paged_attention with decode_rows, which may
// then start before this kernel waits on the one before it. bias (BF16 [(heads + 2 kv_heads) d],
// optional): added to each value as it is read (the add_bias a GEMM without one leaves).
void qkv_rope_to_cache(const KvLayerView& L, const float* qkv, const int32_t* slot, const int32_t* pos,
                       const float* inv_freq, float concentration, int rows, int heads, float* q, cudaStream_t s,
                       bool decode_rows = false, const bf16* bias = nullptr);

// Where a kernel writes its output rows quantized for the next FP8 GEMM: codes [rows][K] and
// 1x128 scales [K/128][ld] (formats/fp8.h's activation layout). q == null: not wanted.
struct Quantized1x128 {
  uint8_t* q = nullptr;
  float* s = nullptr;
  int ld = 0;
};

// out [rows][heads][d] = softmax-with-sink attention of q [rows][heads][d] over the keys of each
// row's slot: [max(0, pos - window + 1) or 0, pos]. The keys are split into `splits` ranges
// handled by separate warps or blocks and merged (partials: scratch of rows*heads*splits*(d+2)
// floats); the sink enters only the first range's state, so it is counted exactly once. d = 64
// runs on the tensor cores (Q and P as hi + lo BF16 pairs, FP16 pairs over the FP16 cache), other d
// on the CUDA cores (the BF16 cache only). out may be
// null when `quant` takes the output (quantized as quantize_act_1x128 would). merge_count
// (optional; d = 64 with whole 128-column blocks per KV head): rows x kv_heads counters, zero before
// the first call and left zero: the block that finishes the last split of a (row, KV head) merges
// it in its tail, bit-identical to the merge kernel, which is then not launched. decode_rows: each
// row is its slot's newest position and the kernel before wrote no other K/V of these slots; the
// d = 64 kernel then loads tiles of earlier positions before its PDL wait.
void paged_attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot, const int32_t* pos,
                     float* out, int rows, int heads, int window, float scale, int splits, float* scratch,
                     cudaStream_t s, Quantized1x128 quant = {}, int32_t* merge_count = nullptr,
                     bool decode_rows = false);
// The split count for a decode step of `rows` rows: with up to 8 warps per split, enough warps
// over all (row, KV head) pairs to keep the memory system busy (~1024); at most max_splits.
int decode_attention_splits(int rows, int kv_heads, int max_splits);
// The warps a split of the head_dim-64 tensor-core decode kernel (up to 8, while rows x KV heads x
// splits x warps x 2 <= 1024): its blocks' warps split the keys and merge in that order, so the
// count is part of its sums (the persistent decode kernel runs 8).
int decode_attention_warps(int rows, int kv_heads, int splits);

// Prefill of one sequence on the tensor cores (attention_prefill.cu; FlashAttention-2 style,
// mma.sync BF16, fp32 softmax state in base 2): queries of tokens 0..T-1 at positions p0.., all
// already written to the cache of `slot`. A block takes 128 query rows = (128 / group) tokens x
// the group of query heads that share one KV head, so each K/V tile is loaded once for the group;
// 64-key tiles are double-buffered through cp.async and read by ldmatrix, and only tiles that
// cross a row's causal or window edge are masked. Q and P enter the tensor cores as BF16, or as
// FP16 over the FP16 cache (the CUDA-core paged_attention keeps them fp32). The sink seeds each row's running max and sum.
// splits > 1 (split-KV): the keys of each block of queries are cut into `splits` ranges run by
// separate blocks (partial states in `scratch`, T * heads * splits * (d + 2) floats), then merged;
// the sink enters the first range only. A chunk deep in a long sequence then runs on many more
// blocks than its queries alone fill (a 168-token chunk at 100k positions: 84 blocks otherwise).
// quant (optional): the result quantized for the o-projection (rows 0..T-1 of quant; offset its
// pointers for a chunk's first row), the codes and scales quantize_act_1x128 makes of `out`; then
// `out` is scratch (written only where the quantization cannot be fused: split-KV, or a head group
// other than 8, whose 128-column blocks a warp's rows do not cover).
// On Hopper, full-attention layers with the BF16 cache and page tables (L.rows known), one split
// and whole head groups in a block's 128 rows run the same attention on wgmma instead
// (FlashAttention-3's structure: a producer warp streams 128-key tiles by TMA, two consumer
// warpgroups; flash_prefill_on_wgmma says which); its running maxima move at other key tiles, so
// its results differ from the mma.sync kernel's in the last bits of P's BF16 rounding.
void flash_prefill(const KvLayerView& L, const float* q, const bf16* sinks, int slot, int p0, float* out, int T,
                   int heads, int window, float scale, cudaStream_t s, int splits = 1, float* scratch = nullptr,
                   Quantized1x128 quant = {});
bool flash_prefill_on_wgmma(const KvLayerView& L, int heads, int window, int splits);
// The split count for a chunk of T tokens after p0 positions: enough blocks for about 8 waves, at
// least 1024 keys per split, at most 32 and what scratch_floats holds; 1 for windowed layers.
int flash_prefill_splits(int T, int p0, int heads, int kv_heads, int window, size_t scratch_floats);

}  // namespace osprey::cuda
