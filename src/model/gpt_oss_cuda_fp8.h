// The Hopper path: gpt-oss on one GPU. The dense GEMM weights (attention, unembedding) are FP8
// e4m3 128x128 block-scaled (converted on the GPU at load, bit-identical to model/gpt_oss_fp8.h),
// their activations quantized in 1x128 blocks, or (dense = Bf16) BF16 with BF16 activations; the experts stay MXFP4 as the checkpoint ships
// them, multiplied with BF16 activations (kernels/cuda/moe_gemm_mxfp4.cuh), or (experts = Fp8)
// are converted to FP8 like the dense weights; a paged BF16 (or FP8) KV cache. The model keeps the KV memory; where each sequence's positions live
// is the engine's block manager's decision (engine/kv_blocks.h), handed over as block tables per
// slot (a slot is a row of the page tables). One forward runs a step's chunks together: every
// decode token and every prompt chunk, one set of GEMMs over all rows, decode attention for the
// single tokens and flash attention for the chunks; a step of single tokens only runs as one CUDA
// graph per batch-size bucket. Plain C++ interface (no CUDA types).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/kv_dtype.h"
#include "model/gpt_oss_weights.h"

namespace osprey {

class GptOssCudaFp8 {
 public:
  static constexpr int kBlockPositions = 64;  // positions per KV block (the kernels' page)
  // How the experts' weights live on the GPU: MXFP4 as shipped (4.25 bits a weight, exact, BF16
  // activations), or converted to FP8 128x128 blocks (8 bits, FP8 activations).
  enum class ExpertWeights { Mxfp4, Fp8 };
  // How the dense layers' weights (q, k, v, o, the unembedding) live on the GPU: FP8 128x128
  // blocks with FP8 activations (the default: half the bytes), or BF16 as the checkpoint ships
  // them, multiplied by cuBLAS on BF16-rounded activations (the fidelity of the BF16 path).
  enum class DenseWeights { Fp8, Bf16 };
  // How the KV cache holds keys and values (formats/kv_dtype.h): BF16; FP16 (the same bytes, three
  // more mantissa bits, FP16 Q and P in the tensor-core attention; head_dim 64 only); or E4M3 codes
  // with a power-of-two exponent per (position, KV head) row (formats/kv_fp8.h: half the bytes a
  // decode step reads, twice the positions; head_dim 64 only).
  using KvCache = KvDtype;
  struct Options {
    int slots = 1;              // sequences in one step at most (page-table rows)
    int max_context = 131072;   // positions per sequence (page-table width)
    // Rows of one forward (the step's token budget; scratch size). 8192 by default: an 8k prompt's
    // prefill took 193 ms in 2048-row chunks and 140 ms in one (20b, H200), and vLLM's server
    // batches as many tokens a step.
    static constexpr int kDefaultMaxRows = 8192;
    int max_rows = kDefaultMaxRows;
    bool graphs = true;         // decode steps as CUDA graphs
    // KV blocks in the pool: > 0 that many; 0: what gpu_memory_utilization leaves after the
    // weights and the scratch (cudaMemGetInfo at construction).
    int64_t kv_blocks = 0;
    // Speculative decoding: draft tokens per slot a verify chunk may carry at most (decode steps
    // of slots * (1 + max_draft) rows are graphs; the logits buffer holds that many rows).
    int max_draft = 0;
    double gpu_memory_utilization = 0.90;  // fraction of the GPU's memory this process may hold
    // GEMMs of 32+ rows through cuBLASLt, and the experts of long prompt chunks through the grouped
    // wgmma GEMM (kernels/cuda/moe_gemm_fp8.cuh) (their FP8 products differ from exact fp32 sums by
    // ~1-2e-4 relative, measured); false: the skinny kernel everywhere (exact fp32 sums of the FP8
    // products).
    bool cublaslt = true;
    ExpertWeights experts = ExpertWeights::Mxfp4;  // a converted FP8 checkpoint has only Fp8
    DenseWeights dense = DenseWeights::Fp8;        // a converted FP8 checkpoint has only Fp8
    KvCache kv = KvCache::Bf16;
    // Decode steps of up to 8 rows (not speculative verify chunks) as one persistent kernel
    // (kernels/cuda/decode_persistent.cuh): MXFP4 experts, FP8 dense layers and a BF16 cache (other
    // formats are refused at construction); where the model's shapes allow it (head_dim 64, whole
    // 128-column blocks a KV head's queries; a batch whose per-op attention runs 8 warps a KV split,
    // so that the two paths sum alike), else kernel by kernel (persistent_decode(rows) says). Its
    // logits are the per-op path's bits. Off by default: it is still slower than the kernels one by
    // one (20b at 8k, batch 1, H100: 3.61-4.01 against 2.40 ms a step; docs/PERF.md).
    bool persistent_decode = false;
    int persistent_blocks_per_sm = 2;  // the persistent grid: 1 or 2 blocks per SM (2 measured faster)
  };
  GptOssCudaFp8(const GptOssWeights& w, const Options& opt);
  ~GptOssCudaFp8();

