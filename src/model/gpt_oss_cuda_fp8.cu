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
#include "model/gpt_oss_fp8.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/gemm_fp8.cuh"
#include "kernels/cuda/paged_attention.cuh"
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

struct Layer {
  bool sliding = false;
  bool fused_qkv = false;  // q, k, v as one [Q + 2 KV][H] weight (when their row counts are multiples of 128)
  Fp8Weight qkv, q, k, v, o, mlp1, mlp2;
  DeviceArray<cuda::bf16> qkv_bias;
  DeviceArray<cuda::bf16> attn_norm, q_bias, k_bias, v_bias, o_bias, sinks, mlp_norm, router_bias, b1, b2;
  DeviceArray<float> router;  // [E][H] fp32 (routing as on the CPU)
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
  std::vector<Layer> layers;
  DeviceArray<float> inv_freq;
  float concentration = 1.0f;
  double weight_bytes = 0;

  // KV cache. Slot `opt.slots` is a dummy that absorbs the padding rows of a decode bucket.
  int max_pages = 0, ring = 0, total_pages = 0;
  std::vector<DeviceArray<cuda::bf16>> kpool, vpool;  // per layer
  DeviceArray<int32_t> page_table;                     // [slots + 1][max_pages]
  std::vector<int32_t> page_table_host;
  std::vector<int32_t> free_pages;
  std::vector<std::vector<int32_t>> slot_pages;
  std::vector<int> len;
  bool pools_randomized = false;

  // Scratch, sized at construction for `rows_max` rows (graphs need fixed buffers).
  int rows_max = 0, bucket_max = 0;
  DeviceArray<int32_t> d_tok, d_slot, d_pos, d_idx, d_seg, d_row_token, d_pair_row, d_out_id, d_active, d_route_count;
  DeviceArray<int32_t> d_merge_count;  // the attention merge tail's arrival counters, [rows][kv_heads], zero between uses
  DeviceArray<float> x, h, qkv, q, k, v, attn, rlogits, rw, t1, y, logits, split_scratch;
  ActBuf act_h, act_attn, act_moe, act_a;
  std::map<int, cudaGraphExec_t> graphs;

