#include "model/gpt_oss_cuda_fp8.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <cuda_profiler_api.h>

#include "core/progress.h"
#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "model/gpt_oss_fp8.h"
#include "kernels/cpu/ops.h"
#include "model/gpt_oss_forward.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm_fp8.cuh"
#include "kernels/cuda/moe_gemm_fp8.cuh"
#include "kernels/cuda/moe_gemm_mxfp4.cuh"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/decode_persistent.cuh"
#include "kernels/cuda/sample.cuh"

namespace osprey {

namespace {

using cuda::DeviceArray;
using cuda::upload;
using cuda::upload_bf16;

// An FP8 weight on the device: codes [count][rows][cols], scales [count][round4(rows/128)][stride].
struct Fp8Weight {
  DeviceArray<uint8_t> q;
  DeviceArray<float> s;
  int count = 1, rows = 0, cols = 0;
  int stride() const { return fp8::round4(fp8::blocks(cols)); }
  size_t scales_per() const { return size_t(fp8::round4(fp8::blocks(rows))) * stride(); }
  const uint8_t* data(int e = 0) const { return q.ptr + size_t(e) * rows * cols; }
  const float* scale(int e = 0) const { return s.ptr + size_t(e) * scales_per(); }
  void allocate(int n, int r, int c) {
    count = n, rows = r, cols = c;
    q = DeviceArray<uint8_t>(size_t(n) * r * c);
    s = DeviceArray<float>(size_t(n) * scales_per());
    std::vector<float> ones(s.n, 1.0f);  // padding entries read by cuBLASLt
    OSPREY_CUDA_CHECK(cudaMemcpy(s.ptr, ones.data(), s.n * 4, cudaMemcpyHostToDevice));
  }
};

// One layer's MXFP4 experts on the device: the checkpoint's E2M1 codes and E8M0 scales, moved
// into the kernels' 16-row tiles (formats/mxfp4.h).
struct Mxfp4Weight {
  DeviceArray<uint8_t> tiles;
  int experts = 0, rows = 0, cols = 0;
  // The W4A8 prefill's conversion to FP8 (formats/mxfp4.h mxfp4_to_fp8): 128x128 blocks where
  // every one of every expert converts exactly (fp8_smax [E][ceil(rows/128)][KB]), else 1x128.
  int fp8_block_rows = 1;
  DeviceArray<uint8_t> fp8_smax;
  bool big_scales = true;  // some scale above 128 (mxfp4_any_big_scale): the decode's second multiply
  cuda::Mxfp4ExpertsView view(const cuda::bf16* bias) const {
    return {tiles.ptr, bias, experts, rows, cols, big_scales};
  }
};

struct Layer {
  bool sliding = false;
  Mxfp4Weight mx1, mx2;  // the experts (ExpertWeights::Mxfp4), else in mlp1 and mlp2 as FP8
  bool fused_qkv = false;  // q, k, v as one [Q + 2 KV][H] weight (when their row counts are multiples of 128)
  Fp8Weight qkv, q, k, v, o, mlp1, mlp2;
  DeviceArray<cuda::bf16> qkv16, o16;  // DenseWeights::Bf16: [Q + 2 KV][H] (q, k, v stacked), [H][Q]
  DeviceArray<cuda::bf16> qkv_bias;
  DeviceArray<cuda::bf16> attn_norm, q_bias, k_bias, v_bias, o_bias, sinks, mlp_norm, router_bias, b1, b2;
  DeviceArray<cuda::bf16> router;  // [E][H] as shipped, taken exactly to fp32 where used (routing as on the CPU)
};

// Activation rows quantized for one GEMM: codes [rows][K] and scales.
struct ActBuf {
  DeviceArray<uint8_t> q;
  DeviceArray<float> s;
  void reserve(size_t rows, int K) {
    if (q.n < rows * K) q = DeviceArray<uint8_t>(rows * K);
    const size_t ns = rows * size_t(fp8::blocks(K)) + 64;
    if (s.n < ns) s = DeviceArray<float>(ns);
  }
};


}  // namespace

struct GptOssCudaFp8::Impl {
  const GptOssConfig cfg;
  const Options opt;
  cudaStream_t stream{};
  std::unique_ptr<cuda::BlockFp8Gemm> lt;
  DeviceArray<cuda::bf16> embed, final_norm;
  Fp8Weight unembed;
  const bool dense_bf16 = opt.dense == DenseWeights::Bf16;
  DeviceArray<cuda::bf16> unembed16;  // dense_bf16: [vocab][H]
  std::vector<Layer> layers;
  DeviceArray<float> inv_freq;
  float concentration = 1.0f;
  double weight_bytes = 0;

  // KV cache: pages of kPage positions, page p + 1 holding the engine's block p (page 0 is the
  // dummy the padding rows of a decode bucket write to, through slot `opt.slots`, whose table
  // rows stay 0). Both layer groups share the pages: layer l keeps its K/V in storage row
  // store_of[l] (its index within its group) and finds its pages through its group's table.
  int max_pages = 0, total_pages = 0;
  std::vector<int> store_of;
  std::vector<DeviceArray<uint16_t>> kstore, vstore;  // [rows][total_pages][kPage][kv_heads][d], BF16 or FP16
  // opt.kv == Fp8: the codes in place of kstore, vstore, and the row exponents
  // [rows][total_pages][kv_heads][kPage] (formats/kv_fp8.h).
  const bool kv_fp8 = opt.kv == KvCache::Fp8;
  const bool kv_f16 = opt.kv == KvCache::Fp16;  // the 16-bit stores hold FP16 (formats/kv_dtype.h)
  std::vector<DeviceArray<uint8_t>> kstore8, vstore8;
  std::vector<DeviceArray<int8_t>> kexp, vexp;
  DeviceArray<int32_t> tables[2];                        // full, sliding: [slots + 1][max_pages]
  std::vector<int32_t> tables_host[2];

  // Scratch, sized at construction for `rows_max` rows (graphs need fixed buffers).
  int rows_max = 0, bucket_max = 0;
  DeviceArray<int32_t> d_tok, d_slot, d_pos, d_idx, d_seg, d_row_token, d_pair_row, d_out_id, d_active, d_route_count;
  DeviceArray<int32_t> d_merge_count;  // the attention merge tail's arrival counters, [rows][kv_heads], zero between uses
  DeviceArray<float> x, h, qkv, q, k, v, attn, rlogits, rw, t1, y, logits, split_scratch;
  ActBuf act_h, act_attn, act_moe, act_a;
  const bool mxfp4 = opt.experts == ExpertWeights::Mxfp4;
  DeviceArray<cuda::bf16> xb, ab;  // MXFP4 experts: their BF16 inputs (norm output, SwiGLU output)
  // MXFP4 experts of prompt chunks below the long chunks (more than kMxfp4PromptRowsHint rows an
  // expert typically): the norm output's rows gathered by sorted row into the wgmma layout for
  // m_grouped_mxfp4_gemm_bf16_wgmma_contiguous, whose first GEMM writes ab in that layout too.
  DeviceArray<cuda::bf16> xw;
  // dense_bf16: the norms' fp32 outputs for the dense GEMMs [rows][H], and any dense GEMM's input
  // rounded to BF16 [rows][max(H, Q)].
  DeviceArray<float> hn;
  DeviceArray<cuda::bf16> act16;
  // MXFP4 experts of long prompt chunks (lt_moe): one layer's experts decoded to BF16 (the first
  // GEMM's, then the second's) for cuBLAS's BF16 GEMMs, and its handle.
  DeviceArray<cuda::bf16> experts_bf16;
  // With FP8 dense layers the long chunks' MXFP4 experts run W4A8 instead: one layer's experts
  // converted to FP8 with power-of-two block scales (formats/mxfp4.h mxfp4_to_fp8) for cuBLASLt on
  // the FP8 rows the route kernel quantized. [0]: the first GEMM's, [1]: the second's; codes
  // [E][N][K], scales experts_fp8_sper an expert. The conversions run on conv_stream (low
  // priority), a layer ahead: layer l + 1's first matrix as soon as layer l's first GEMMs are done
  // with the buffer (conv_free[0]), so that it streams while the attention computes; the GEMMs
  // wait on conv_ready.
  const bool mxfp4_lt_fp8 = mxfp4 && !dense_bf16;
  DeviceArray<uint8_t> experts_fp8[2];
  DeviceArray<float> experts_fp8_s[2];
  size_t experts_fp8_sper = 0;
  cudaStream_t conv_stream{};
  cudaEvent_t conv_ready[2]{}, conv_free[2]{}, forward_start{};
  std::unique_ptr<cuda::Blas> blas;
  std::map<int, cudaGraphExec_t> graphs;
  // The persistent decode kernel's plan per decode bucket (built on the bucket's first step).
  std::map<int, std::unique_ptr<cuda::PersistentDecode>> persistent;
  // bench --timeline: the next persistent step records its stamps here.
  bool timeline_next = false;
  GptOssCudaFp8::Timeline timeline;

  cuda::KvLayerView view(int l) {
    cuda::KvLayerView L;
    const int r = store_of[l];
    if (kv_fp8) {
      L.k8 = kstore8[r].ptr, L.v8 = vstore8[r].ptr, L.k_exp = kexp[r].ptr, L.v_exp = vexp[r].ptr;
    } else {
      L.k = kstore[r].ptr, L.v = vstore[r].ptr, L.f16 = kv_f16;
    }
    L.kv_heads = cfg.num_kv_heads, L.d = cfg.head_dim;
    L.page_table = tables[layers[l].sliding ? 1 : 0].ptr, L.max_pages = max_pages;
    L.rows = int64_t(total_pages) * cuda::kPage;
    return L;
  }

