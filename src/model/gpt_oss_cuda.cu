#include "model/gpt_oss_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/progress.h"
#include "core/bf16.h"
#include "kernels/cpu/ops.h"
#include "model/gpt_oss_forward.h"
#include "kernels/cuda/device_array.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/ops.cuh"

namespace osprey {

bool cuda_backend_available() { return true; }

namespace {

using cuda::DeviceArray;
using cuda::upload;
using cuda::upload_bf16;
using cuda::upload_bf16_as_f32;

// A GEMM weight, stored in the path's precision.
struct Weight {
  DeviceArray<cuda::bf16> b;
  DeviceArray<float> f;
};

struct Layer {
  DeviceArray<float> router_f32;  // [E][H]: routing in fp32, so near-ties resolve as on the CPU
  DeviceArray<cuda::bf16> attn_norm, q_bias, k_bias, v_bias, o_bias, sinks, mlp_norm, router_bias, b1, b2;
  Weight q, k, v, o, w1, w2;  // experts: w1 [E][2I][H], w2 [E][H][I]
  // The experts as stored, for decode steps: blocks [E][rows][cols/32][16], scales [E][rows][cols/32].
  DeviceArray<uint8_t> w1_blocks, w1_scales, w2_blocks, w2_scales;
  bool sliding;
};

}  // namespace

struct GptOssCudaModel::Impl {
  const GptOssConfig cfg;
  const int max_seq;
  const bool fp32;
  cudaStream_t stream{};
  std::unique_ptr<cuda::Blas> blas;
  DeviceArray<cuda::bf16> embed, final_norm;
  Weight unembed;
  std::vector<Layer> layers;
  DeviceArray<float> inv_freq;
  float concentration = 1.0f;
  std::vector<DeviceArray<float>> kcache, vcache;  // [layer] -> [max_seq][kv_heads][d]
  int length = 0;
  // Scratch, grown on demand.
  DeviceArray<int32_t> d_tokens, d_pos, d_idx, d_rows, d_out_id;
  DeviceArray<float> x, q, k, v, attn, o, t1, y, rlogits, rw, d_w, logits, hf, xef, aef;
  DeviceArray<cuda::bf16> hb, ab, xe, ae;