  cuda::KvLayerView view(int l) {
    cuda::KvLayerView L;
    L.k = kpool[l].ptr, L.v = vpool[l].ptr;
    L.kv_heads = cfg.num_kv_heads, L.d = cfg.head_dim;
    if (layers[l].sliding) L.ring = ring;
    else L.page_table = page_table.ptr, L.max_pages = max_pages;
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

  Impl(const GptOssWeights& w, const Options& o) : cfg(w.config), opt(o) {
    if (opt.slots < 1 || opt.max_context < 1 || opt.prefill_chunk < 1) fail_plain("GptOssCudaFp8: bad options");
    if (cfg.hidden % 16 || cfg.q_dim() % 16 || cfg.intermediate % 16 || cfg.head_dim % 8)
      fail_plain("the FP8 CUDA path needs hidden, heads*head_dim and intermediate sizes that are multiples of 16");
    OSPREY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    lt = std::make_unique<cuda::BlockFp8Gemm>(stream);
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate, E = cfg.num_experts;
    Progress progress(w.fp8 ? "loading fp8 weights to the GPU" : "loading weights to the GPU as fp8", cfg.num_layers + 1);
    DeviceArray<cuda::bf16> staging;
    DeviceArray<uint8_t> blocks, scales;
    embed = upload_bf16(w.embed.w, size_t(cfg.vocab) * H);
    final_norm = upload_bf16(w.final_norm, H);
    if (w.fp8) upload_fp8(unembed, w.fp8->unembed);
    else convert_dense(unembed, w.unembed, staging);
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
      d.router = cuda::upload_bf16_as_f32(L.router.w, size_t(E) * H);
      d.fused_qkv = Q % fp8::kBlock == 0 && KV % fp8::kBlock == 0;
      if (w.fp8) {  // converted checkpoint: upload as is
        const GptOssFp8Layer& F = w.fp8->layers[layers.size()];
        if (d.fused_qkv) upload_qkv(d, F, L);
        else upload_fp8(d.q, F.q), upload_fp8(d.k, F.k), upload_fp8(d.v, F.v);
        upload_fp8(d.o, F.o);
        upload_fp8(d.mlp1, F.mlp1);
        upload_fp8(d.mlp2, F.mlp2);
      } else {
        if (d.fused_qkv) {
          convert_qkv(d, L, staging);
        } else {
          convert_dense(d.q, L.q, staging);
          convert_dense(d.k, L.k, staging);
          convert_dense(d.v, L.v, staging);
        }
        convert_dense(d.o, L.o, staging);
        convert_experts(d.mlp1, L.mlp1, blocks, scales);
        convert_experts(d.mlp2, L.mlp2, blocks, scales);
      }
      weight_bytes += 4.0 * E * H + 2.0 * (E * 3 * I + E * H);
      progress.advance(1);
      layers.push_back(std::move(d));
    }
    progress.finish();
    cpu::RopeTable rope = cpu::make_rope_table({.head_dim = cfg.head_dim, .theta = cfg.rope_theta, .factor = cfg.rope_factor,
                                                .beta_fast = cfg.rope_beta_fast, .beta_slow = cfg.rope_beta_slow,
                                                .original_max_pos = cfg.rope_original_max_pos, .yarn = cfg.rope_yarn,
                                                .truncate = cfg.rope_truncate});
    inv_freq = upload(rope.inv_freq.data(), rope.inv_freq.size());
    concentration = rope.concentration;

    // Scratch for the larger of a prefill chunk and the largest decode bucket.
    bucket_max = 1;
    while (bucket_max < opt.slots) bucket_max *= 2;
    rows_max = std::max(opt.prefill_chunk, bucket_max);
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
    act_h.reserve(R4, H), act_attn.reserve(R4, Q), act_moe.reserve(P, H), act_a.reserve(P, I);
    // KV cache: pages for full layers, rings for sliding ones; one extra (dummy) slot.
    max_pages = (opt.max_context + cuda::kPage - 1) / cuda::kPage;
    ring = std::min(opt.max_context, cfg.sliding_window + opt.prefill_chunk);
    const size_t row = size_t(KV);
    int full_layers = 0;
    for (const Layer& L : layers) full_layers += !L.sliding;
    const size_t page_bytes = size_t(cuda::kPage) * row * 2 * 2;  // K and V, bf16
    for (int l = 0; l < cfg.num_layers; ++l)
      if (layers[l].sliding) {
        kpool.emplace_back(size_t(opt.slots + 1) * ring * row);
        vpool.emplace_back(size_t(opt.slots + 1) * ring * row);
      } else {
        kpool.emplace_back(), vpool.emplace_back();
      }
    if (opt.kv_pages > 0) total_pages = int(opt.kv_pages) + 1;
    else if (opt.kv_pages == 0) total_pages = opt.slots * max_pages + 1;
    else {
      size_t free_b = 0, total_b = 0;
      OSPREY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      const size_t reserve = size_t(3) << 30;
      const size_t per_page = page_bytes * std::max(1, full_layers);
      total_pages = int(std::min<size_t>(free_b > reserve ? (free_b - reserve) / per_page : 1,
                                         size_t(opt.slots) * max_pages + 1));
      if (total_pages < 2) fail_plain("no GPU memory left for the KV cache");
    }
    for (int l = 0; l < cfg.num_layers; ++l)
      if (!layers[l].sliding) {
        kpool[l] = DeviceArray<cuda::bf16>(size_t(total_pages) * cuda::kPage * row);
        vpool[l] = DeviceArray<cuda::bf16>(size_t(total_pages) * cuda::kPage * row);
      }
    page_table_host.assign(size_t(opt.slots + 1) * max_pages, 0);
    page_table = upload(page_table_host.data(), page_table_host.size());
    for (int p = total_pages - 1; p >= 1; --p) free_pages.push_back(p);
    slot_pages.resize(opt.slots);
    len.assign(opt.slots, 0);
    OSPREY_CUDA_CHECK(cudaMemset(x.ptr, 0, x.n * 4));
  }

  ~Impl() {
    cudaStreamSynchronize(stream);
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    if (h_masks) cudaFreeHost(h_masks), cudaFreeHost(h_mask_has);
    cudaStreamDestroy(stream);
  }

  // The most KV splits a decode step uses (the scratch is sized for it).
  int decode_splits() const { return std::clamp(opt.max_context / 256, 1, 64); }