  // A converted checkpoint's FP8 matrix, uploaded as is (same layout).
  void upload_fp8(Fp8Weight& dst, const fp8::Matrix& src) {
    dst.allocate(src.count, src.rows, src.cols);
    OSPREY_CUDA_CHECK(cudaMemcpy(dst.q.ptr, src.data(), dst.q.n, cudaMemcpyHostToDevice));
    OSPREY_CUDA_CHECK(cudaMemcpy(dst.s.ptr, src.scale(), dst.s.n * 4, cudaMemcpyHostToDevice));
    weight_bytes += double(dst.q.n) + 4.0 * dst.s.n;
  }
  // q, k, v of a converted checkpoint stacked: codes row after row, scale rows block after block.
  void upload_qkv(Layer& d, const GptOssFp8Layer& F, const GptOssLayerWeights& L) {
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), N = Q + 2 * KV;
    d.qkv.allocate(1, N, H);
    int row = 0;
    for (const fp8::Matrix* m : {&F.q, &F.k, &F.v}) {
      OSPREY_CUDA_CHECK(cudaMemcpy(d.qkv.q.ptr + size_t(row) * H, m->data(), m->codes_per_matrix(), cudaMemcpyHostToDevice));
      OSPREY_CUDA_CHECK(cudaMemcpy(d.qkv.s.ptr + size_t(row / fp8::kBlock) * d.qkv.stride(), m->scale(),
                                   size_t(fp8::blocks(m->rows)) * m->scale_stride() * 4, cudaMemcpyHostToDevice));
      row += m->rows;
    }
    d.qkv_bias = upload_qkv_bias(L);
    weight_bytes += double(d.qkv.q.n) + 4.0 * d.qkv.s.n;
  }
  void convert_dense(Fp8Weight& dst, const Bf16Matrix& src, DeviceArray<cuda::bf16>& staging) {
    dst.allocate(1, src.rows, src.cols);
    const size_t n = size_t(src.rows) * src.cols;
    if (staging.n < n) staging = DeviceArray<cuda::bf16>(n);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(staging.ptr, src.w, n * 2, cudaMemcpyHostToDevice, stream));
    cuda::quantize_bf16_block128(staging.ptr, src.rows, src.cols, dst.q.ptr, dst.s.ptr, dst.stride(), stream);
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    weight_bytes += double(dst.q.n) + 4.0 * dst.s.n;
  }
  // The q, k, v biases stacked as the fused weight's rows are.
  DeviceArray<cuda::bf16> upload_qkv_bias(const GptOssLayerWeights& L) const {
    const int Q = cfg.q_dim(), KV = cfg.kv_dim();
    std::vector<bf16> b(Q + 2 * KV);
    std::copy_n(L.q_bias, Q, b.begin());
    std::copy_n(L.k_bias, KV, b.begin() + Q);
    std::copy_n(L.v_bias, KV, b.begin() + Q + KV);
    return upload_bf16(b.data(), b.size());
  }
  // q, k, v stacked into one weight: block-aligned stacking quantizes exactly as separately.
  void convert_qkv(Layer& d, const GptOssLayerWeights& L, DeviceArray<cuda::bf16>& staging) {
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), N = Q + 2 * KV;
    d.qkv.allocate(1, N, H);
    const size_t n = size_t(N) * H;
    if (staging.n < n) staging = DeviceArray<cuda::bf16>(n);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(staging.ptr, L.q.w, size_t(Q) * H * 2, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(staging.ptr + size_t(Q) * H, L.k.w, size_t(KV) * H * 2, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(staging.ptr + size_t(Q + KV) * H, L.v.w, size_t(KV) * H * 2, cudaMemcpyHostToDevice, stream));
    cuda::quantize_bf16_block128(staging.ptr, N, H, d.qkv.q.ptr, d.qkv.s.ptr, d.qkv.stride(), stream);
    d.qkv_bias = upload_qkv_bias(L);
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    weight_bytes += double(d.qkv.q.n) + 4.0 * d.qkv.s.n;
  }
  void convert_experts(Fp8Weight& dst, const Mxfp4Experts& src, DeviceArray<uint8_t>& blocks, DeviceArray<uint8_t>& scales) {
    dst.allocate(src.experts, src.rows, src.cols);
    const size_t nb = size_t(src.experts) * src.rows * src.cols / 2, ns = nb / 16;
    if (blocks.n < nb) blocks = DeviceArray<uint8_t>(nb);
    if (scales.n < ns) scales = DeviceArray<uint8_t>(ns);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(blocks.ptr, src.blocks, nb, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(scales.ptr, src.scales, ns, cudaMemcpyHostToDevice, stream));
    const size_t per_b = nb / src.experts, per_s = ns / src.experts;
    for (int e = 0; e < src.experts; ++e)
      cuda::quantize_mxfp4_block128(blocks.ptr + e * per_b, scales.ptr + e * per_s, src.rows, src.cols,
                                    dst.q.ptr + size_t(e) * src.rows * src.cols, dst.s.ptr + e * dst.scales_per(),
                                    dst.stride(), stream);
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    weight_bytes += double(dst.q.n) + 4.0 * dst.s.n;
  }

  // The load's path for MXFP4 experts: a chunk of experts (about kChunkBytes of tiles) is re-laid
  // out on the host into one of two page-locked slots while the other slot's chunk copies to the
  // GPU, so the host's re-layout and the copies overlap.
  struct TileUploadRing {
    static constexpr size_t kChunkBytes = size_t(64) << 20;
    cuda::PinnedHostArray<uint8_t> slot[2];
    cudaEvent_t copied[2]{};
    TileUploadRing() {
      for (cudaEvent_t& e : copied) OSPREY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    ~TileUploadRing() {
      for (cudaEvent_t e : copied) cudaEventSynchronize(e), cudaEventDestroy(e);  // no copy out of a freed slot
    }
    // Waits until neither slot is being copied from (an event never recorded is complete).
    void wait_idle() {
      for (cudaEvent_t e : copied) OSPREY_CUDA_CHECK(cudaEventSynchronize(e));
    }
    TileUploadRing(const TileUploadRing&) = delete;
    TileUploadRing& operator=(const TileUploadRing&) = delete;
  };
  void upload_mxfp4(Mxfp4Weight& dst, const Mxfp4Experts& src, TileUploadRing& ring) {
    if (src.cols % kMxfp4Group || src.rows % kMxfp4TileRows)
      fail_plain("the MXFP4 expert path needs expert matrices whose rows are a multiple of 16 and columns of 32");
    dst.experts = src.experts, dst.rows = src.rows, dst.cols = src.cols;
    const size_t per_t = mxfp4_tiles_bytes(src.rows, src.cols), per_b = size_t(src.rows) * src.cols / 2,
                 per_s = per_b / kMxfp4GroupBytes, n = per_t * src.experts;
    if (n == 0) fail_plain("the MXFP4 expert path needs at least one expert of at least one row and column");
    dst.tiles = DeviceArray<uint8_t>(n);
    // If a call below fails, the error unwinds through dst's and the slots' frees: no copy may be
    // in flight into or out of them then.
    struct SyncOnExit {
      cudaStream_t st;
      ~SyncOnExit() { cudaStreamSynchronize(st); }
    } sync_on_exit{stream};
    const int chunk = int(std::clamp<size_t>(TileUploadRing::kChunkBytes / per_t, 1, size_t(src.experts)));
    ring.wait_idle();
    for (auto& slot : ring.slot)
      if (slot.n < chunk * per_t) slot = cuda::PinnedHostArray<uint8_t>(chunk * per_t);
    for (int e0 = 0, i = 0; e0 < src.experts; e0 += chunk, ++i) {
      const int ne = std::min(chunk, src.experts - e0), s = i % 2;
      OSPREY_CUDA_CHECK(cudaEventSynchronize(ring.copied[s]));  // the slot's last copy is done
      mxfp4_relayout_experts(src.blocks + e0 * per_b, src.scales + e0 * per_s, ne, src.rows, src.cols, ring.slot[s].ptr);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(dst.tiles.ptr + e0 * per_t, ring.slot[s].ptr, ne * per_t, cudaMemcpyHostToDevice,
                                        stream));
      OSPREY_CUDA_CHECK(cudaEventRecord(ring.copied[s], stream));
    }
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    dst.big_scales = mxfp4_any_big_scale(src.scales, size_t(src.experts) * src.rows * (src.cols / kMxfp4Group));
    weight_bytes += double(n);
    if (mxfp4_lt_fp8 && opt.cublaslt) {
      const Mxfp4Fp8Blocks b = mxfp4_fp8_blocks(src.scales, src.experts, src.rows, src.cols);
      dst.fp8_block_rows = b.block_rows;
      if (b.block_rows == 128) dst.fp8_smax = upload(b.smax.data(), b.smax.size());
    }
  }

  Impl(const GptOssWeights& w, const Options& o) : cfg(w.config), opt(o) {
    if (opt.slots < 1 || opt.max_context < 1 || opt.max_rows < 1 || !(opt.gpu_memory_utilization > 0.0 && opt.gpu_memory_utilization <= 1.0))
      fail_plain("GptOssCudaFp8: bad options (slots, max_context and max_rows at least 1, gpu_memory_utilization in (0, 1])");
    if (opt.persistent_blocks_per_sm != 1 && opt.persistent_blocks_per_sm != 2)
      fail_plain("GptOssCudaFp8: the persistent decode kernel runs 1 or 2 blocks per SM");
    if (cfg.hidden % 16 || cfg.q_dim() % 16 || cfg.intermediate % 16 || cfg.head_dim % 8)
      fail_plain("the FP8 CUDA path needs hidden, heads*head_dim and intermediate sizes that are multiples of 16");
    if (kv_fp8 && cfg.head_dim != 64)
      fail_plain("--kv-cache-dtype fp8 runs on the tensor-core attention kernels, head_dim 64; this model's is " +
                 std::to_string(cfg.head_dim) + " (use bf16)");
    if (kv_f16 && cfg.head_dim != 64)
      fail_plain("--kv-cache-dtype fp16 runs on the tensor-core attention kernels, head_dim 64; this model's is " +
                 std::to_string(cfg.head_dim) + " (use bf16)");
    if (opt.persistent_decode && (dense_bf16 || !mxfp4))
      fail_plain("the persistent decode kernel runs MXFP4 experts with FP8 dense layers (--weights mxfp4 --dense fp8); "
                 "this run's are " + std::string(mxfp4 ? "mxfp4" : "fp8") + " experts with " +
                 (dense_bf16 ? "bf16" : "fp8") + " dense layers");
    if ((kv_fp8 || kv_f16) && opt.persistent_decode)
      fail_plain(std::string("--kv-cache-dtype ") + kv_dtype_name(opt.kv) +
                 " and --persistent-decode: the persistent decode kernel reads a BF16 KV cache only");
    OSPREY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    lt = std::make_unique<cuda::BlockFp8Gemm>(stream);
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate, E = cfg.num_experts;
    if (mxfp4 && w.fp8)
      fail_plain("this checkpoint was converted to FP8 (`osprey convert`): its experts are no longer MXFP4; run it with "
                 "--weights fp8, or use the original checkpoint");
    if (dense_bf16 && w.fp8)
      fail_plain("this checkpoint was converted to FP8 (`osprey convert`): its dense layers are no longer BF16; run it "
                 "with --dense fp8, or use the original checkpoint");
    const std::string what = w.fp8 ? "loading fp8 weights to the GPU"
                                   : std::string("loading weights to the GPU (experts ") + (mxfp4 ? "mxfp4" : "fp8") +
                                         ", dense " + (dense_bf16 ? "bf16" : "fp8") + ")";
    Progress progress(what.c_str(), cfg.num_layers + 1);
    DeviceArray<cuda::bf16> staging;
    DeviceArray<uint8_t> blocks, scales;
    TileUploadRing tiles_ring;
    embed = upload_bf16(w.embed.w, size_t(cfg.vocab) * H);
    final_norm = upload_bf16(w.final_norm, H);
    if (dense_bf16) {
      unembed16 = upload_bf16(w.unembed.w, size_t(cfg.vocab) * H);
      weight_bytes += 2.0 * cfg.vocab * H;
    } else if (w.fp8) {
      upload_fp8(unembed, w.fp8->unembed);
    } else {
      convert_dense(unembed, w.unembed, staging);
    }
    weight_bytes += 2.0 * cfg.vocab * H;
    progress.advance(1);
    for (const GptOssLayerWeights& L : w.layers) {
      Layer d;
      d.sliding = L.sliding;
      d.attn_norm = upload_bf16(L.attn_norm, H);
      d.q_bias = upload_bf16(L.q_bias, Q);
      d.k_bias = upload_bf16(L.k_bias, KV);
      d.v_bias = upload_bf16(L.v_bias, KV);
      d.o_bias = upload_bf16(L.o_bias, H);
      d.sinks = upload_bf16(L.sinks, cfg.num_heads);
      d.mlp_norm = upload_bf16(L.mlp_norm, H);
      d.router_bias = upload_bf16(L.router_bias, E);
      d.b1 = upload_bf16(L.mlp1.bias, size_t(E) * 2 * I);
      d.b2 = upload_bf16(L.mlp2.bias, size_t(E) * H);
      d.router = upload_bf16(L.router.w, size_t(E) * H);
      d.fused_qkv = dense_bf16 || (Q % fp8::kBlock == 0 && KV % fp8::kBlock == 0);
      // The dense layers: BF16 as shipped, a converted checkpoint's FP8 as is, or converted to FP8.
      if (dense_bf16) {
        std::vector<bf16> qkv16_host(size_t(Q + 2 * KV) * H);
        std::copy_n(L.q.w, size_t(Q) * H, qkv16_host.begin());
        std::copy_n(L.k.w, size_t(KV) * H, qkv16_host.begin() + size_t(Q) * H);
        std::copy_n(L.v.w, size_t(KV) * H, qkv16_host.begin() + size_t(Q + KV) * H);
        d.qkv16 = upload_bf16(qkv16_host.data(), qkv16_host.size());
        d.qkv_bias = upload_qkv_bias(L);
        d.o16 = upload_bf16(L.o.w, size_t(H) * Q);
        weight_bytes += 2.0 * (qkv16_host.size() + size_t(H) * Q);
      } else if (w.fp8) {
        const GptOssFp8Layer& F = w.fp8->layers[layers.size()];
        if (d.fused_qkv) upload_qkv(d, F, L);
        else upload_fp8(d.q, F.q), upload_fp8(d.k, F.k), upload_fp8(d.v, F.v);
        upload_fp8(d.o, F.o);
      } else {
        if (d.fused_qkv) {
          convert_qkv(d, L, staging);
        } else {
          convert_dense(d.q, L.q, staging);
          convert_dense(d.k, L.k, staging);
          convert_dense(d.v, L.v, staging);
        }
        convert_dense(d.o, L.o, staging);
      }
      // The experts: a converted checkpoint's FP8 as is, MXFP4 as shipped, or converted to FP8.
      if (w.fp8) {
        const GptOssFp8Layer& F = w.fp8->layers[layers.size()];
        upload_fp8(d.mlp1, F.mlp1);
        upload_fp8(d.mlp2, F.mlp2);
      } else if (mxfp4) {
        upload_mxfp4(d.mx1, L.mlp1, tiles_ring);
        upload_mxfp4(d.mx2, L.mlp2, tiles_ring);
      } else {
        convert_experts(d.mlp1, L.mlp1, blocks, scales);
        convert_experts(d.mlp2, L.mlp2, blocks, scales);
      }
      weight_bytes += 2.0 * E * H + 2.0 * (E * 3 * I + E * H);  // the BF16 router, the experts' biases
      progress.advance(1);
      layers.push_back(std::move(d));
    }
    progress.finish();
    if (mxfp4_lt_fp8 && opt.cublaslt) {
      int blocks128 = 0;
      for (const Layer& L : layers) blocks128 += (L.mx1.fp8_block_rows == 128) + (L.mx2.fp8_block_rows == 128);
      std::fprintf(stderr, "osprey: MXFP4 experts of long prompt chunks run W4A8: %d of %d expert matrices convert "
                   "exactly to FP8 in 128x128 blocks, the rest in 1x128 blocks\n", blocks128, 2 * int(layers.size()));
    }
    const cpu::RopeTable rope = gpt_oss_rope_table(cfg);
    inv_freq = upload(rope.inv_freq.data(), rope.inv_freq.size());
    concentration = rope.concentration;

    // Scratch for the larger of a prefill chunk and the largest decode bucket.
    bucket_max = 1;
    if (opt.max_draft < 0 || opt.max_draft > 64) fail_plain("max_draft must be in [0, 64]");
    while (bucket_max < opt.slots * (1 + opt.max_draft)) bucket_max *= 2;
    rows_max = std::max(opt.max_rows, bucket_max);
    const int R = rows_max, P = cuda::moe_rows_max(R, cfg.experts_per_token, E);
    const int R4 = fp8::round4(R);
    d_tok = DeviceArray<int32_t>(R), d_slot = DeviceArray<int32_t>(R), d_pos = DeviceArray<int32_t>(R), d_out_id = DeviceArray<int32_t>(R);
    d_idx = DeviceArray<int32_t>(size_t(R) * cfg.experts_per_token), d_seg = DeviceArray<int32_t>(E + 1), d_active = DeviceArray<int32_t>(E);
    d_row_token = DeviceArray<int32_t>(P), d_pair_row = DeviceArray<int32_t>(size_t(R) * cfg.experts_per_token);
    x = DeviceArray<float>(size_t(R4) * H), h = DeviceArray<float>(size_t(R4) * H), q = DeviceArray<float>(size_t(R4) * Q);
    qkv = DeviceArray<float>(size_t(R4) * (Q + 2 * KV));
    k = DeviceArray<float>(size_t(R4) * KV), v = DeviceArray<float>(size_t(R4) * KV), attn = DeviceArray<float>(size_t(R4) * Q);
    rw = DeviceArray<float>(size_t(R) * cfg.experts_per_token), rlogits = DeviceArray<float>(size_t(R) * E);
    d_route_count = DeviceArray<int32_t>(R + 1);
    OSPREY_CUDA_CHECK(cudaMemset(d_route_count.ptr, 0, size_t(R + 1) * 4));
    d_merge_count = DeviceArray<int32_t>(size_t(R) * cfg.num_kv_heads);
    OSPREY_CUDA_CHECK(cudaMemset(d_merge_count.ptr, 0, d_merge_count.n * 4));
    t1 = DeviceArray<float>(size_t(P) * 2 * I), y = DeviceArray<float>(size_t(P) * H);
    logits = DeviceArray<float>(size_t(bucket_max) * cfg.vocab);
    // Attention partials: a decode bucket with its splits, or a prefill chunk without flash (1 split).
    split_scratch = DeviceArray<float>(size_t(std::max(bucket_max * decode_splits(), R)) * cfg.num_heads *
                                       (cfg.head_dim + 2));
    act_h.reserve(R4, H), act_attn.reserve(R4, Q);
    if (dense_bf16) {
      hn = DeviceArray<float>(size_t(R4) * H);
      act16 = DeviceArray<cuda::bf16>(size_t(R4) * std::max(H, Q));
      if (!blas) blas = std::make_unique<cuda::Blas>(stream);
    }
    if (mxfp4) {
      // xb holds the norm output by token, or (lt_moe) gathered by sorted row.
      xb = DeviceArray<cuda::bf16>(size_t(std::max(R4, P)) * mxfp4_act_cols(H));
      ab = DeviceArray<cuda::bf16>(size_t(P) * mxfp4_act_cols(I));
      if (rows_hint(R) > cuda::kMxfp4PromptRowsHint) xw = DeviceArray<cuda::bf16>(size_t(P) * mxfp4_act_cols(H));
      // Long chunks through cuBLAS(Lt) (kMxfp4LtRowsPerExpert, model/gpt_oss_forward.h): W4A8 with
      // FP8 dense layers, BF16 with BF16 ones.
      const bool long_chunks = opt.cublaslt && R * cfg.experts_per_token >= kMxfp4LtRowsPerExpert * E;
      if (long_chunks && mxfp4_lt_fp8) {
        experts_fp8[0] = DeviceArray<uint8_t>(size_t(E) * 2 * I * H);
        experts_fp8[1] = DeviceArray<uint8_t>(size_t(E) * H * I);
        for (int rows : {1, 128})
          experts_fp8_sper = std::max({experts_fp8_sper, mxfp4_fp8_scales_size(2 * I, H, rows),
                                       mxfp4_fp8_scales_size(H, I, rows)});
        const std::vector<float> ones(size_t(E) * experts_fp8_sper, 1.0f);
        for (auto& sc : experts_fp8_s) {
          sc = DeviceArray<float>(ones.size());
          OSPREY_CUDA_CHECK(cudaMemcpy(sc.ptr, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
        }
        int lo = 0, hi = 0;
        OSPREY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        OSPREY_CUDA_CHECK(cudaStreamCreateWithPriority(&conv_stream, cudaStreamNonBlocking, lo));
        for (cudaEvent_t* ev : {&conv_ready[0], &conv_ready[1], &conv_free[0], &conv_free[1], &forward_start})
          OSPREY_CUDA_CHECK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
        act_moe.reserve(P, H), act_a.reserve(P, I);
      } else if (long_chunks) {
        experts_bf16 = DeviceArray<cuda::bf16>(size_t(E) * std::max(size_t(2) * I * mxfp4_act_cols(H),
                                                                     size_t(H) * mxfp4_act_cols(I)));
        if (!blas) blas = std::make_unique<cuda::Blas>(stream);
      }
    } else {
      act_moe.reserve(P, H), act_a.reserve(P, I);
    }
    // KV cache: the pages both layer groups share, sized from what the GPU has left.
    max_pages = (opt.max_context + cuda::kPage - 1) / cuda::kPage;
    int group_layers[2] = {0, 0};
    for (const Layer& L : layers) store_of.push_back(group_layers[L.sliding ? 1 : 0]++);
    const int store_rows = std::max(group_layers[0], group_layers[1]);
    // K and V: bf16, or fp8 codes and a byte of exponent per (position, KV head).
    const double page_bytes =
        double(cuda::kPage) * 2 * store_rows * (kv_fp8 ? double(KV + cfg.num_kv_heads) : 2.0 * KV);
    block_bytes = page_bytes;
    if (opt.kv_blocks > 0) {
      total_pages = int(std::min<int64_t>(opt.kv_blocks, int64_t(1) << 30)) + 1;
    } else {
      size_t free_b = 0, total_b = 0;
      OSPREY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      // What this process may still take: its share of the card less what is in use, less room
      // for cuBLASLt's workspace, the graphs and the sampling scratch.
      const double budget = opt.gpu_memory_utilization * double(total_b) - double(total_b - free_b) - double(1ull << 30);
      total_pages = int(std::min(budget / page_bytes, double(1 << 30)));
      if (total_pages < 2)
        fail_plain("no GPU memory left for the KV cache (raise --gpu-memory-utilization: the weights and scratch take " +
                   std::to_string((total_b - free_b) >> 20) + " MiB of " + std::to_string(total_b >> 20) + ")");
    }
    for (int r = 0; r < store_rows; ++r) {
      if (kv_fp8) {
        const size_t codes = size_t(total_pages) * cuda::kPage * KV, exps = size_t(total_pages) * cuda::kPage * cfg.num_kv_heads;
        kstore8.emplace_back(codes), vstore8.emplace_back(codes);
        kexp.emplace_back(exps), vexp.emplace_back(exps);
        // A decode tile reads the exponents of all its 64 rows, written or not (a page's tail, the
        // padding rows' page 0), and masks those: zero exponents keep their scores and weights
        // finite. Codes of unwritten rows are never loaded (the kernels zero them), as in BF16.
        OSPREY_CUDA_CHECK(cudaMemset(kexp.back().ptr, 0, exps));
        OSPREY_CUDA_CHECK(cudaMemset(vexp.back().ptr, 0, exps));
      } else {
        kstore.emplace_back(size_t(total_pages) * cuda::kPage * KV);
        vstore.emplace_back(size_t(total_pages) * cuda::kPage * KV);
      }
    }
    for (int g = 0; g < 2; ++g) {
      tables_host[g].assign(size_t(opt.slots + 1) * max_pages, 0);
      tables[g] = upload(tables_host[g].data(), tables_host[g].size());
    }
    OSPREY_CUDA_CHECK(cudaMemset(x.ptr, 0, x.n * 4));
    const int group = cfg.num_heads / cfg.num_kv_heads;
    persistent_shapes = mxfp4 && !dense_bf16 && cfg.head_dim == 64 && group <= 16 && group * cfg.head_dim % 128 == 0 &&
                        cfg.experts_per_token <= 8 && cfg.hidden <= 4096;
    // The persistent plans of the buckets it runs, now: what does not fit (shared memory, blocks
    // an SM) is refused at load, not at the first step.
    for (int b = 1; b <= std::min(8, bucket_max); b *= 2)
      if (persistent_ok(b)) persistent_plan(b);
  }

  ~Impl() {
    cudaStreamSynchronize(stream);
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    if (h_masks) cudaFreeHost(h_masks), cudaFreeHost(h_mask_has);
    cudaStreamDestroy(stream);
    if (conv_stream) {
      cudaStreamSynchronize(conv_stream);
      for (cudaEvent_t ev : {conv_ready[0], conv_ready[1], conv_free[0], conv_free[1], forward_start}) cudaEventDestroy(ev);
      cudaStreamDestroy(conv_stream);
    }
  }

  // The most KV splits a decode step uses (the scratch is sized for it).
  int decode_splits() const { return std::clamp(opt.max_context / 256, 1, 64); }

  double block_bytes = 0;

  // A slot's block tables: entries that changed go to the device (one copy per run of them).
  void set_blocks(int slot, std::span<const int32_t> full, std::span<const int32_t> sliding) {
    check_slot(slot);
    const std::span<const int32_t> given[2] = {full, sliding};
    for (int g = 0; g < 2; ++g) {
      if (int(given[g].size()) > max_pages)
        fail_plain("slot " + std::to_string(slot) + " holds " + std::to_string(given[g].size() * cuda::kPage) +
                   " positions; the page tables hold " + std::to_string(max_pages * cuda::kPage) + " (max_context)");
      int32_t* row = tables_host[g].data() + size_t(slot) * max_pages;
      int run0 = -1;
      auto flush = [&](int end) {
        if (run0 < 0) return;
        const size_t at = size_t(slot) * max_pages + run0;
        OSPREY_CUDA_CHECK(cudaMemcpyAsync(tables[g].ptr + at, tables_host[g].data() + at, size_t(end - run0) * 4,
                                          cudaMemcpyHostToDevice, stream));
        run0 = -1;
      };
      for (int i = 0; i < int(given[g].size()); ++i) {
        const int32_t b = given[g][i];
        if (b >= total_pages - 1 || b < -1 || (g == 0 && b < 0))
          fail_plain("block " + std::to_string(b) + " is outside the KV pool of " + std::to_string(total_pages - 1));
        const int32_t page = b + 1;  // -1 (not held) reads the dummy page, which no real row reads
        if (row[i] != page) {
          row[i] = page;
          if (run0 < 0) run0 = i;
        } else {
          flush(i);
        }
      }
      flush(int(given[g].size()));
    }
  }

  // How a forward pass runs: rows [0, decode_rows) are single tokens (each its slot's newest
  // position: decode attention with attn_splits), then the prompt chunks, each on its rows with
  // flash attention. No prompt chunk: a decode step (the graph body).
  struct Prompt {
    int row0, count, slot, p0;
  };
  struct Pass {
    int decode_rows = 0;
    std::vector<Prompt> prompts;
    // cuBLASLt for the dense GEMMs of 32+ rows / the grouped wgmma GEMM (or cuBLAS, BF16) for the experts
    bool lt_dense = false, lt_moe = false;
    int attn_splits = 1;                    // decode attention: KV splits of the full layers
    // Some slot has several decode rows (a verify chunk): a row's earlier positions may be written
    // by this layer's rope kernel, so attention must not load them before its PDL wait.
    bool multi_row = false;
    bool decode_only() const { return prompts.empty(); }
    bool newest_only() const { return prompts.empty() && !multi_row; }
  };

  // Dense GEMM y [T][N] (+)= x . W^T + bias; the T activation rows already quantized: codes xq
  // [T][K], scales xs [K/128][ld]. From 32 rows on, cuBLASLt (prefill chunks and decode buckets of
  // 32+: captured in the step's graph like any kernel); below, the skinny kernel, whose 16-row
  // weight tiles re-read the activations per tile. cuBLASLt reads scales laid out for exactly
  // round4(T) rows.
  // bias_later (not accumulating): on the cuBLASLt path the bias may be left to the consumer of
  // `out`, which adds it as add_bias would where it next reads the rows; returns whether it was
  // left (the skinny kernel always adds it).
  bool dense(const Pass& pass, const Fp8Weight& W, const cuda::bf16* bias, const uint8_t* xq, const float* xs, int ld,
             float* out, int T, bool accumulate, float* tmp, bool bias_later = false) {
    const int N = W.rows, K = W.cols;
    if (pass.lt_dense && T >= 32 && ld == fp8::round4(T) && lt->available(ld, N, K)) {
      lt->run(W.data(), W.scale(), xq, xs, accumulate ? tmp : out, ld, N, K);
      if (accumulate) cuda::add_bias_accumulate(out, tmp, bias, T, N, stream);
      else if (!bias_later) cuda::add_bias(out, bias, T, N, stream);
      return !accumulate && bias_later;
    }
    cuda::fp8_gemm_dense(W.data(), W.scale(), W.stride(), bias, xq, xs, ld, out, N, accumulate, N, K, T, T, stream);
    return false;
  }
  bool dense(const Pass& pass, const Fp8Weight& W, const cuda::bf16* bias, const ActBuf& act, float* out, int T,
             bool accumulate, float* tmp, bool bias_later = false) {
    return dense(pass, W, bias, act.q.ptr, act.s.ptr, fp8::round4(T), out, T, accumulate, tmp, bias_later);
  }
  // dense_bf16: y [T][N] (+)= bf16(in [T][K]) . W^T + bias (W [N][K] BF16) through cuBLAS, fp32
  // sums; accumulate goes through h.
  void dense16(const cuda::bf16* W, const cuda::bf16* bias, const float* in, float* out, int T, int N, int K,
               bool accumulate) {
    cuda::to_bf16(in, act16.ptr, size_t(T) * K, stream);
    float* dst = accumulate ? h.ptr : out;
    blas->gemm_bf16(W, act16.ptr, dst, T, N, K);
    if (accumulate) cuda::add_bias_accumulate(out, dst, bias, T, N, stream);
    else cuda::add_bias(dst, bias, T, N, stream);
  }
  // Rows 0..T-1 of src quantized into act, whose scales have leading dimension ld (by default
  // round4(T): a forward of T rows).
  void quantize_dense(const float* src, ActBuf& act, int T, int K, int ld = 0) {
    cuda::quantize_act_1x128(src, nullptr, T, K, act.q.ptr, act.s.ptr, cuda::ActScales::dense(ld ? ld : fp8::round4(T)),
                             stream);
  }

  // Rows an expert typically gets in a forward of T rows (twice the mean, at most every token).
  int rows_hint(int T) const {
    const int E = cfg.num_experts, Kx = cfg.experts_per_token;
    return std::min(fp8::round4(T), 2 * ((T * Kx + E - 1) / E));
  }
  // The rows of the MXFP4 experts' first GEMM of a T-row forward, sorted by expert (the route
  // kernel's MoeSorted): each reads its token's norm output; the second GEMM's (second_rows) read
  // the SwiGLU's output rows in order.
  cuda::ExpertRows expert_rows(int T) const {
    const int E = cfg.num_experts, Kx = cfg.experts_per_token;
    cuda::ExpertRows rows;
    rows.seg = d_seg.ptr, rows.active = d_active.ptr, rows.active_max = std::min(E, T * Kx);
    rows.row_live = d_row_token.ptr, rows.x_rows = d_row_token.ptr, rows.rows = cuda::moe_rows_max(T, Kx, E);
    rows.rows_per_expert = rows_hint(T);
    return rows;
  }
  static cuda::ExpertRows second_rows(cuda::ExpertRows rows) {
    rows.x_rows = nullptr;
    rows.routed_early = true;  // the route kernel has finished: the first GEMM (and the SwiGLU) came between
    return rows;
  }

  // The layers over T rows (tokens in d_tok at d_slot/d_pos); leaves the residual stream in x and
  // its final norm, quantized, in act_h (the unembedding's input), and with BF16 dense layers in
  // fp32 in hn.
  // pass.lt_moe: the experts through the grouped wgmma GEMM (FP8, or MXFP4 converted to FP8), or
  // cuBLAS per expert on BF16-decoded weights (MXFP4 with BF16 dense layers, one host sync per
  // layer); prefill only.
  void layers_forward(int T, const Pass& pass) {
    const int H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts, Kx = cfg.experts_per_token;
    const float eps = float(cfg.rms_norm_eps), scale = 1.0f / std::sqrt(float(cfg.head_dim));
    const int P = cuda::moe_rows_max(T, Kx, E), ld = fp8::round4(T);
    const float alpha = float(cfg.swiglu_alpha), limit = float(cfg.swiglu_limit);
    cuda::embedding(embed.ptr, d_tok.ptr, x.ptr, T, H, stream);
    // The first layer's attention norm; every later norm comes with the previous layer's combine.
    cuda::rmsnorm_quantize(x.ptr, layers[0].attn_norm.ptr, T, H, eps, act_h.q.ptr, act_h.s.ptr, ld,
                           dense_bf16 ? hn.ptr : nullptr, stream);
    std::vector<int32_t> seg_host(E + 1);
    // The experts' segments to the host (one sync; the cuBLAS BF16 path needs each expert's rows),
    // then fn(e, first row, rows) for every expert that has rows.
    auto sync_segments = [&] {
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(seg_host.data(), d_seg.ptr, (E + 1) * 4, cudaMemcpyDeviceToHost, stream));
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    };
    auto each_expert = [&](auto&& fn) {
      for (int e = 0; e < E; ++e)
        if (seg_host[e + 1] > seg_host[e]) fn(e, seg_host[e], seg_host[e + 1] - seg_host[e]);
    };
    // W4A8: matrix j (0: the first GEMM's, 1: the second's) of layer l converted on conv_stream
    // once the buffer is free (every expert: the conversion runs before the routing is known).
    const bool w4a8 = mxfp4_lt_fp8 && pass.lt_moe;
    auto convert = [&](int l, int j) {
      if (l >= cfg.num_layers) return;
      const Mxfp4Weight& M = j == 0 ? layers[l].mx1 : layers[l].mx2;
      cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,
                                 {experts_fp8[j].ptr, experts_fp8_s[j].ptr, experts_fp8_sper, M.fp8_block_rows,
                                  M.fp8_smax.ptr},
                                 conv_stream);
      OSPREY_CUDA_CHECK(cudaEventRecord(conv_ready[j], conv_stream));
    };
    if (w4a8) {
      OSPREY_CUDA_CHECK(cudaEventRecord(forward_start, stream));  // the previous forward's GEMMs are done
      OSPREY_CUDA_CHECK(cudaStreamWaitEvent(conv_stream, forward_start, 0));
      convert(0, 0), convert(0, 1);
    }
    for (int l = 0; l < cfg.num_layers; ++l) {
      Layer& L = layers[l];
      const cuda::KvLayerView kv = view(l);
      if (L.fused_qkv) {
        // cuBLASLt's output comes without its bias: then the rope kernel adds it as it reads the rows.
        bool bias_pending = false;
        if (dense_bf16) dense16(L.qkv16.ptr, L.qkv_bias.ptr, hn.ptr, qkv.ptr, T, cfg.q_dim() + 2 * cfg.kv_dim(), H, false);
        else bias_pending = dense(pass, L.qkv, L.qkv_bias.ptr, act_h, qkv.ptr, T, false, nullptr, /*bias_later=*/true);
        cuda::qkv_rope_to_cache(kv, qkv.ptr, d_slot.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_heads,
                                q.ptr, stream, /*decode_rows=*/pass.newest_only(),
                                bias_pending ? L.qkv_bias.ptr : nullptr);
      } else {
        dense(pass, L.q, L.q_bias.ptr, act_h, q.ptr, T, false, nullptr);
        dense(pass, L.k, L.k_bias.ptr, act_h, k.ptr, T, false, nullptr);
        dense(pass, L.v, L.v_bias.ptr, act_h, v.ptr, T, false, nullptr);
        cuda::rope(q.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_heads, cfg.head_dim, stream);
        cuda::rope(k.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_kv_heads, cfg.head_dim, stream);
        cuda::kv_write(kv, k.ptr, v.ptr, d_slot.ptr, d_pos.ptr, T, stream);
      }
      const int window = L.sliding ? cfg.sliding_window : 0;
      // a window spans at most window / 64 + 2 pages
      const int splits = L.sliding ? std::min(pass.attn_splits, window / cuda::kPage + 2) : pass.attn_splits;
      // The attention's output: quantized for the FP8 o-projection, or in fp32 (attn) for the BF16 one.
      const cuda::Quantized1x128 attn_q = dense_bf16 ? cuda::Quantized1x128{} : cuda::Quantized1x128{act_attn.q.ptr, act_attn.s.ptr, ld};
      float* attn_out = dense_bf16 ? attn.ptr : nullptr;
      if (pass.decode_only()) {
        cuda::paged_attention(kv, q.ptr, L.sinks.ptr, d_slot.ptr, d_pos.ptr, attn_out, T, cfg.num_heads, window, scale,
                              splits, split_scratch.ptr, stream, attn_q, d_merge_count.ptr,
                              /*decode_rows=*/!pass.multi_row);
      } else if (cfg.head_dim == 64) {
        const int Q = cfg.q_dim();
        if (pass.decode_rows > 0) {
          cuda::paged_attention(kv, q.ptr, L.sinks.ptr, d_slot.ptr, d_pos.ptr, attn.ptr, pass.decode_rows, cfg.num_heads,
                                window, scale, splits, split_scratch.ptr, stream);
          if (!dense_bf16) quantize_dense(attn.ptr, act_attn, pass.decode_rows, Q, ld);
        }
        // The prompt rows quantized by the flash kernel itself (rows row0.. of act_attn).
        for (const Prompt& p : pass.prompts) {
          const cuda::Quantized1x128 rows_q =
              dense_bf16 ? cuda::Quantized1x128{}
                         : cuda::Quantized1x128{act_attn.q.ptr + size_t(p.row0) * Q, act_attn.s.ptr + p.row0, ld};
          cuda::flash_prefill(kv, q.ptr + size_t(p.row0) * Q, L.sinks.ptr, p.slot, p.p0, attn.ptr + size_t(p.row0) * Q,
                              p.count, cfg.num_heads, window, scale, stream,
                              cuda::flash_prefill_splits(p.count, p.p0, cfg.num_heads, cfg.num_kv_heads, window,
                                                         split_scratch.n),
                              split_scratch.ptr, rows_q);
        }
      } else {  // every row on the CUDA-core kernel, one split
        cuda::paged_attention(kv, q.ptr, L.sinks.ptr, d_slot.ptr, d_pos.ptr, attn_out, T, cfg.num_heads, window, scale, 1,
                              split_scratch.ptr, stream, attn_q);
      }
      if (dense_bf16) dense16(L.o16.ptr, L.o_bias.ptr, attn.ptr, x.ptr, T, H, cfg.q_dim(), /*accumulate=*/true);
      else dense(pass, L.o, L.o_bias.ptr, act_attn, x.ptr, T, /*accumulate=*/true, h.ptr);
      // MoE: norm + router + top-k + the (token, choice) pairs sorted by expert, one kernel.
      // The norm's output also in fp32 (h) for the MXFP4 cuBLAS path's gather, and as BF16 in the
      // MXFP4 activation layout (xb) for the MXFP4 kernels.
      cuda::moe_route(x.ptr, L.mlp_norm.ptr, T, H, eps, act_h.q.ptr, act_h.s.ptr, ld, mxfp4 && pass.lt_moe && !mxfp4_lt_fp8 ? h.ptr : nullptr,
                      L.router.ptr, L.router_bias.ptr, E, Kx, rlogits.ptr, d_route_count.ptr, d_idx.ptr, rw.ptr,
                      {d_seg.ptr, d_row_token.ptr, d_pair_row.ptr, d_active.ptr}, stream,
                      mxfp4 && !pass.lt_moe ? xb.ptr : nullptr);
      const cuda::ActScales by_expert = cuda::ActScales::by_expert(d_seg.ptr, E);
      cuda::Fp8ExpertRows fp8_rows{.seg = d_seg.ptr, .experts = E, .rows = P, .active = d_active.ptr,
                                   .active_max = std::min(E, T * Kx)};
      // Batch 1: an expert's segment is one real row and three padding rows; skipping the padding
      // lets the one-row tile run. From two tokens on it saves no pass of the 8-row tile, and with it
      // batch 64 measured 1.4% slower (same call on the H200: 13.87 against 13.68 ms).
      if (T == 1) fp8_rows.row_live = d_row_token.ptr, fp8_rows.rows_max = 1;
      // Rows an expert typically gets (twice the mean, at most every token).
      const int per_expert = std::min(fp8::round4(T), 2 * ((T * Kx + E - 1) / E));
      if (mxfp4 && pass.lt_moe && !mxfp4_lt_fp8) {
        // Long prompt chunks with BF16 dense layers: the experts that have rows decoded to BF16 and multiplied by
        // cuBLAS per expert, on the rows gathered by expert (the biases come with the SwiGLU and
        // the combine). One host sync per layer, as for FP8 experts.
        const int Hp = mxfp4_act_cols(H), Ip = mxfp4_act_cols(I);
        cuda::mxfp4_experts_to_bf16(L.mx1.view(nullptr), d_seg.ptr, experts_bf16.ptr, stream);
        sync_segments();
        // The sorted rows (row_token holds seg[E] of them; -1: padding, zeros).
        cuda::to_bf16_mxfp4_layout(h.ptr, seg_host[E], H, xb.ptr, stream, d_row_token.ptr);
        each_expert([&](int e, int r0, int n) {
          blas->gemm_bf16(experts_bf16.ptr + size_t(e) * 2 * I * Hp, xb.ptr + size_t(r0) * Hp, t1.ptr + size_t(r0) * 2 * I,
                          n, 2 * I, Hp);
        });
        cuda::moe_swiglu_bf16(t1.ptr, d_seg.ptr + E, P, I, alpha, limit, ab.ptr, stream, L.b1.ptr, d_seg.ptr, E);
        cuda::mxfp4_experts_to_bf16(L.mx2.view(nullptr), d_seg.ptr, experts_bf16.ptr, stream);
        each_expert([&](int e, int r0, int n) {
          blas->gemm_bf16(experts_bf16.ptr + size_t(e) * H * Ip, ab.ptr + size_t(r0) * Ip, y.ptr + size_t(r0) * H, n, H,
                          Ip);
        });
      } else if (mxfp4 && !pass.lt_moe && rows_hint(T) > cuda::kMxfp4PromptRowsHint && xw.ptr) {
        // Prompt chunks: the sorted rows gathered into the wgmma layout, the first GEMM with the
        // SwiGLU in its epilogue (ab in the wgmma layout), the second; both with their biases.
        // Measured on an H100 (session 42, `bench --moe-batches`, a layer's two GEMMs, us, the
        // tiled path against this one with its gather): 120b shape at 1,024 tokens 2,133 / 2,068,
        // 2,048 3,211 / 2,141, 4,096 4,778 / 3,313; 20b shape at 512 851 / 569, 1,024 1,275 / 945.
        // Long chunks stay W4A8 (pass.lt_moe): the 20b prefill of 2,048 tokens took 50.7 ms on
        // this path against 38.7, of 8,192 177.4 against 105.2 (docs/PERF.md, session 42).
        const cuda::ExpertRows rows = expert_rows(T);
        cuda::mxfp4_rows_to_wgmma_layout(xb.ptr, d_row_token.ptr, d_seg.ptr + E, P, H, xw.ptr, stream);
        const cuda::SwigluOut swiglu{ab.ptr, alpha, limit};
        cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(L.mx1.view(L.b1.ptr), xw.ptr, rows, t1.ptr, stream, &swiglu);
        cuda::m_grouped_mxfp4_gemm_bf16_wgmma_contiguous(L.mx2.view(L.b2.ptr), ab.ptr, rows, y.ptr, stream);
      } else if (mxfp4 && !pass.lt_moe) {
        const cuda::ExpertRows rows = expert_rows(T);
        const cuda::SwigluOut swiglu{ab.ptr, alpha, limit};  // batch 1: the first GEMM's epilogue
        cuda::m_grouped_mxfp4_gemm_bf16_contiguous(L.mx1.view(L.b1.ptr), xb.ptr, rows, t1.ptr, stream, &swiglu);
        cuda::m_grouped_mxfp4_gemm_bf16_contiguous(L.mx2.view(L.b2.ptr), ab.ptr, second_rows(rows), y.ptr, stream);
      } else if (pass.lt_moe) {
        // The route kernel's quantized rows, gathered by expert, through the grouped wgmma GEMMs
        // (every expert in one launch, the segments read on the device; the first with the SwiGLU
        // in its epilogue): FP8 experts as loaded, or MXFP4 experts converted (W4A8) for each GEMM
        // in turn.
        cuda::gather_act_1x128(act_h.q.ptr, act_h.s.ptr, ld, d_row_token.ptr, P, H, act_moe.q.ptr, act_moe.s.ptr,
                               by_expert, stream);
        // GEMM j (0: W = mlp1, 1: mlp2) of N outputs and K inputs over the rows x, xs into out.
        auto grouped = [&](int j, const Fp8Weight& W, const Mxfp4Weight& M, const uint8_t* x, const float* xs,
                           float* out, int N, int K) {
          cuda::GroupedFp8Gemm g{.seg = d_seg.ptr, .experts = E, .x = x, .xs = xs, .rows = P, .y = out, .N = N, .K = K};
          if (mxfp4) {
            g.w = experts_fp8[j].ptr, g.ws = experts_fp8_s[j].ptr, g.ws_per = experts_fp8_sper;
            g.wmode = M.fp8_block_rows == 1 ? cuda::WeightScales::Row1x128 : cuda::WeightScales::Block128x128;
          } else {
            g.w = W.data(), g.ws = W.scale(), g.ws_per = W.scales_per();
          }
          return g;
        };
        // After layer l's GEMMs of matrix j: its buffer takes layer l + 1's.
        auto release = [&](int j) {
          if (!mxfp4) return;
          OSPREY_CUDA_CHECK(cudaEventRecord(conv_free[j], stream));
          OSPREY_CUDA_CHECK(cudaStreamWaitEvent(conv_stream, conv_free[j], 0));
          convert(l + 1, j);
        };
        if (mxfp4) OSPREY_CUDA_CHECK(cudaStreamWaitEvent(stream, conv_ready[0], 0));
        // The first GEMM writes the SwiGLU of its outputs (plus b1), quantized for the second.
        cuda::m_grouped_fp8_gemm_nt_contiguous_swiglu(
            grouped(0, L.mlp1, L.mx1, act_moe.q.ptr, act_moe.s.ptr, nullptr, 2 * I, H),
            {.b1 = L.b1.ptr, .alpha = alpha, .limit = limit, .q = act_a.q.ptr, .s = act_a.s.ptr, .I = I}, stream);
        release(0);
        if (mxfp4) OSPREY_CUDA_CHECK(cudaStreamWaitEvent(stream, conv_ready[1], 0));
        cuda::m_grouped_fp8_gemm_nt_contiguous(grouped(1, L.mlp2, L.mx2, act_a.q.ptr, act_a.s.ptr, y.ptr, H, I), stream);
        release(1);
      } else {
        cuda::Fp8ExpertRows by_token = fp8_rows;  // each sorted row reads its token's quantized row
        by_token.x_rows = d_row_token.ptr, by_token.x_ld = ld;
        cuda::m_grouped_fp8_gemm_contiguous(L.mlp1.data(), L.mlp1.scale(), L.mlp1.stride(), L.b1.ptr, act_h.q.ptr,
                                            act_h.s.ptr, by_token, t1.ptr, 2 * I, H, per_expert, stream);
        cuda::moe_swiglu_quantize(t1.ptr, nullptr, by_expert, P, I, alpha, limit, act_a.q.ptr, act_a.s.ptr, stream);
        cuda::Fp8ExpertRows second = fp8_rows;
        second.routed_early = true;  // the route kernel is two kernels back
        cuda::m_grouped_fp8_gemm_contiguous(L.mlp2.data(), L.mlp2.scale(), L.mlp2.stride(), L.b2.ptr, act_a.q.ptr,
                                            act_a.s.ptr, second, y.ptr, H, I, per_expert, stream);
      }
      const cuda::bf16* next_norm = l + 1 < cfg.num_layers ? layers[l + 1].attn_norm.ptr : final_norm.ptr;
      cuda::moe_combine_norm(x.ptr, y.ptr, d_pair_row.ptr, rw.ptr, d_idx.ptr, pass.lt_moe ? L.b2.ptr : nullptr, T, Kx, H,
                             next_norm, eps, act_h.q.ptr, act_h.s.ptr, ld, stream, dense_bf16 ? hn.ptr : nullptr);
    }
  }

  // Unembedding of rows [first, last) of a forward over T rows (their final norm is in act_h, or hn,
  // scales ld = round4(T)) into `out` [last - first][vocab]. The range [0, T) may go through
  // cuBLASLt, which writes round4(T) rows: `out` must hold them (the padding rows are garbage);
  // other ranges take the skinny kernel (cuBLASLt reads scales laid out for its own row count).
  void unembed_rows(const Pass& pass, int first, int last, int T, float* out) {
    const int H = cfg.hidden;
    if (dense_bf16) return dense16(unembed16.ptr, nullptr, hn.ptr + size_t(first) * H, out, last - first, cfg.vocab, H, false);
    Pass p = pass;
    p.lt_dense = pass.lt_dense && first == 0 && last == T;
    dense(p, unembed, nullptr, act_h.q.ptr + size_t(first) * H, act_h.s.ptr + first, fp8::round4(T), out,
          last - first, false, nullptr);
  }

  void set_rows(const int32_t* tok, const int32_t* slot, const int32_t* pos, int T) {
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_tok.ptr, tok, T * 4, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_slot.ptr, slot, T * 4, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_pos.ptr, pos, T * 4, cudaMemcpyHostToDevice, stream));
  }

  void check_slot(int slot) const {
    if (slot < 0 || slot >= opt.slots) fail_plain("slot " + std::to_string(slot) + " out of range");
  }
  // A row's sampling for sample_rows, checked.
  static cuda::SampleRow sample_row(const GptOssCudaFp8::RowSampling& r) {
    if (r.temperature > 0.0f && (!(r.top_p > 0.0f && r.top_p <= 1.0f) || r.top_k < 0 || !(r.u >= 0.0 && r.u < 1.0)))
      fail_plain("sampling: top_p must be in (0, 1], top_k >= 0 and the draw in [0, 1)");
    return {r.temperature, r.top_p, r.top_k, r.u};
  }
  cuda::SampleScratch sample_scratch;

  void check_tokens(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg.vocab)
        fail_plain("token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
  }

  // A step's chunks as rows: the single tokens first (chunk order), then the prompt chunks.
  // logit_row[k]: the row of `logits` that holds the k-th sampling chunk's (in chunk order).
  struct Step {
    Pass pass;
    int T = 0, logit_rows = 0;  // rows of the forward; rows of `logits` written
    std::vector<int32_t> tok, slot, pos;
    std::vector<int> logit_row;
    std::vector<int> sample_rows;               // forward row of each sampling row
    std::vector<std::pair<int, int>> unembed;  // eager steps: row ranges [first, last) unembedded, in order
  };
  Step plan_step(std::span<const GptOssCudaFp8::Chunk> chunks) {
    Step st;
    std::vector<char> seen(size_t(opt.slots), 0);
    size_t rows = 0;
    for (const GptOssCudaFp8::Chunk& c : chunks) {
      check_slot(c.slot);
      if (seen[size_t(c.slot)]++) fail_plain("forward: slot " + std::to_string(c.slot) + " appears twice in one step");
      if (c.tokens.empty()) fail_plain("forward: a chunk has no tokens");
      if (c.start < 0 || size_t(c.start) + c.tokens.size() > size_t(max_pages) * cuda::kPage)
        fail_plain("forward: positions past the context of " + std::to_string(max_pages * cuda::kPage));
      check_tokens(c.tokens);
      rows += c.tokens.size();
    }
    if (rows > size_t(rows_max))
      fail_plain("forward: " + std::to_string(rows) + " rows; the scratch holds " + std::to_string(rows_max) + " (max_rows)");
    // Forward rows of each chunk's sampling rows (its last token, or every token of a verify chunk).
    std::vector<std::vector<int>> sample_rows_of(chunks.size());
    auto add = [&](size_t i) {
      const GptOssCudaFp8::Chunk& c = chunks[i];
      for (size_t j = 0; j < c.tokens.size(); ++j) {
        st.tok.push_back(c.tokens[j]), st.slot.push_back(c.slot), st.pos.push_back(c.start + int(j));
        if (c.verify || (c.sample && j + 1 == c.tokens.size())) sample_rows_of[i].push_back(int(st.tok.size()) - 1);
      }
    };
    auto decode_chunk = [&](const GptOssCudaFp8::Chunk& c) { return c.tokens.size() == 1 || c.verify; };
    for (size_t i = 0; i < chunks.size(); ++i)
      if (decode_chunk(chunks[i])) {
        add(i);
        st.pass.multi_row |= chunks[i].tokens.size() > 1;
      }
    st.pass.decode_rows = int(st.tok.size());
    for (size_t i = 0; i < chunks.size(); ++i)
      if (!decode_chunk(chunks[i])) {
        const int row0 = int(st.tok.size());
        add(i);
        st.pass.prompts.push_back({row0, int(chunks[i].tokens.size()), chunks[i].slot, chunks[i].start});
      }
    st.T = int(st.tok.size());
    for (const std::vector<int>& rs : sample_rows_of) st.sample_rows.insert(st.sample_rows.end(), rs.begin(), rs.end());
    const std::vector<int>& wanted = st.sample_rows;
    if (st.pass.decode_only()) {
      // A decode step: the graph computes every row's logits, padding rows included.
      st.logit_row = wanted;
      return st;
    }
    // Eager: only the sampling rows are unembedded, as runs of consecutive rows.
    std::vector<int> sorted = wanted;
    std::sort(sorted.begin(), sorted.end());
    for (int r : sorted)
      if (!st.unembed.empty() && st.unembed.back().second == r) ++st.unembed.back().second;
      else st.unembed.push_back({r, r + 1});
    for (int r : wanted) st.logit_row.push_back(int(std::lower_bound(sorted.begin(), sorted.end(), r) - sorted.begin()));
    st.logit_rows = int(sorted.size());
    return st;
  }

  // Rows of the decode graph that runs T rows (the rest are padding): 1, 2, then multiples of 4 to
  // 32, of 8 to 64, of 32 to 256, of 64 beyond. Speculative verify steps come in every size (batch
  // 8 with 4 drafts is 40 rows); on the H200 that step took 14.2 ms padded to 64 rows, 12.7 at 40.
  static int decode_bucket(int T) {
    if (T <= 2) return T;
    const int m = T <= 32 ? 4 : T <= 64 ? 8 : T <= 256 ? 32 : 64;
    return (T + m - 1) / m * m;
  }

  // Whether decode steps of bucket b run as the persistent kernel (Options::persistent_decode).
  bool persistent_shapes = false;  // set at construction: the shapes the kernel's phases take
  // Whether a bucket's per-op attention runs 8 warps a KV split, as the persistent phase does: only
  // then do the two paths sum alike (decode_attention_warps), so only then does the bucket run it.
  bool persistent_splits_match(int b) const {
    const int splits = cuda::decode_attention_splits(b, cfg.num_kv_heads, decode_splits());
    return cuda::decode_attention_warps(b, cfg.num_kv_heads, splits) == 8;
  }
  bool persistent_ok(int b) const {
    return opt.persistent_decode && persistent_shapes && b <= 8 && persistent_splits_match(b);
  }

  // The persistent kernel's plan of a decode step of bucket b: the phases of decode_body's
  // kernels, in order, on the same buffers.
  cuda::PersistentDecode& persistent_plan(int b) {
    std::unique_ptr<cuda::PersistentDecode>& slot = persistent[b];
    if (slot) return *slot;
    auto plan = std::make_unique<cuda::PersistentDecode>(opt.persistent_blocks_per_sm);
    cuda::PersistentDecode& P = *plan;
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), E = cfg.num_experts;
    const int Kx = cfg.experts_per_token, ld = fp8::round4(b);
    const float eps = float(cfg.rms_norm_eps), scale = 1.0f / std::sqrt(float(cfg.head_dim));
    const float alpha = float(cfg.swiglu_alpha), limit = float(cfg.swiglu_limit);
    // The per-op step's KV splits and so its sums (built only where persistent_ok: its kernel runs
    // 8 warps a split there, as the persistent phase does).
    const int splits = cuda::decode_attention_splits(b, cfg.num_kv_heads, decode_splits());
    P.embed_norm(embed.ptr, d_tok.ptr, x.ptr, b, H, layers[0].attn_norm.ptr, eps, act_h.q.ptr, act_h.s.ptr, ld);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const Layer& L = layers[l];
      const cuda::KvLayerView kv = view(l);
      const int window = L.sliding ? cfg.sliding_window : 0;
      P.label("layer " + std::to_string(l));
      if (L.fused_qkv) {
        P.fp8_gemm("qkv", L.qkv.data(), L.qkv.scale(), L.qkv.stride(), L.qkv_bias.ptr, act_h.q.ptr, act_h.s.ptr, ld,
                   qkv.ptr, Q + 2 * KV, /*accumulate=*/false, Q + 2 * KV, H, b);
      } else {  // q, k and v as the per-op path runs them, each into its columns of the fused layout
        P.fp8_gemm("q", L.q.data(), L.q.scale(), L.q.stride(), L.q_bias.ptr, act_h.q.ptr, act_h.s.ptr, ld, qkv.ptr,
                   Q + 2 * KV, /*accumulate=*/false, Q, H, b);
        P.fp8_gemm("k", L.k.data(), L.k.scale(), L.k.stride(), L.k_bias.ptr, act_h.q.ptr, act_h.s.ptr, ld, qkv.ptr + Q,
                   Q + 2 * KV, /*accumulate=*/false, KV, H, b);
        P.fp8_gemm("v", L.v.data(), L.v.scale(), L.v.stride(), L.v_bias.ptr, act_h.q.ptr, act_h.s.ptr, ld,
                   qkv.ptr + Q + KV, Q + 2 * KV, /*accumulate=*/false, KV, H, b);
      }
      P.qkv_rope_to_cache(kv, qkv.ptr, d_slot.ptr, d_pos.ptr, inv_freq.ptr, concentration, b, cfg.num_heads, q.ptr);
      P.attention(kv, q.ptr, L.sinks.ptr, d_slot.ptr, d_pos.ptr, b, cfg.num_heads, window, scale,
                  L.sliding ? std::min(splits, window / cuda::kPage + 2) : splits, split_scratch.ptr,
                  {act_attn.q.ptr, act_attn.s.ptr, ld}, d_merge_count.ptr);
      P.fp8_gemm("o", L.o.data(), L.o.scale(), L.o.stride(), L.o_bias.ptr, act_attn.q.ptr, act_attn.s.ptr, ld, x.ptr, H,
                 /*accumulate=*/true, H, Q, b);
      P.moe_route(x.ptr, L.mlp_norm.ptr, b, H, eps, act_h.q.ptr, act_h.s.ptr, ld, xb.ptr, L.router.ptr,
                  L.router_bias.ptr, E, Kx, rlogits.ptr, d_route_count.ptr, d_idx.ptr, rw.ptr,
                  {d_seg.ptr, d_row_token.ptr, d_pair_row.ptr, d_active.ptr});
      const cuda::ExpertRows rows = expert_rows(b);
      P.mxfp4_gemm("experts up+swiglu", L.mx1.view(L.b1.ptr), xb.ptr, rows, t1.ptr, {ab.ptr, alpha, limit});
      P.mxfp4_gemm("experts down", L.mx2.view(L.b2.ptr), ab.ptr, second_rows(rows), y.ptr);
      const cuda::bf16* next_norm = l + 1 < cfg.num_layers ? layers[l + 1].attn_norm.ptr : final_norm.ptr;
      P.combine_norm(x.ptr, y.ptr, d_pair_row.ptr, rw.ptr, d_idx.ptr, b, Kx, H, next_norm, eps, act_h.q.ptr,
                     act_h.s.ptr, ld);
    }
    P.label("");
    P.fp8_gemm("unembedding", unembed.data(), unembed.scale(), unembed.stride(), nullptr, act_h.q.ptr, act_h.s.ptr, ld,
               logits.ptr, cfg.vocab, /*accumulate=*/false, cfg.vocab, H, b);
    P.argmax(logits.ptr, b, cfg.vocab, d_out_id.ptr);
    P.finish();
    slot = std::move(plan);
    return *slot;
  }

  // bench --timeline: the stamps of the persistent step (device [phases][grid][4]).
  DeviceArray<uint64_t> timeline_stamps;
  void collect_timeline(const cuda::PersistentDecode& P) {
    timeline.grid = P.grid();
    timeline.phases = P.names();
    timeline.stamps.resize(size_t(P.phases()) * P.grid() * 4);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(timeline.stamps.data(), timeline_stamps.ptr, timeline.stamps.size() * 8,
                                      cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    timeline_next = false;
  }

  // The decode step of a bucket: layers, unembedding and argmax of `b` rows (graph body), as the
  // persistent kernel where it runs.
  void decode_body(int b, bool multi_row) {
    if (!multi_row && persistent_ok(b)) {
      cuda::PersistentDecode& P = persistent_plan(b);
      if (timeline_next) {
        timeline_stamps.ensure(size_t(P.phases()) * P.grid() * 4);
        OSPREY_CUDA_CHECK(cudaMemsetAsync(timeline_stamps.ptr, 0, timeline_stamps.n * 8, stream));
        P.launch(stream, timeline_stamps.ptr);
        collect_timeline(P);
        return;
      }
      P.launch(stream);
      return;
    }
    Pass pass;
    pass.decode_rows = b, pass.lt_dense = opt.cublaslt, pass.multi_row = multi_row;
    pass.attn_splits = cuda::decode_attention_splits(b, cfg.num_kv_heads, decode_splits());
    layers_forward(b, pass);
    unembed_rows(pass, 0, b, b, logits.ptr);
    cuda::argmax_rows(logits.ptr, d_out_id.ptr, b, cfg.vocab, stream);
  }

  // OSPREY_PROFILE_DECODE=1: only decode-step graph launches run inside cudaProfilerStart/Stop,
  // so `ncu --profile-from-start off` sees the kernels of decode steps alone.
  const bool profile_decode = std::getenv("OSPREY_PROFILE_DECODE") != nullptr;

  // Launches a step's forward; the sampling rows' logits land in `logits` (rows st.logit_row),
  // an eager step's in `out` if given. A decode step also leaves every row's argmax in d_out_id.
  void launch(Step& st, float* out = nullptr) {
    if (st.pass.decode_only()) {
      const int b = decode_bucket(st.T);
      if (b > bucket_max) fail_plain("decode: batch " + std::to_string(st.T) + " exceeds the slots");
      // Padding rows: the dummy slot at position 0 (its table rows are page 0).
      std::vector<int32_t> tok(st.tok), sl(st.slot), pos(st.pos);
      tok.resize(size_t(b), 0), sl.resize(size_t(b), opt.slots), pos.resize(size_t(b), 0);
      set_rows(tok.data(), sl.data(), pos.data(), b);
      st.logit_rows = b;
      const bool multi = st.pass.multi_row;
      if (!opt.graphs || (timeline_next && !multi && persistent_ok(b))) return decode_body(b, multi);
      const int key = b * 2 + int(multi);  // verify steps have graphs of their own
      auto it = graphs.find(key);
      if (it == graphs.end()) {
        if (!multi && persistent_ok(b)) persistent_plan(b);  // its allocations and copies outside the capture
        cudaGraph_t g;
        OSPREY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        decode_body(b, multi);
        OSPREY_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        cudaGraphExec_t exec;
        OSPREY_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        OSPREY_CUDA_CHECK(cudaGraphDestroy(g));
        it = graphs.emplace(key, exec).first;
      }
      if (profile_decode) OSPREY_CUDA_CHECK(cudaProfilerStart());
      OSPREY_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
      if (profile_decode) {
        OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
        OSPREY_CUDA_CHECK(cudaProfilerStop());
      }
      return;
    }
    // A step with prompt chunks runs eagerly: one set of GEMMs over all rows.
    const int T = st.T, H = cfg.hidden, I = cfg.intermediate;
    set_rows(st.tok.data(), st.slot.data(), st.pos.data(), T);
    Pass& pass = st.pass;
    pass.lt_dense = opt.cublaslt;
    const bool grouped_fp8_fits = cuda::m_grouped_fp8_gemm_nt_supported(2 * I, H, cfg.num_experts) &&
                                  cuda::m_grouped_fp8_gemm_nt_supported(H, I, cfg.num_experts);
    pass.lt_moe = mxfp4 ? T * cfg.experts_per_token >= kMxfp4LtRowsPerExpert * cfg.num_experts &&
                              (experts_bf16.ptr || (experts_fp8[0].ptr && grouped_fp8_fits))
                        : opt.cublaslt && T * cfg.experts_per_token >= 16 * cfg.num_experts && grouped_fp8_fits;
    pass.attn_splits = pass.decode_rows > 0
                           ? cuda::decode_attention_splits(pass.decode_rows, cfg.num_kv_heads, decode_splits())
                           : 1;
    layers_forward(T, pass);
    int out_row = 0;
    for (auto [first, last] : st.unembed) {
      unembed_rows(pass, first, last, T, (out ? out : logits.ptr) + size_t(out_row) * cfg.vocab);
      out_row += last - first;
    }
  }

  // Token masks of rows [0, B) to the device (through pinned memory): d_masks [B][words] and
  // d_mask_has [B]. Every caller synchronizes the stream before it returns, so the staging
  // buffers are free here, even while a decode graph runs (it does not touch them): the host
  // copies overlap the step.
  DeviceArray<uint32_t> d_masks;
  DeviceArray<int32_t> d_mask_has;
  uint32_t* h_masks = nullptr;
  int32_t* h_mask_has = nullptr;
  size_t h_mask_rows = 0;
  void upload_masks(int B, const std::function<const uint32_t*(size_t)>& row) {
    const size_t words = (size_t(cfg.vocab) + 31) / 32;
    if (h_mask_rows < size_t(B)) {
      if (h_masks) cudaFreeHost(h_masks), cudaFreeHost(h_mask_has);
      h_mask_rows = size_t(std::max(B, bucket_max));
      OSPREY_CUDA_CHECK(cudaMallocHost(&h_masks, h_mask_rows * words * 4));
      OSPREY_CUDA_CHECK(cudaMallocHost(&h_mask_has, h_mask_rows * 4));
    }
    d_masks.ensure(h_mask_rows * words);
    d_mask_has.ensure(h_mask_rows);
    for (int i = 0; i < B; ++i) {
      const uint32_t* m = row(size_t(i));
      h_mask_has[i] = m != nullptr;
      if (m) std::memcpy(h_masks + size_t(i) * words, m, words * 4);
    }
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_masks.ptr, h_masks, size_t(B) * words * 4, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_mask_has.ptr, h_mask_has, size_t(B) * 4, cudaMemcpyHostToDevice, stream));
  }

  // Forward rows of the last step's sampling rows (last_hidden reads them from x).
  std::vector<int> last_sample_rows;
  std::vector<float> last_hidden(size_t k) {
    if (k >= last_sample_rows.size()) fail_plain("last_hidden: no such sampling row in the last step");
    std::vector<float> h(size_t(cfg.hidden));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(h.data(), x.ptr + size_t(last_sample_rows[k]) * cfg.hidden, h.size() * 4,
                                      cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
  }

  std::vector<int32_t> forward_select(std::span<const GptOssCudaFp8::Chunk> chunks,
                                      std::span<const GptOssCudaFp8::RowSampling> rows, const GptOssCudaFp8::Masks* masks) {
    Step st = plan_step(chunks);
    last_sample_rows = st.sample_rows;
    const size_t n = st.logit_row.size();
    if (rows.size() != n) fail_plain("forward_select: one RowSampling per sampling row");
    std::vector<cuda::SampleRow> checked(n);
    for (size_t k = 0; k < n; ++k) checked[k] = sample_row(rows[k]);
    launch(st);
    const int R = st.logit_rows;  // rows of `logits` (a decode bucket's padding rows: greedy, unmasked)
    if (R == 0) {  // no chunk samples (prompt chunks with more to come): nothing to select
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
      return {};
    }
    std::vector<cuda::SampleRow> p(static_cast<size_t>(R));
    std::vector<int> sampling_of(size_t(R), -1);
    for (size_t k = 0; k < n; ++k) p[size_t(st.logit_row[k])] = checked[k], sampling_of[size_t(st.logit_row[k])] = int(k);
    if (masks) {
      masks->compute();  // host work, overlapping the forward
      upload_masks(R, [&](size_t r) { return sampling_of[r] >= 0 ? masks->row(size_t(sampling_of[r])) : nullptr; });
      cuda::mask_logits_rows(logits.ptr, R, cfg.vocab, d_masks.ptr, d_mask_has.ptr, stream);
    }
    if (masks || !st.pass.decode_only()) cuda::argmax_rows(logits.ptr, d_out_id.ptr, R, cfg.vocab, stream);
    if (std::any_of(checked.begin(), checked.end(), [](const cuda::SampleRow& r) { return r.temperature > 0.0f; }))
      cuda::sample_rows(logits.ptr, R, cfg.vocab, p.data(), d_out_id.ptr, sample_scratch, stream);
    std::vector<int32_t> ids(static_cast<size_t>(R));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(ids.data(), d_out_id.ptr, size_t(R) * 4, cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int32_t> out(n);
    for (size_t k = 0; k < n; ++k) out[k] = ids[size_t(st.logit_row[k])];
    return out;
  }

  std::vector<std::vector<float>> forward_logits(std::span<const GptOssCudaFp8::Chunk> chunks) {
    Step st = plan_step(chunks);
    last_sample_rows = st.sample_rows;
    launch(st);
    std::vector<std::vector<float>> out(st.logit_row.size(), std::vector<float>(cfg.vocab));
    for (size_t k = 0; k < out.size(); ++k)
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(out[k].data(), logits.ptr + size_t(st.logit_row[k]) * cfg.vocab,
                                        size_t(cfg.vocab) * 4, cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }

  // Every position's logits, in pieces of rows_max rows.
  std::vector<float> forward_all_logits(const GptOssCudaFp8::Chunk& c) {
    check_slot(c.slot);
    check_tokens(c.tokens);
    if (c.tokens.empty()) fail_plain("forward_all_logits: no tokens");
    std::vector<float> out(c.tokens.size() * size_t(cfg.vocab));
    DeviceArray<float> all;
    for (size_t i0 = 0; i0 < c.tokens.size(); i0 += size_t(rows_max)) {
      const int T = int(std::min(c.tokens.size() - i0, size_t(rows_max)));
      Step st;
      for (int i = 0; i < T; ++i)
        st.tok.push_back(c.tokens[i0 + i]), st.slot.push_back(c.slot), st.pos.push_back(c.start + int(i0) + i);
      st.T = T;
      st.pass.prompts.push_back({0, T, c.slot, c.start + int(i0)});
      st.unembed.push_back({0, T});
      if (size_t(c.start) + i0 + T > size_t(max_pages) * cuda::kPage) fail_plain("forward_all_logits: past the context");
      // cuBLASLt computes round4(T) rows: room for all of them (not in `logits`: graphs hold its address).
      all.ensure(size_t(fp8::round4(T)) * cfg.vocab);
      launch(st, all.ptr);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(out.data() + i0 * cfg.vocab, all.ptr, size_t(T) * cfg.vocab * 4,
                                        cudaMemcpyDeviceToHost, stream));
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return out;
  }

  void randomize_kv() {
    for (size_t r = 0; r < kstore8.size(); ++r) {  // codes of values up to 448 2^-8 = 1.75
      cuda::fill_random_e4m3(kstore8[r].ptr, kstore8[r].n, 1000 + 2 * int(r), stream);
      cuda::fill_random_e4m3(vstore8[r].ptr, vstore8[r].n, 1001 + 2 * int(r), stream);
      OSPREY_CUDA_CHECK(cudaMemsetAsync(kexp[r].ptr, 0xf8, kexp[r].n, stream));
      OSPREY_CUDA_CHECK(cudaMemsetAsync(vexp[r].ptr, 0xf8, vexp[r].n, stream));
    }
    // BF16 values within +-1; read as FP16 (kv_f16) the same bits are finite values below 2 in
    // magnitude, which is all a timing needs.
    for (size_t r = 0; r < kstore.size(); ++r) {
      cuda::fill_random_bf16(reinterpret_cast<cuda::bf16*>(kstore[r].ptr), kstore[r].n, 1000 + 2 * int(r), 1.0f, stream);
      cuda::fill_random_bf16(reinterpret_cast<cuda::bf16*>(vstore[r].ptr), vstore[r].n, 1001 + 2 * int(r), 1.0f, stream);
    }
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

GptOssCudaFp8::GptOssCudaFp8(const GptOssWeights& w, const Options& opt) : impl_(std::make_unique<Impl>(w, opt)) {}
GptOssCudaFp8::~GptOssCudaFp8() = default;
const GptOssConfig& GptOssCudaFp8::config() const { return impl_->cfg; }
const GptOssCudaFp8::Options& GptOssCudaFp8::options() const { return impl_->opt; }
int GptOssCudaFp8::kv_blocks() const { return impl_->total_pages - 1; }
double GptOssCudaFp8::kv_block_bytes() const { return impl_->block_bytes; }
void GptOssCudaFp8::set_blocks(int slot, std::span<const int32_t> full, std::span<const int32_t> sliding) {
  impl_->set_blocks(slot, full, sliding);
}
std::vector<float> GptOssCudaFp8::last_hidden(size_t k) { return impl_->last_hidden(k); }
std::vector<std::vector<float>> GptOssCudaFp8::forward_logits(std::span<const Chunk> chunks) {
  return impl_->forward_logits(chunks);
}
std::vector<int32_t> GptOssCudaFp8::forward_select(std::span<const Chunk> chunks, std::span<const RowSampling> rows,
                                                   const Masks* masks) {
  return impl_->forward_select(chunks, rows, masks);
}
std::vector<float> GptOssCudaFp8::forward_all_logits(const Chunk& chunk) { return impl_->forward_all_logits(chunk); }
void GptOssCudaFp8::randomize_kv() { impl_->randomize_kv(); }
bool GptOssCudaFp8::persistent_decode(int rows) const { return impl_->persistent_ok(Impl::decode_bucket(rows)); }
void GptOssCudaFp8::record_timeline() { impl_->timeline_next = true; }
const GptOssCudaFp8::Timeline& GptOssCudaFp8::decode_timeline() const { return impl_->timeline; }
void GptOssCudaFp8::synchronize() { OSPREY_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }
double GptOssCudaFp8::weight_bytes() const { return impl_->weight_bytes; }

double GptOssCudaFp8::device_memory_bytes() {
  size_t free_b = 0, total_b = 0;
  OSPREY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return double(total_b);
}

std::string GptOssCudaFp8::device_name() {
  int dev = 0;
  OSPREY_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  OSPREY_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

double GptOssCudaFp8::measure_copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  DeviceArray<uint8_t> a(n), b(n);
  OSPREY_CUDA_CHECK(cudaMemset(a.ptr, 1, n));
  cudaEvent_t e0, e1;
  OSPREY_CUDA_CHECK(cudaEventCreate(&e0));
  OSPREY_CUDA_CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    OSPREY_CUDA_CHECK(cudaEventRecord(e0));
    OSPREY_CUDA_CHECK(cudaMemcpy(b.ptr, a.ptr, n, cudaMemcpyDeviceToDevice));
    OSPREY_CUDA_CHECK(cudaEventRecord(e1));
    OSPREY_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    OSPREY_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * n / (best / 1e3);
}

}  // namespace osprey