  Weight dense(const osprey::bf16* host, size_t count) {
    Weight wt;
    if (fp32) wt.f = upload_bf16_as_f32(host, count);
    else wt.b = upload_bf16(host, count);
    return wt;
  }
  // MXFP4 experts -> the path's precision, one expert at a time through a staging buffer.
  Weight experts(const Mxfp4Experts& x) {
    const size_t per = size_t(x.rows) * x.cols;
    Weight wt;
    wt.b = DeviceArray<cuda::bf16>(fp32 ? per : per * x.experts);
    if (fp32) wt.f = DeviceArray<float>(per * x.experts);
    DeviceArray<uint8_t> blocks(per / 2), scales(per / 32);
    for (int e = 0; e < x.experts; ++e) {
      OSPREY_CUDA_CHECK(cudaMemcpy(blocks.ptr, x.expert_blocks(e), per / 2, cudaMemcpyHostToDevice));
      OSPREY_CUDA_CHECK(cudaMemcpy(scales.ptr, x.expert_scales(e), per / 32, cudaMemcpyHostToDevice));
      cuda::bf16* dst = fp32 ? wt.b.ptr : wt.b.ptr + size_t(e) * per;
      cuda::mxfp4_to_bf16(blocks.ptr, scales.ptr, dst, x.rows, x.cols, stream);  // exact in bf16
      if (fp32) cuda::to_f32(dst, wt.f.ptr + size_t(e) * per, per, stream);
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    if (fp32) wt.b = DeviceArray<cuda::bf16>();
    return wt;
  }
  // y [T][N] = x [T][K] . W^T; x is bf16 (BF16 path) or fp32 (FP32 path).
  void gemm(const Weight& W, size_t offset, const void* x, float* y, int T, int N, int K) {
    if (fp32) blas->gemm_f32(W.f.ptr + offset, static_cast<const float*>(x), y, T, N, K);
    else blas->gemm_bf16(W.b.ptr + offset, static_cast<const cuda::bf16*>(x), y, T, N, K);
  }
  // RMSNorm into the GEMM input buffer of the path.
  void* norm(const float* x, const cuda::bf16* gain, int T) {
    if (fp32) {
      cuda::rmsnorm_to_f32(x, gain, hf.ptr, T, cfg.hidden, float(cfg.rms_norm_eps), stream);
      return hf.ptr;
    }
    cuda::rmsnorm_to_bf16(x, gain, hb.ptr, T, cfg.hidden, float(cfg.rms_norm_eps), stream);
    return hb.ptr;
  }

  Impl(const GptOssWeights& w, int max_seq_len, bool use_fp32) : cfg(w.config), max_seq(max_seq_len), fp32(use_fp32) {
    if (w.fp8) fail_plain("this checkpoint holds FP8 weights (osprey convert): the BF16/FP32 CUDA paths need the original");
    OSPREY_CUDA_CHECK(cudaStreamCreate(&stream));
    blas = std::make_unique<cuda::Blas>(stream);
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate, E = cfg.num_experts;
    uint64_t total = 0;
    for (auto& n : w.store.names()) total += w.store.get(n).nbytes;
    Progress progress("uploading weights", total);
    embed = upload_bf16(w.embed.w, size_t(cfg.vocab) * H);
    unembed = dense(w.unembed.w, size_t(cfg.vocab) * H);
    final_norm = upload_bf16(w.final_norm, H);
    progress.advance(size_t(cfg.vocab) * H * 4);
    for (const GptOssLayerWeights& L : w.layers) {
      Layer d;
      d.sliding = L.sliding;
      d.attn_norm = upload_bf16(L.attn_norm, H);
      d.q = dense(L.q.w, size_t(Q) * H);
      d.k = dense(L.k.w, size_t(KV) * H);
      d.v = dense(L.v.w, size_t(KV) * H);
      d.q_bias = upload_bf16(L.q_bias, Q);
      d.k_bias = upload_bf16(L.k_bias, KV);
      d.v_bias = upload_bf16(L.v_bias, KV);
      d.o = dense(L.o.w, size_t(H) * Q);
      d.o_bias = upload_bf16(L.o_bias, H);
      d.sinks = upload_bf16(L.sinks, cfg.num_heads);
      d.mlp_norm = upload_bf16(L.mlp_norm, H);
      d.router_f32 = upload_bf16_as_f32(L.router.w, size_t(E) * H);
      d.router_bias = upload_bf16(L.router_bias, E);
      d.b1 = upload_bf16(L.mlp1.bias, size_t(E) * 2 * I);
      d.b2 = upload_bf16(L.mlp2.bias, size_t(E) * H);
      d.w1 = experts(L.mlp1);
      d.w2 = experts(L.mlp2);
      d.w1_blocks = upload(L.mlp1.blocks, size_t(E) * 2 * I * H / 2);
      d.w1_scales = upload(L.mlp1.scales, size_t(E) * 2 * I * H / 32);
      d.w2_blocks = upload(L.mlp2.blocks, size_t(E) * H * I / 2);
      d.w2_scales = upload(L.mlp2.scales, size_t(E) * H * I / 32);
      progress.advance(size_t(2 * I) * H / 2 * E + size_t(H) * I / 2 * E + (size_t(2) * Q * H + 2ull * KV * H) * 2);
      layers.push_back(std::move(d));
    }
    progress.finish();
    const cpu::RopeTable rope = gpt_oss_rope_table(cfg);
    inv_freq = DeviceArray<float>(rope.inv_freq.size());
    OSPREY_CUDA_CHECK(cudaMemcpy(inv_freq.ptr, rope.inv_freq.data(), rope.inv_freq.size() * 4, cudaMemcpyHostToDevice));
    concentration = rope.concentration;
    for (int l = 0; l < cfg.num_layers; ++l) {
      kcache.emplace_back(size_t(max_seq) * KV);
      vcache.emplace_back(size_t(max_seq) * KV);
    }
  }

  ~Impl() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }

