#include "model/gpt_oss_weights.h"

#include <filesystem>
#include <fmt/format.h>

#include "core/error.h"
#include "model/gpt_oss_fp8.h"

namespace osprey {

namespace {

struct Loader {
  const TensorStore& s;
  const GptOssConfig& c;

  const bf16* vec(const std::string& name, int64_t n) { return s.get(name, DType::BF16, {n}).as<bf16>(); }
  Bf16Matrix mat(const std::string& name, int rows, int cols) {
    return {s.get(name, DType::BF16, {rows, cols}).as<bf16>(), rows, cols};
  }
  Mxfp4Experts experts(const std::string& blocks, const std::string& scales, const std::string& bias, int rows,
                       int cols) {
    Mxfp4Experts e;
    e.experts = c.num_experts;
    e.rows = rows;
    e.cols = cols;
    e.blocks = s.get(blocks, DType::U8, {c.num_experts, rows, cols / 32, 16}).data;
    e.scales = s.get(scales, DType::U8, {c.num_experts, rows, cols / 32}).data;
    e.bias = s.get(bias, DType::BF16, {c.num_experts, rows}).as<bf16>();
    return e;
  }
};

}  // namespace

GptOssWeights GptOssWeights::load(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) fail("model directory {} does not exist", dir);
  GptOssWeights w;
  w.config = GptOssConfig::load((fs::path(dir) / "config.json").string());
  w.store = TensorStore::open(dir);
  const GptOssConfig& c = w.config;
  Loader ld{w.store, c};
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts;
  w.layout = w.store.has("embedding.weight") ? Layout::Original : Layout::HuggingFace;
  w.layers.resize(c.num_layers);
  // A checkpoint written by `osprey convert` has the HF names; its GEMM weights are FP8 views
  // (weights.fp8) and the matrices here keep only their shapes.
  const bool converted = w.store.has("lm_head.weight_fp8");
  if (converted) w.fp8 = load_fp8_views(w.store, c);
  auto gemm = [&](const std::string& name, int rows, int cols) {
    return converted ? Bf16Matrix{nullptr, rows, cols} : ld.mat(name, rows, cols);
  };
  auto experts = [&](const std::string& prefix, int rows, int cols) {
    if (!converted) return ld.experts(prefix + "_blocks", prefix + "_scales", prefix + "_bias", rows, cols);
    return Mxfp4Experts{nullptr, nullptr, w.store.get(prefix + "_bias", DType::BF16, {E, rows}).as<bf16>(), E, rows, cols};
  };
  if (w.layout == Layout::HuggingFace) {  // (a converted checkpoint has HF names)
    w.embed = ld.mat("model.embed_tokens.weight", c.vocab, H);
    w.unembed = gemm("lm_head.weight", c.vocab, H);
    w.final_norm = ld.vec("model.norm.weight", H);
    for (int l = 0; l < c.num_layers; ++l) {
      std::string p = fmt::format("model.layers.{}.", l);
      GptOssLayerWeights& L = w.layers[l];
      L.attn_norm = ld.vec(p + "input_layernorm.weight", H);
      L.q = gemm(p + "self_attn.q_proj.weight", Q, H);
      L.k = gemm(p + "self_attn.k_proj.weight", KV, H);
      L.v = gemm(p + "self_attn.v_proj.weight", KV, H);
      L.q_bias = ld.vec(p + "self_attn.q_proj.bias", Q);
      L.k_bias = ld.vec(p + "self_attn.k_proj.bias", KV);
      L.v_bias = ld.vec(p + "self_attn.v_proj.bias", KV);
      L.o = gemm(p + "self_attn.o_proj.weight", H, Q);
      L.o_bias = ld.vec(p + "self_attn.o_proj.bias", H);
      L.sinks = ld.vec(p + "self_attn.sinks", c.num_heads);
      L.mlp_norm = ld.vec(p + "post_attention_layernorm.weight", H);
      L.router = ld.mat(p + "mlp.router.weight", E, H);
      L.router_bias = ld.vec(p + "mlp.router.bias", E);
      L.mlp1 = experts(p + "mlp.experts.gate_up_proj", 2 * I, H);
      L.mlp2 = experts(p + "mlp.experts.down_proj", H, I);
    }
  } else {
    w.embed = ld.mat("embedding.weight", c.vocab, H);
    w.unembed = ld.mat("unembedding.weight", c.vocab, H);
    w.final_norm = ld.vec("norm.scale", H);
    for (int l = 0; l < c.num_layers; ++l) {
      std::string p = fmt::format("block.{}.", l);
      GptOssLayerWeights& L = w.layers[l];
      L.attn_norm = ld.vec(p + "attn.norm.scale", H);
      // Fused qkv rows: q = [0, Q), k = [Q, Q+KV), v = [Q+KV, Q+2KV); row-major, so each is a view.
      Bf16Matrix qkv = ld.mat(p + "attn.qkv.weight", Q + 2 * KV, H);
      const bf16* qkv_bias = ld.vec(p + "attn.qkv.bias", Q + 2 * KV);
      L.q = {qkv.w, Q, H};
      L.k = {qkv.w + size_t(Q) * H, KV, H};
      L.v = {qkv.w + size_t(Q + KV) * H, KV, H};
      L.q_bias = qkv_bias;
      L.k_bias = qkv_bias + Q;
      L.v_bias = qkv_bias + Q + KV;
      L.o = ld.mat(p + "attn.out.weight", H, Q);
      L.o_bias = ld.vec(p + "attn.out.bias", H);
      L.sinks = ld.vec(p + "attn.sinks", c.num_heads);
      L.mlp_norm = ld.vec(p + "mlp.norm.scale", H);
      L.router = ld.mat(p + "mlp.gate.weight", E, H);
      L.router_bias = ld.vec(p + "mlp.gate.bias", E);
      L.mlp1 = ld.experts(p + "mlp.mlp1_weight.blocks", p + "mlp.mlp1_weight.scales", p + "mlp.mlp1_bias", 2 * I, H);
      L.mlp2 = ld.experts(p + "mlp.mlp2_weight.blocks", p + "mlp.mlp2_weight.scales", p + "mlp.mlp2_bias", H, I);
    }
  }
  for (int l = 0; l < c.num_layers; ++l) w.layers[l].sliding = c.layer_is_sliding[l];
  return w;
}

}  // namespace osprey
