// Attention over the paged BF16 KV cache of the FP8 path.
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
  bf16 *k = nullptr, *v = nullptr;
  const int32_t* page_table = nullptr;  // full layers; null for a ring
  int max_pages = 0;                    // page-table row length
  int ring = 0;                         // ring layers: positions per slot
  int kv_heads = 0, d = 0;
};

// Writes k, v [rows][kv_heads][d] (fp32) as BF16 at (slot[r], pos[r]).
void kv_write(const KvLayerView& L, const float* k, const float* v, const int32_t* slot, const int32_t* pos, int rows,
              cudaStream_t s);

// out [rows][heads][d] = softmax-with-sink attention of q [rows][heads][d] over the keys of each
// row's slot: [max(0, pos - window + 1) or 0, pos]. The keys are split into `splits` ranges
// handled by separate blocks and merged (partials: scratch of rows*heads*splits*(d+2) floats);
// the sink enters only the first range's running max and sum, so it is counted exactly once.
void paged_attention(const KvLayerView& L, const float* q, const bf16* sinks, const int32_t* slot, const int32_t* pos,
                     float* out, int rows, int heads, int window, float scale, int splits, float* scratch,
                     cudaStream_t s);

// Prefill of one sequence on the tensor cores (FlashAttention-2 style, mma.sync BF16, fp32
// softmax state): queries of tokens 0..T-1 at positions p0.., all already written to the cache of
// `slot`. A block takes 64 query rows = (64 / group) tokens x the group of query heads that share
// one KV head, so each K/V tile is loaded once for the group. Q and P enter the tensor cores as
// BF16 (the CUDA-core paged_attention keeps them fp32). The sink starts each row's running max.
void flash_prefill(const KvLayerView& L, const float* q, const bf16* sinks, int slot, int p0, float* out, int T,
                   int heads, int window, float scale, cudaStream_t s);

}  // namespace osprey::cuda