  // Runs the layers over T tokens; leaves the residual stream in x.
  void run_layers(std::span<const int32_t> tokens) {
    const int T = int(tokens.size()), H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate;
    const int E = cfg.num_experts, K = cfg.experts_per_token;
    if (length + T > max_seq)
      fail_plain("the CUDA KV cache holds " + std::to_string(max_seq) + " positions; " + std::to_string(length + T) + " requested");
    for (int32_t t : tokens)
      if (t < 0 || t >= cfg.vocab)
        fail_plain("token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
    std::vector<int32_t> pos(T);
    for (int i = 0; i < T; ++i) pos[i] = length + i;
    d_tokens.ensure(T), d_pos.ensure(T);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_tokens.ptr, tokens.data(), T * 4, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_pos.ptr, pos.data(), T * 4, cudaMemcpyHostToDevice, stream));
    x.ensure(size_t(T) * H), hb.ensure(size_t(T) * H), q.ensure(size_t(T) * Q), k.ensure(size_t(T) * KV);
    v.ensure(size_t(T) * KV), attn.ensure(size_t(T) * Q), ab.ensure(size_t(T) * Q), o.ensure(size_t(T) * H);
    rlogits.ensure(size_t(T) * E), d_idx.ensure(size_t(T) * K), rw.ensure(size_t(T) * K), hf.ensure(size_t(T) * H);
    cuda::embedding(embed.ptr, d_tokens.ptr, x.ptr, T, H, stream);
    std::vector<int32_t> idx(size_t(T) * K);
    std::vector<float> wts(size_t(T) * K);
    for (int l = 0; l < cfg.num_layers; ++l) {
      Layer& L = layers[l];
      const float eps = float(cfg.rms_norm_eps);
      // Attention block.
      const void* h = norm(x.ptr, L.attn_norm.ptr, T);
      gemm(L.q, 0, h, q.ptr, T, Q, H);
      gemm(L.k, 0, h, k.ptr, T, KV, H);
      gemm(L.v, 0, h, v.ptr, T, KV, H);
      cuda::add_bias(q.ptr, L.q_bias.ptr, T, Q, stream);
      cuda::add_bias(k.ptr, L.k_bias.ptr, T, KV, stream);
      cuda::add_bias(v.ptr, L.v_bias.ptr, T, KV, stream);
      cuda::rope(q.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_heads, cfg.head_dim, stream);
      cuda::rope(k.ptr, d_pos.ptr, inv_freq.ptr, concentration, T, cfg.num_kv_heads, cfg.head_dim, stream);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(kcache[l].ptr + size_t(length) * KV, k.ptr, size_t(T) * KV * 4, cudaMemcpyDeviceToDevice, stream));
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(vcache[l].ptr + size_t(length) * KV, v.ptr, size_t(T) * KV * 4, cudaMemcpyDeviceToDevice, stream));
      cuda::sink_attention(q.ptr, kcache[l].ptr, vcache[l].ptr, L.sinks.ptr, attn.ptr, T, length, cfg.num_heads,
                           cfg.num_kv_heads, cfg.head_dim, L.sliding ? cfg.sliding_window : 0,
                           1.0f / std::sqrt(float(cfg.head_dim)), stream);
      if (!fp32) cuda::to_bf16(attn.ptr, ab.ptr, size_t(T) * Q, stream);
      gemm(L.o, 0, fp32 ? static_cast<const void*>(attn.ptr) : ab.ptr, o.ptr, T, H, Q);
      cuda::add_bias(o.ptr, L.o_bias.ptr, T, H, stream);
      cuda::add_inplace(x.ptr, o.ptr, size_t(T) * H, stream);
      // MoE block: routing on the GPU, grouping on the host, one GEMM pair per used expert.
      const void* hm = norm(x.ptr, L.mlp_norm.ptr, T);
      if (!fp32) cuda::rmsnorm_to_f32(x.ptr, L.mlp_norm.ptr, hf.ptr, T, H, eps, stream);
      blas->gemm_f32(L.router_f32.ptr, hf.ptr, rlogits.ptr, T, E, H);
      cuda::add_bias(rlogits.ptr, L.router_bias.ptr, T, E, stream);
      cuda::topk_softmax(rlogits.ptr, d_idx.ptr, rw.ptr, T, E, K, stream);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(idx.data(), d_idx.ptr, idx.size() * 4, cudaMemcpyDeviceToHost, stream));
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(wts.data(), rw.ptr, wts.size() * 4, cudaMemcpyDeviceToHost, stream));
      OSPREY_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<int32_t> rows, offsets(E + 1, 0);
      std::vector<float> rweights;
      for (int e = 0; e < E; ++e) {
        offsets[e] = int(rows.size());
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < K; ++j)
            if (idx[size_t(t) * K + j] == e) {
              rows.push_back(t);
              rweights.push_back(wts[size_t(t) * K + j]);
            }
      }
      offsets[E] = int(rows.size());
      const int R = int(rows.size());
      d_rows.ensure(R), d_w.ensure(R), xe.ensure(size_t(R) * H), t1.ensure(size_t(R) * 2 * I);
      ae.ensure(size_t(R) * I), y.ensure(size_t(R) * H), xef.ensure(size_t(R) * H), aef.ensure(size_t(R) * I);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_rows.ptr, rows.data(), size_t(R) * 4, cudaMemcpyHostToDevice, stream));
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_w.ptr, rweights.data(), size_t(R) * 4, cudaMemcpyHostToDevice, stream));
      if (fp32) cuda::gather_rows(static_cast<const float*>(hm), d_rows.ptr, xef.ptr, R, H, stream);
      else cuda::gather_rows(static_cast<const cuda::bf16*>(hm), d_rows.ptr, xe.ptr, R, H, stream);
      for (int e = 0; e < E; ++e) {
        const int n = offsets[e + 1] - offsets[e], r0 = offsets[e];
        if (!n) continue;
        const void* xin = fp32 ? static_cast<const void*>(xef.ptr + size_t(r0) * H) : xe.ptr + size_t(r0) * H;
        gemm(L.w1, size_t(e) * 2 * I * H, xin, t1.ptr + size_t(r0) * 2 * I, n, 2 * I, H);
        cuda::add_bias(t1.ptr + size_t(r0) * 2 * I, L.b1.ptr + size_t(e) * 2 * I, n, 2 * I, stream);
      }
      if (fp32) cuda::swiglu_to_f32(t1.ptr, aef.ptr, R, I, float(cfg.swiglu_alpha), float(cfg.swiglu_limit), stream);
      else cuda::swiglu_to_bf16(t1.ptr, ae.ptr, R, I, float(cfg.swiglu_alpha), float(cfg.swiglu_limit), stream);
      for (int e = 0; e < E; ++e) {
        const int n = offsets[e + 1] - offsets[e], r0 = offsets[e];
        if (!n) continue;
        const void* ain = fp32 ? static_cast<const void*>(aef.ptr + size_t(r0) * I) : ae.ptr + size_t(r0) * I;
        gemm(L.w2, size_t(e) * H * I, ain, y.ptr + size_t(r0) * H, n, H, I);
        cuda::add_bias(y.ptr + size_t(r0) * H, L.b2.ptr + size_t(e) * H, n, H, stream);
      }
      // Each token appears once per expert and experts are applied one after another, so the
      // scatter never races.
      for (int e = 0; e < E; ++e) {
        const int n = offsets[e + 1] - offsets[e], r0 = offsets[e];
        if (n) cuda::scatter_add_weighted(x.ptr, y.ptr + size_t(r0) * H, d_rows.ptr + r0, d_w.ptr + r0, n, H, stream);
      }
    }
    length += T;
  }

  // One token, all on the device (no host synchronization): matrix-vector kernels with fp32
  // activations over BF16 dense weights and the MXFP4 experts as stored. BF16 path only.
  void decode_step(int32_t token) {
    const int H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate, K = cfg.experts_per_token;
    if (length + 1 > max_seq)
      fail_plain("the CUDA KV cache holds " + std::to_string(max_seq) + " positions; " + std::to_string(length + 1) + " requested");
    if (token < 0 || token >= cfg.vocab) fail_plain("token id " + std::to_string(token) + " is outside the vocabulary");
    const int32_t pos = length;
    d_tokens.ensure(1), d_pos.ensure(1);
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_tokens.ptr, &token, 4, cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_CHECK(cudaMemcpyAsync(d_pos.ptr, &pos, 4, cudaMemcpyHostToDevice, stream));
    x.ensure(H), hf.ensure(H), q.ensure(Q), k.ensure(KV), v.ensure(KV), attn.ensure(Q);
    rlogits.ensure(cfg.num_experts), d_idx.ensure(K), rw.ensure(K);
    t1.ensure(size_t(K) * 2 * I), aef.ensure(size_t(K) * I), y.ensure(size_t(K) * H);
    const float eps = float(cfg.rms_norm_eps);
    cuda::embedding(embed.ptr, d_tokens.ptr, x.ptr, 1, H, stream);
    for (int l = 0; l < cfg.num_layers; ++l) {
      Layer& L = layers[l];
      cuda::rmsnorm_to_f32(x.ptr, L.attn_norm.ptr, hf.ptr, 1, H, eps, stream);
      cuda::gemv_bf16(L.q.b.ptr, hf.ptr, L.q_bias.ptr, q.ptr, Q, H, false, stream);
      cuda::gemv_bf16(L.k.b.ptr, hf.ptr, L.k_bias.ptr, k.ptr, KV, H, false, stream);
      cuda::gemv_bf16(L.v.b.ptr, hf.ptr, L.v_bias.ptr, v.ptr, KV, H, false, stream);
      cuda::rope(q.ptr, d_pos.ptr, inv_freq.ptr, concentration, 1, cfg.num_heads, cfg.head_dim, stream);
      cuda::rope(k.ptr, d_pos.ptr, inv_freq.ptr, concentration, 1, cfg.num_kv_heads, cfg.head_dim, stream);
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(kcache[l].ptr + size_t(pos) * KV, k.ptr, size_t(KV) * 4, cudaMemcpyDeviceToDevice, stream));
      OSPREY_CUDA_CHECK(cudaMemcpyAsync(vcache[l].ptr + size_t(pos) * KV, v.ptr, size_t(KV) * 4, cudaMemcpyDeviceToDevice, stream));
      cuda::sink_attention(q.ptr, kcache[l].ptr, vcache[l].ptr, L.sinks.ptr, attn.ptr, 1, pos, cfg.num_heads,
                           cfg.num_kv_heads, cfg.head_dim, L.sliding ? cfg.sliding_window : 0,
                           1.0f / std::sqrt(float(cfg.head_dim)), stream);
      cuda::gemv_bf16(L.o.b.ptr, attn.ptr, L.o_bias.ptr, x.ptr, H, Q, /*accumulate=*/true, stream);  // + residual
      cuda::rmsnorm_to_f32(x.ptr, L.mlp_norm.ptr, hf.ptr, 1, H, eps, stream);
      cuda::gemv_f32(L.router_f32.ptr, hf.ptr, L.router_bias.ptr, rlogits.ptr, cfg.num_experts, H, stream);
      cuda::topk_softmax(rlogits.ptr, d_idx.ptr, rw.ptr, 1, cfg.num_experts, K, stream);
      cuda::gemv_mxfp4_experts(L.w1_blocks.ptr, L.w1_scales.ptr, L.b1.ptr, d_idx.ptr, K, hf.ptr, 0, t1.ptr, 2 * I, H, stream);
      cuda::swiglu_to_f32(t1.ptr, aef.ptr, K, I, float(cfg.swiglu_alpha), float(cfg.swiglu_limit), stream);
      cuda::gemv_mxfp4_experts(L.w2_blocks.ptr, L.w2_scales.ptr, L.b2.ptr, d_idx.ptr, K, aef.ptr, size_t(I), y.ptr, H, I, stream);
      cuda::moe_combine(x.ptr, y.ptr, rw.ptr, K, H, stream);
    }
    ++length;
    logits.ensure(cfg.vocab);
    cuda::rmsnorm_to_f32(x.ptr, final_norm.ptr, hf.ptr, 1, H, eps, stream);
    cuda::gemv_bf16(unembed.b.ptr, hf.ptr, nullptr, logits.ptr, cfg.vocab, H, false, stream);
  }

  // Final norm and unembedding for rows [first, T) of x: logits on the device.
  int unembed_rows(int first, int T) {
    const int H = cfg.hidden, n = T - first;
    logits.ensure(size_t(n) * cfg.vocab);
    const void* h = norm(x.ptr + size_t(first) * H, final_norm.ptr, n);
    gemm(unembed, 0, h, logits.ptr, n, cfg.vocab, H);
    return n;
  }
};

GptOssCudaModel::GptOssCudaModel(const GptOssWeights& w, int max_seq_len, Precision p)
    : impl_(std::make_unique<Impl>(w, max_seq_len, p == Precision::FP32)) {}
GptOssCudaModel::~GptOssCudaModel() = default;
const GptOssConfig& GptOssCudaModel::config() const { return impl_->cfg; }
void GptOssCudaModel::reset() { impl_->length = 0; }
int GptOssCudaModel::length() const { return impl_->length; }
void GptOssCudaModel::synchronize() { OSPREY_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

std::vector<float> GptOssCudaModel::forward(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) fail_plain("forward: no tokens");
  const int T = int(tokens.size());
  impl_->run_layers(tokens);
  const int n = impl_->unembed_rows(all_logits ? 0 : T - 1, T);
  std::vector<float> out(size_t(n) * impl_->cfg.vocab);
  OSPREY_CUDA_CHECK(cudaMemcpyAsync(out.data(), impl_->logits.ptr, out.size() * 4, cudaMemcpyDeviceToHost, impl_->stream));
  synchronize();
  return out;
}

int32_t GptOssCudaModel::forward_argmax(std::span<const int32_t> tokens) {
  if (tokens.empty()) fail_plain("forward: no tokens");
  const int T = int(tokens.size());
  if (T == 1 && !impl_->fp32) {
    impl_->decode_step(tokens[0]);
  } else {
    impl_->run_layers(tokens);
    impl_->unembed_rows(T - 1, T);
  }
  impl_->d_out_id.ensure(1);
  cuda::argmax_rows(impl_->logits.ptr, impl_->d_out_id.ptr, 1, impl_->cfg.vocab, impl_->stream);
  int32_t id;
  OSPREY_CUDA_CHECK(cudaMemcpyAsync(&id, impl_->d_out_id.ptr, 4, cudaMemcpyDeviceToHost, impl_->stream));
  synchronize();
  return id;
}

}  // namespace osprey