  void ensure_pages(int slot, int n_positions) {
    if (n_positions > opt.max_context)
      fail_plain("sequence would hold " + std::to_string(n_positions) + " positions; the KV cache holds " +
                 std::to_string(opt.max_context) + " per sequence");
    auto& pages = slot_pages[slot];
    while (int(pages.size()) * cuda::kPage < n_positions) {
      if (free_pages.empty()) fail_plain("KV cache out of pages");
      const int p = free_pages.back();
      free_pages.pop_back();
      const size_t at = size_t(slot) * max_pages + pages.size();
      pages.push_back(p);
      page_table_host[at] = p;
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(page_table.ptr + at, &page_table_host[at], 4, cudaMemcpyHostToDevice, stream));
    }
  }

  void release(int slot) {
    for (int p : slot_pages[slot]) free_pages.push_back(p);
    slot_pages[slot].clear();
    len[slot] = 0;
  }

  // How a forward pass runs: a prefill chunk of one slot, or a decode step over rows of several.
  struct Pass {
    int prefill_slot = -1, prefill_p0 = 0;  // prefill: its slot and first position (attention: flash_prefill)
    bool lt_dense = false, lt_moe = false;  // cuBLASLt for the dense GEMMs of 32+ rows / the experts
    int attn_splits = 1;                    // decode attention: KV splits of the full layers
  };
  const bool use_flash = !std::getenv("OSPREY_NO_FLASH");
  // OSPREY_EARLY_RING=0 (measuring): the experts' second GEMM fills its weight ring after its
  // PDL wait instead of before it.
  const bool early_ring = cuda::env_switch("OSPREY_EARLY_RING");
  // Decode attention merges its splits in the attention kernel's tail (no merge kernel);
  // OSPREY_MERGE_TAIL=0 launches the merge kernel instead (measuring).
  const bool merge_tail = cuda::env_switch("OSPREY_MERGE_TAIL");

  // Dense GEMM y [T][N] (+)= x . W^T + bias; the T activation rows already quantized: codes xq
  // [T][K], scales xs [K/128][ld]. From 32 rows on, cuBLASLt (prefill chunks and decode buckets of
  // 32+: captured in the step's graph like any kernel); below, the skinny kernel, whose 16-row
  // weight tiles re-read the activations per tile. cuBLASLt reads scales laid out for exactly
  // round4(T) rows.
  void dense(const Pass& pass, const Fp8Weight& W, const cuda::bf16* bias, const uint8_t* xq, const float* xs, int ld,
             float* out, int T, bool accumulate, float* tmp) {
    const int N = W.rows, K = W.cols;
    if (pass.lt_dense && T >= 32 && ld == fp8::round4(T) && lt->available(ld, N, K)) {
      lt->run(W.data(), W.scale(), xq, xs, accumulate ? tmp : out, ld, N, K);
      if (check_lt) compare_with_skinny(W, xq, xs, accumulate ? tmp : out, T, 0, "dense");
      if (accumulate) {
        cuda::add_bias(tmp, bias, T, N, stream);
        cuda::add_inplace(out, tmp, size_t(T) * N, stream);
      } else {
        cuda::add_bias(out, bias, T, N, stream);
      }
      return;
    }
    cuda::ActSegments sg{nullptr, 1, T, ld};
    cuda::fp8_gemm_skinny(W.data(), W.scale(), W.stride(), bias, xq, xs, sg, out, N, accumulate, N, K, T, stream);
  }
  void dense(const Pass& pass, const Fp8Weight& W, const cuda::bf16* bias, const ActBuf& act, float* out, int T,
             bool accumulate, float* tmp) {
    dense(pass, W, bias, act.q.ptr, act.s.ptr, fp8::round4(T), out, T, accumulate, tmp);
  }
  // Debugging aid (OSPREY_FP8_CHECK_LT=1): recompute a cuBLASLt product with the skinny kernel and
  // print the relative difference.
  const bool check_lt = std::getenv("OSPREY_FP8_CHECK_LT") != nullptr;
  void compare_with_skinny(const Fp8Weight& W, const uint8_t* xq, const float* xs, const float* lt_out, int T, int e,
                           const char* what) {
    const int N = W.rows, K = W.cols;
    DeviceArray<float> ref(size_t(T) * N);
    cuda::ActSegments sg{nullptr, 1, T, T % 4 ? fp8::round4(T) : T};
    cuda::fp8_gemm_skinny(W.data(e), W.scale(e), W.stride(), nullptr, xq, xs, sg, ref.ptr, N, false, N, K, T, stream);
    std::vector<float> a(size_t(T) * N), b(a.size());
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(a.data(), lt_out, a.size() * 4, cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(b.data(), ref.ptr, b.size() * 4, cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
    std::fprintf(stderr, "check %s M=%d N=%d K=%d e=%d: rel %.3e\n", what, T, N, K, e, std::sqrt(num / (den + 1e-30)));
  }
  void quantize_dense(const float* src, ActBuf& act, int T, int K) {
    cuda::quantize_act_1x128(src, nullptr, T, K, act.q.ptr, act.s.ptr, cuda::ActSegments{nullptr, 1, T, fp8::round4(T)},
                             stream);
  }

  // The layers over T rows (tokens in d_tok at d_slot/d_pos); leaves the residual stream in x and
  // its final norm, quantized, in act_h (the unembedding's input).
  // pass.lt_moe: the experts through cuBLASLt (one host sync per layer; prefill only).
  void layers_forward(int T, const Pass& pass) {
    const int H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts, Kx = cfg.experts_per_token;
    const float eps = float(cfg.rms_norm_eps), scale = 1.0f / std::sqrt(float(cfg.head_dim));
    const int P = cuda::moe_rows_max(T, Kx, E), ld = fp8::round4(T);
    const float alpha = float(cfg.swiglu_alpha), limit = float(cfg.swiglu_limit);
    cuda::embedding(embed.ptr, d_tok.ptr, x.ptr, T, H, stream);
    // The first layer's attention norm; every later norm comes with the previous layer's combine.
    cuda::rmsnorm_quantize(x.ptr, layers[0].attn_norm.ptr, T, H, eps, act_h.q.ptr, act_h.s.ptr, ld, nullptr, stream);
    std::vector<int32_t> seg_host(E + 1);
    for (int l = 0; l < cfg.num_layers; ++l) {
      Layer& L = layers[l];
      const cuda::KvLayerView kv = view(l);
      if (L.fused_qkv) {
        dense(pass, L.qkv, L.qkv_bias.ptr, act_h, qkv.ptr, T, false, nullptr);
        cuda::qkv_rope_to_cache(kv, qkv.ptr, d_slot.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_heads,
                                q.ptr, stream, /*decode_rows=*/pass.prefill_slot < 0);
      } else {
        dense(pass, L.q, L.q_bias.ptr, act_h, q.ptr, T, false, nullptr);
        dense(pass, L.k, L.k_bias.ptr, act_h, k.ptr, T, false, nullptr);
        dense(pass, L.v, L.v_bias.ptr, act_h, v.ptr, T, false, nullptr);
        cuda::rope(q.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_heads, cfg.head_dim, stream);
        cuda::rope(k.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_kv_heads, cfg.head_dim, stream);
        cuda::kv_write(kv, k.ptr, v.ptr, d_slot.ptr, d_pos.ptr, T, stream);
      }
      const int window = L.sliding ? cfg.sliding_window : 0;
      if (pass.prefill_slot >= 0 && cfg.head_dim == 64 && use_flash) {
        cuda::flash_prefill(kv, q.ptr, L.sinks.ptr, pass.prefill_slot, pass.prefill_p0, attn.ptr, T, cfg.num_heads,
                            window, scale, stream);
        quantize_dense(attn.ptr, act_attn, T, cfg.q_dim());
      } else {
        cuda::paged_attention(kv, q.ptr, L.sinks.ptr, d_slot.ptr, d_pos.ptr, nullptr, T, cfg.num_heads, window, scale,
                              // a window spans at most window / 64 + 2 pages
                              L.sliding ? std::min(pass.attn_splits, window / cuda::kPage + 2) : pass.attn_splits,
                              split_scratch.ptr, stream,
                              {act_attn.q.ptr, act_attn.s.ptr, ld}, merge_tail ? d_merge_count.ptr : nullptr,
                              /*decode_rows=*/pass.prefill_slot < 0);
      }
      dense(pass, L.o, L.o_bias.ptr, act_attn, x.ptr, T, /*accumulate=*/true, h.ptr);
      // MoE: norm + router + top-k + the (token, choice) pairs sorted by expert, one kernel.
      cuda::moe_route(x.ptr, L.mlp_norm.ptr, T, H, eps, act_h.q.ptr, act_h.s.ptr, ld, pass.lt_moe ? h.ptr : nullptr,
                      L.router.ptr, L.router_bias.ptr, E, Kx, rlogits.ptr, d_route_count.ptr, d_idx.ptr, rw.ptr,
                      {d_seg.ptr, d_row_token.ptr, d_pair_row.ptr, d_active.ptr}, stream);
      cuda::ActSegments sg{d_seg.ptr, E, P, 0, d_active.ptr, std::min(E, T * Kx)};
      // Batch 1: an expert's segment is one real row and three padding rows; skipping the padding
      // lets the one-row tile run. From two tokens on it saves no pass of the 8-row tile, and with it
      // batch 64 measured 1.4% slower (same call on the H200: 13.87 against 13.68 ms).
      if (T == 1) sg.row_live = d_row_token.ptr, sg.seg_rows_max = 1;
      if (pass.lt_moe) {
        cuda::quantize_act_1x128(h.ptr, d_row_token.ptr, P, H, act_moe.q.ptr, act_moe.s.ptr, sg, stream);
        OSPREY_CUDA_CHECK(cudaMemcpyAsync(seg_host.data(), d_seg.ptr, (E + 1) * 4, cudaMemcpyDeviceToHost, stream));
        OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
        const int KBh = fp8::blocks(H), KBi = fp8::blocks(I);
        auto each_expert = [&](auto&& fn) {
          for (int e = 0; e < E; ++e)
            if (seg_host[e + 1] > seg_host[e]) fn(e, seg_host[e], seg_host[e + 1] - seg_host[e]);
        };
        each_expert([&](int e, int r0, int n) {
          const uint8_t* xq = act_moe.q.ptr + size_t(r0) * H;
          const float* xs = act_moe.s.ptr + size_t(KBh) * r0;
          lt->run(L.mlp1.data(e), L.mlp1.scale(e), xq, xs, t1.ptr + size_t(r0) * 2 * I, n, 2 * I, H);
          if (check_lt && l == 0 && e < 2) compare_with_skinny(L.mlp1, xq, xs, t1.ptr + size_t(r0) * 2 * I, n, e, "mlp1");
        });
        cuda::moe_swiglu_quantize(t1.ptr, L.b1.ptr, sg, seg_host[E], I, alpha, limit, act_a.q.ptr, act_a.s.ptr, stream);
        each_expert([&](int e, int r0, int n) {
          lt->run(L.mlp2.data(e), L.mlp2.scale(e), act_a.q.ptr + size_t(r0) * I, act_a.s.ptr + size_t(KBi) * r0,
                  y.ptr + size_t(r0) * H, n, H, I);
        });
      } else {
        // Tile width for the rows an expert typically gets (twice the mean, at most every token).
        const int per_expert = std::min(fp8::round4(T), 2 * ((T * Kx + E - 1) / E));
        cuda::ActSegments by_token = sg;        // each sorted row reads its token's quantized row
        by_token.x_rows = d_row_token.ptr, by_token.x_ld = ld;
        cuda::fp8_gemm_skinny(L.mlp1.data(), L.mlp1.scale(), L.mlp1.stride(), L.b1.ptr, act_h.q.ptr, act_h.s.ptr,
                              by_token, t1.ptr, 2 * I, false, 2 * I, H, per_expert, stream);
        cuda::moe_swiglu_quantize(t1.ptr, nullptr, sg, P, I, alpha, limit, act_a.q.ptr, act_a.s.ptr, stream);
        cuda::ActSegments sg2 = sg;
        sg2.routed_early = early_ring;  // the route kernel is two kernels back
        cuda::fp8_gemm_skinny(L.mlp2.data(), L.mlp2.scale(), L.mlp2.stride(), L.b2.ptr, act_a.q.ptr, act_a.s.ptr, sg2,
                              y.ptr, H, false, H, I, per_expert, stream);
      }
      const cuda::bf16* next_norm = l + 1 < cfg.num_layers ? layers[l + 1].attn_norm.ptr : final_norm.ptr;
      cuda::moe_combine_norm(x.ptr, y.ptr, d_pair_row.ptr, rw.ptr, d_idx.ptr, pass.lt_moe ? L.b2.ptr : nullptr, T, Kx, H,
                             next_norm, eps, act_h.q.ptr, act_h.s.ptr, ld, stream);
    }
  }

  // Unembedding of rows [first, T) (their final norm is in act_h, scales ld = round4(T)) into
  // `out` [T - first][vocab]. With first = 0 the cuBLASLt path writes round4(T) rows: `out` must
  // hold them (the padding rows are garbage).
  void unembed_rows(const Pass& pass, int first, int T, float* out) {
    const int H = cfg.hidden;
    dense(pass, unembed, nullptr, act_h.q.ptr + size_t(first) * H, act_h.s.ptr + first, fp8::round4(T), out, T - first,
          false, nullptr);
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

  // Prefill in chunks; returns the logits of every token (all_logits) or of the last one, or only
  // the next token selected on the GPU with *select (argmax or sampled) in *id_out.
  std::vector<float> prefill(int slot, std::span<const int32_t> tokens, bool all_logits,
                             const GptOssCudaFp8::RowSampling* select = nullptr, int32_t* id_out = nullptr,
                             const uint32_t* mask = nullptr) {
    const cuda::SampleRow row = select ? sample_row(*select) : cuda::SampleRow{};
    check_slot(slot);
    check_tokens(tokens);
    if (tokens.empty()) fail_plain("prefill: no tokens");
    ensure_pages(slot, len[slot] + int(tokens.size()));
    std::vector<float> out;
    DeviceArray<float> all;
    if (all_logits) out.resize(tokens.size() * size_t(cfg.vocab));
    for (size_t i0 = 0; i0 < tokens.size(); i0 += opt.prefill_chunk) {
      const int T = int(std::min(tokens.size() - i0, size_t(opt.prefill_chunk)));
      std::vector<int32_t> slots(T, slot), pos(T);
      for (int i = 0; i < T; ++i) pos[i] = len[slot] + i;
      set_rows(tokens.data() + i0, slots.data(), pos.data(), T);
      const int H = cfg.hidden, I = cfg.intermediate;
      const Pass pass{.prefill_slot = slot,
                      .prefill_p0 = len[slot],
                      .lt_dense = opt.cublaslt,
                      .lt_moe = opt.cublaslt && T * cfg.experts_per_token >= 16 * cfg.num_experts &&
                                lt->available(4, 2 * I, H) && lt->available(4, H, I)};
      layers_forward(T, pass);
      len[slot] += T;
      const bool last = i0 + T == tokens.size();
      if (all_logits) {
        // cuBLASLt computes round4(T) rows (its row count must be a multiple of 4): room for all of them.
        if (all.n < size_t(fp8::round4(T)) * cfg.vocab) all = DeviceArray<float>(size_t(fp8::round4(T)) * cfg.vocab);
        unembed_rows(pass, 0, T, all.ptr);
        OSPREY_CUDA_CHECK(cudaMemcpyAsync(out.data() + i0 * cfg.vocab, all.ptr, size_t(T) * cfg.vocab * 4,
                                          cudaMemcpyDeviceToHost, stream));
      } else if (last) {
        unembed_rows(pass, T - 1, T, logits.ptr);
        if (select) {
          if (mask) {
            const uint32_t* m = mask;
            upload_masks(1, [m](size_t) { return m; });
            cuda::mask_logits_rows(logits.ptr, 1, cfg.vocab, d_masks.ptr, d_mask_has.ptr, stream);
          }
          if (row.temperature > 0.0f) {
            cuda::sample_rows(logits.ptr, 1, cfg.vocab, &row, d_out_id.ptr, sample_scratch, stream);
          } else {
            cuda::argmax_rows(logits.ptr, d_out_id.ptr, 1, cfg.vocab, stream);
          }
          OSPREY_CUDA_CHECK(cudaMemcpyAsync(id_out, d_out_id.ptr, 4, cudaMemcpyDeviceToHost, stream));
        } else {
          out.resize(cfg.vocab);
          OSPREY_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits.ptr, size_t(cfg.vocab) * 4, cudaMemcpyDeviceToHost, stream));
        }
      }
    }
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }

  // The decode step of a bucket: layers, unembedding and argmax of `b` rows (graph body).
  void decode_body(int b) {
    const Pass pass{.lt_dense = opt.cublaslt, .attn_splits = cuda::decode_attention_splits(b, cfg.num_kv_heads, decode_splits())};
    layers_forward(b, pass);
    unembed_rows(pass, 0, b, logits.ptr);
    cuda::argmax_rows(logits.ptr, d_out_id.ptr, b, cfg.vocab, stream);
  }

  // OSPREY_PROFILE_DECODE=1: only decode-step graph launches run inside cudaProfilerStart/Stop,
  // so `ncu --profile-from-start off` sees the kernels of decode steps alone.
  const bool profile_decode = std::getenv("OSPREY_PROFILE_DECODE") != nullptr;

  // Runs a decode step (graph per bucket); returns the bucket size. Rows past B are padding.
  int decode_step(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
    const int B = int(slots.size());
    if (B == 0 || B != int(tokens.size())) fail_plain("decode: one token per slot");
    check_tokens(tokens);
    int b = 1;
    while (b < B) b *= 2;
    if (b > bucket_max) fail_plain("decode: batch " + std::to_string(B) + " exceeds the slots");
    std::vector<int32_t> tok(b, 0), sl(b, opt.slots), pos(b, 0);  // padding rows: the dummy slot, position 0
    for (int i = 0; i < B; ++i) {
      check_slot(slots[i]);
      for (int j = 0; j < i; ++j)
        if (slots[j] == slots[i]) fail_plain("decode: slot " + std::to_string(slots[i]) + " appears twice");
      ensure_pages(slots[i], len[slots[i]] + 1);
      tok[i] = tokens[i], sl[i] = slots[i], pos[i] = len[slots[i]];
    }
    set_rows(tok.data(), sl.data(), pos.data(), b);
    if (opt.graphs) {
      auto it = graphs.find(b);
      if (it == graphs.end()) {
        cudaGraph_t g;
        OSPREY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        decode_body(b);
        OSPREY_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        cudaGraphExec_t exec;
        OSPREY_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        OSPREY_CUDA_CHECK(cudaGraphDestroy(g));
        it = graphs.emplace(b, exec).first;
      }
      if (profile_decode) OSPREY_CUDA_CHECK(cudaProfilerStart());
      OSPREY_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
      if (profile_decode) {
        OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
        OSPREY_CUDA_CHECK(cudaProfilerStop());
      }
    } else {
      decode_body(b);
    }
    for (int i = 0; i < B; ++i) ++len[slots[i]];
    return b;
  }

  std::vector<int32_t> decode(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
    decode_step(slots, tokens);
    return selected_ids(slots.size());
  }

  // The step's selected ids of its first n rows (d_out_id), once the stream is done.
  std::vector<int32_t> selected_ids(size_t n) {
    std::vector<int32_t> out(n);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out_id.ptr, n * 4, cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }

  // The decode step, then rows that sample drawn on the GPU from the step's logits (the greedy
  // rows keep the step's argmax); padding rows are greedy.
  std::vector<int32_t> decode_sample(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const GptOssCudaFp8::RowSampling> rows) {
    if (rows.size() != slots.size()) fail_plain("decode_sample: one sampling row per slot");
    std::vector<cuda::SampleRow> p(slots.size());  // padding rows past them: greedy
    for (size_t i = 0; i < rows.size(); ++i) p[i] = sample_row(rows[i]);
    const int b = decode_step(slots, tokens);
    p.resize(size_t(b));
    cuda::sample_rows(logits.ptr, b, cfg.vocab, p.data(), d_out_id.ptr, sample_scratch, stream);
    return selected_ids(slots.size());
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

  // The decode step with masks: the graph runs while compute() fills them on the host; then the
  // masks, the argmax of every row again, and the sampling rows' draws.
  std::vector<int32_t> decode_masked(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                     std::span<const GptOssCudaFp8::RowSampling> rows, const std::function<void()>& compute,
                                     const std::function<const uint32_t*(size_t)>& row) {
    if (rows.size() != slots.size()) fail_plain("decode_masked: one sampling row per slot");
    std::vector<cuda::SampleRow> p(slots.size());
    for (size_t i = 0; i < rows.size(); ++i) p[i] = sample_row(rows[i]);
    decode_step(slots, tokens);
    compute();  // host work, overlapping the graph
    const int B = int(slots.size());
    upload_masks(B, row);
    cuda::mask_logits_rows(logits.ptr, B, cfg.vocab, d_masks.ptr, d_mask_has.ptr, stream);
    cuda::argmax_rows(logits.ptr, d_out_id.ptr, B, cfg.vocab, stream);
    cuda::sample_rows(logits.ptr, B, cfg.vocab, p.data(), d_out_id.ptr, sample_scratch, stream);
    return selected_ids(slots.size());
  }

  std::vector<std::vector<float>> decode_logits(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
    decode_step(slots, tokens);
    std::vector<std::vector<float>> out(slots.size(), std::vector<float>(cfg.vocab));
    for (size_t i = 0; i < slots.size(); ++i)
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(out[i].data(), logits.ptr + i * cfg.vocab, size_t(cfg.vocab) * 4,
                                        cudaMemcpyDeviceToHost, stream));
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }

  void fill_random(int slot, int n) {
    check_slot(slot);
    if (!pools_randomized) {
      for (int l = 0; l < cfg.num_layers; ++l) {
        cuda::fill_random_bf16(kpool[l].ptr, kpool[l].n, 1000 + 2 * l, 1.0f, stream);
        cuda::fill_random_bf16(vpool[l].ptr, vpool[l].n, 1001 + 2 * l, 1.0f, stream);
      }
      pools_randomized = true;
    }
    release(slot);
    ensure_pages(slot, n);
    len[slot] = n;
    OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

GptOssCudaFp8::GptOssCudaFp8(const GptOssWeights& w, const Options& opt) : impl_(std::make_unique<Impl>(w, opt)) {}
GptOssCudaFp8::~GptOssCudaFp8() = default;
const GptOssConfig& GptOssCudaFp8::config() const { return impl_->cfg; }
const GptOssCudaFp8::Options& GptOssCudaFp8::options() const { return impl_->opt; }
int GptOssCudaFp8::length(int slot) const {
  impl_->check_slot(slot);
  return impl_->len[slot];
}
void GptOssCudaFp8::release(int slot) {
  impl_->check_slot(slot);
  impl_->release(slot);
}
std::vector<float> GptOssCudaFp8::prefill(int slot, std::span<const int32_t> tokens, bool all_logits) {
  return impl_->prefill(slot, tokens, all_logits);
}
int32_t GptOssCudaFp8::prefill_argmax(int slot, std::span<const int32_t> tokens) {
  return prefill_select(slot, tokens, RowSampling{});
}
int32_t GptOssCudaFp8::prefill_select(int slot, std::span<const int32_t> tokens, const RowSampling& row,
                                      const uint32_t* mask) {
  int32_t id = -1;
  impl_->prefill(slot, tokens, false, &row, &id, mask);
  return id;
}
std::vector<int32_t> GptOssCudaFp8::decode_masked(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                                  std::span<const RowSampling> rows, const std::function<void()>& compute,
                                                  const std::function<const uint32_t*(size_t)>& row) {
  return impl_->decode_masked(slots, tokens, rows, compute, row);
}
std::vector<int32_t> GptOssCudaFp8::decode_argmax(std::span<const int32_t> slots, std::span<const int32_t> tokens) {
  return impl_->decode(slots, tokens);
}
std::vector<std::vector<float>> GptOssCudaFp8::decode_logits(std::span<const int32_t> slots,
                                                             std::span<const int32_t> tokens) {
  return impl_->decode_logits(slots, tokens);
}
std::vector<int32_t> GptOssCudaFp8::decode_sample(std::span<const int32_t> slots, std::span<const int32_t> tokens,
                                                  std::span<const RowSampling> rows) {
  return impl_->decode_sample(slots, tokens, rows);
}
void GptOssCudaFp8::fill_random(int slot, int n) { impl_->fill_random(slot, n); }
void GptOssCudaFp8::synchronize() { OSPREY_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }
double GptOssCudaFp8::weight_bytes() const { return impl_->weight_bytes; }
int64_t GptOssCudaFp8::free_kv_pages() const { return int64_t(impl_->free_pages.size()); }

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