  const GptOssConfig& config() const;
  const Options& options() const;
  int kv_blocks() const;            // blocks the pool holds: ids 0 .. kv_blocks() - 1
  double kv_block_bytes() const;    // GPU bytes of one block (K and V of its group's layers)

  // Where slot's positions live: block tables of the full-attention and the sliding-window layers
  // (entry i: block of positions [64 i, 64 i + 64); -1: not held, never read).
  void set_blocks(int slot, std::span<const int32_t> full, std::span<const int32_t> sliding);

  // Token selection on the GPU: temperature <= 0 greedy, else sampled as Sampler::sample_from
  // samples with top_p, top_k and the request generator's draw u in [0, 1).
  struct RowSampling {
    float temperature = 0.0f, top_p = 1.0f;
    int top_k = 0;
    double u = 0.0;
  };
  // Tokens of a slot at positions start .. start + tokens.size() - 1; their K/V are written at
  // those positions, attention reads positions 0 .. of the slot's blocks. sample: the chunk's
  // last token gives a row of logits (a token).
  // verify: a speculative verify chunk (the slot's newest token and its drafts): every token
  // samples (gives a row), and its rows run as decode rows, each attending to the positions up
  // to its own (the chunk's K/V are written before any of its rows reads them).
  struct Chunk {
    int slot = 0, start = 0;
    std::span<const int32_t> tokens;
    bool sample = true;
    bool verify = false;
  };
  // Optional token masks of a step's sampling rows: compute() runs on the host while the forward
  // runs on the GPU, then row(i) is the i-th sampling row's mask (nullptr: none; bit t % 32 of
  // word t / 32 set: token t allowed), applied on the GPU before the argmax or the draw.
  struct Masks {
    std::function<void()> compute;
    std::function<const uint32_t*(size_t)> row;
  };
  // One forward over the chunks (distinct slots, at most options().max_rows tokens in all): the
  // logits [vocab] of each sampling row (a sampling chunk's last token, every token of a verify
  // chunk), in chunk order.
  std::vector<std::vector<float>> forward_logits(std::span<const Chunk> chunks);
  // The same forward, each sampling row's next token selected on the GPU with rows[i] (one per
  // sampling row); no logits are copied.
  std::vector<int32_t> forward_select(std::span<const Chunk> chunks, std::span<const RowSampling> rows,
                                      const Masks* masks = nullptr);
  // The last layer's hidden state (the final norm's input, [hidden]) of the k-th sampling row of
  // the last forward_select or forward_logits (for draft heads).
  std::vector<float> last_hidden(size_t k);
  // Every position's logits [T][vocab] of one chunk (any length: run in pieces of max_rows).
  std::vector<float> forward_all_logits(const Chunk& chunk);

  // Whether a decode step of `rows` single tokens runs as the persistent kernel.
  bool persistent_decode(int rows) const;
  // The persistent kernel's per-SM timeline of one decode step (bench --timeline): the step after
  // this call runs with time stamps (outside its graph), then decode_timeline() holds them.
  struct Timeline {
    int grid = 0;                     // persistent blocks
    std::vector<std::string> phases;  // each phase's name, in order
    // [phases][grid][4]: the block's SM, its start of the phase, when its first wait returned (0:
    // no work in the phase) and its end, in ns of the GPU's global timer.
    std::vector<uint64_t> stamps;
  };
  void record_timeline();
  const Timeline& decode_timeline() const;

  // Benchmarks: every block of the pool holds random keys and values, as after prefills (a decode
  // step then reads exactly the bytes a real one does).
  void randomize_kv();
  void synchronize();
  double weight_bytes() const;  // bytes of weights on the device
  // Device-to-device copy bandwidth (bytes read + written per second), the decode ceiling.
  static double measure_copy_bandwidth();
  static double device_memory_bytes();  // the current GPU's memory
  static std::string device_name();     // the current GPU's name, as the driver reports it

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey
