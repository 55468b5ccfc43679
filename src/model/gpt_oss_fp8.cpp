#include "model/gpt_oss_fp8.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "formats/safetensors_writer.h"

#include "core/progress.h"
#include "formats/mxfp4.h"
#include <cstring>

namespace osprey {

namespace {

// One unit of conversion work: row blocks [rb0, rb1) of matrix e of m.
struct Task {
  fp8::Matrix* m;
  int e, rb0, rb1;
  std::function<void(int, float*)> row;
  size_t elements() const { return size_t(std::min(rb1 * fp8::kBlock, m->rows) - rb0 * fp8::kBlock) * m->cols; }
};

void add_tasks(std::vector<Task>& tasks, fp8::Matrix& m, int e, std::function<void(int, float*)> row) {
  constexpr int kBlocksPerTask = 8;
  for (int rb = 0; rb < fp8::blocks(m.rows); rb += kBlocksPerTask)
    tasks.push_back({&m, e, rb, std::min(fp8::blocks(m.rows), rb + kBlocksPerTask), row});
}

void add_bf16(std::vector<Task>& tasks, fp8::Matrix& m, const Bf16Matrix& src) {
  m.allocate(1, src.rows, src.cols);
  add_tasks(tasks, m, 0, [src](int r, float* out) {
    for (int c = 0; c < src.cols; ++c) out[c] = bf16_to_f32(src.w[size_t(r) * src.cols + c]);
  });
}

void add_mxfp4(std::vector<Task>& tasks, fp8::Matrix& m, const Mxfp4Experts& src) {
  m.allocate(src.experts, src.rows, src.cols);
  for (int e = 0; e < src.experts; ++e)
    add_tasks(tasks, m, e, [src, e](int r, float* out) {
      const size_t g = size_t(src.cols) / kMxfp4Group;
      mxfp4_decode_row(src.expert_blocks(e) + size_t(r) * g * kMxfp4GroupBytes, src.expert_scales(e) + size_t(r) * g,
                       src.cols, out);
    });
}

}  // namespace

GptOssFp8Weights GptOssFp8Weights::convert(const GptOssWeights& w, bool show_progress, bool experts) {
  if (w.fp8) fail("the checkpoint is already converted to FP8");
  GptOssFp8Weights out;
  out.layers.resize(w.layers.size());
  std::vector<Task> tasks;
  add_bf16(tasks, out.unembed, w.unembed);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const GptOssLayerWeights& L = w.layers[l];
    GptOssFp8Layer& d = out.layers[l];
    add_bf16(tasks, d.q, L.q);
    add_bf16(tasks, d.k, L.k);
    add_bf16(tasks, d.v, L.v);
    add_bf16(tasks, d.o, L.o);
    if (experts) {
      add_mxfp4(tasks, d.mlp1, L.mlp1);
      add_mxfp4(tasks, d.mlp2, L.mlp2);
    }
  }
  size_t total = 0;
  for (const Task& t : tasks) total += t.elements();
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("converting weights to fp8", total);
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < tasks.size(); ++i) {
    fp8::quantize_row_blocks(*tasks[i].m, tasks[i].e, tasks[i].rb0, tasks[i].rb1, tasks[i].row);
    if (progress) {
#pragma omp critical
      progress->advance(tasks[i].elements());
    }
  }
  if (progress) progress->finish();
  return out;
}

}  // namespace osprey

namespace osprey {

namespace {

// A tensor to write from memory.
ShardedTensor from_memory(TensorSpec spec, const void* data) {
  const uint8_t* src = static_cast<const uint8_t*>(data);
  return {std::move(spec), [src](uint8_t* dst, uint64_t off, size_t nb) { std::memcpy(dst, src + off, nb); }};
}

std::string layer_prefix(int l) { return fmt::format("model.layers.{}.", l); }

void add_fp8(std::vector<ShardedTensor>& out, const std::string& name, const fp8::Matrix& m) {
  std::vector<int64_t> shape = {m.rows, m.cols}, sshape = {m.scale_rows(), m.scale_stride()};
  if (m.count > 1) shape.insert(shape.begin(), m.count), sshape.insert(sshape.begin(), m.count);
  out.push_back(from_memory({name + "_fp8", DType::F8_E4M3, shape}, m.data()));
  out.push_back(from_memory({name + "_fp8_scale", DType::F32, sshape}, m.scale()));
}

void add_bf16(std::vector<ShardedTensor>& out, const std::string& name, const bf16* p, std::vector<int64_t> shape) {
  out.push_back(from_memory({name, DType::BF16, std::move(shape)}, p));
}

}  // namespace

uint64_t write_fp8_checkpoint(const GptOssWeights& w, const GptOssFp8Weights& f, const std::string& out_dir,
                              bool show_progress) {
  namespace fs = std::filesystem;
  const GptOssConfig& c = w.config;
  const int64_t H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts, V = c.vocab;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("cannot create {}: {}", out_dir, ec.message());
  if (fs::equivalent(out_dir, w.store.dir(), ec)) fail("convert: --out must differ from the source directory");
  std::vector<ShardedTensor> t;
  add_bf16(t, "model.embed_tokens.weight", w.embed.w, {V, H});
  add_bf16(t, "model.norm.weight", w.final_norm, {H});
  add_fp8(t, "lm_head.weight", f.unembed);
  for (int l = 0; l < c.num_layers; ++l) {
    const GptOssLayerWeights& L = w.layers[l];
    const GptOssFp8Layer& F = f.layers[l];
    const std::string p = layer_prefix(l);
    add_bf16(t, p + "input_layernorm.weight", L.attn_norm, {H});
    add_fp8(t, p + "self_attn.q_proj.weight", F.q);
    add_fp8(t, p + "self_attn.k_proj.weight", F.k);
    add_fp8(t, p + "self_attn.v_proj.weight", F.v);
    add_bf16(t, p + "self_attn.q_proj.bias", L.q_bias, {Q});
    add_bf16(t, p + "self_attn.k_proj.bias", L.k_bias, {KV});
    add_bf16(t, p + "self_attn.v_proj.bias", L.v_bias, {KV});
    add_fp8(t, p + "self_attn.o_proj.weight", F.o);
    add_bf16(t, p + "self_attn.o_proj.bias", L.o_bias, {H});
    add_bf16(t, p + "self_attn.sinks", L.sinks, {c.num_heads});
    add_bf16(t, p + "post_attention_layernorm.weight", L.mlp_norm, {H});
    add_bf16(t, p + "mlp.router.weight", L.router.w, {E, H});
    add_bf16(t, p + "mlp.router.bias", L.router_bias, {E});
    add_fp8(t, p + "mlp.experts.gate_up_proj", F.mlp1);
    add_bf16(t, p + "mlp.experts.gate_up_proj_bias", L.mlp1.bias, {E, 2 * I});
    add_fp8(t, p + "mlp.experts.down_proj", F.mlp2);
    add_bf16(t, p + "mlp.experts.down_proj_bias", L.mlp2.bias, {E, H});
  }
  uint64_t total = 0;
  for (auto& x : t) total += x.spec.nbytes();
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("writing fp8 checkpoint", total);
  const uint64_t shard_bytes = uint64_t(4) << 30;  // shards of about 4 GiB
  write_sharded_safetensors(out_dir, t, int((total + shard_bytes - 1) / shard_bytes),
                            {{"format", "pt"}, {"osprey_fp8", "e4m3_block128"}}, progress ? &*progress : nullptr);
  if (progress) progress->finish();
  nlohmann::json cfg = c.to_hf_json();
  cfg["osprey_fp8"] = {{"format", "float8_e4m3fn"},
                       {"weight_block_size", {fp8::kBlock, fp8::kBlock}},
                       {"scale", "amax / 448 per block; scale tensors [rows/128][cols/128], both rounded up to a multiple of 4"},
                       {"converted", {"q_proj", "k_proj", "v_proj", "o_proj", "experts", "lm_head"}}};
  write_json_file((fs::path(out_dir) / "config.json").string(), cfg);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    const fs::path src = fs::path(w.store.dir()) / name;
    if (fs::exists(src)) fs::copy_file(src, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("cannot copy {}: {}", src.string(), ec.message());
  }
  return total;
}

std::shared_ptr<const GptOssFp8Weights> load_fp8_views(const TensorStore& s, const GptOssConfig& c) {
  auto f = std::make_shared<GptOssFp8Weights>();
  auto view = [&](const std::string& name, int count, int rows, int cols) {
    fp8::Matrix m = fp8::Matrix::view(count, rows, cols, nullptr, nullptr);
    std::vector<int64_t> shape = {rows, cols}, sshape = {m.scale_rows(), m.scale_stride()};
    if (count > 1) shape.insert(shape.begin(), count), sshape.insert(sshape.begin(), count);
    m.q_view = s.get(name + "_fp8", DType::F8_E4M3, shape).data;
    m.s_view = s.get(name + "_fp8_scale", DType::F32, sshape).as<float>();
    return m;
  };
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts;
  f->unembed = view("lm_head.weight", 1, c.vocab, H);
  f->layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    GptOssFp8Layer& L = f->layers[l];
    L.q = view(p + "self_attn.q_proj.weight", 1, Q, H);
    L.k = view(p + "self_attn.k_proj.weight", 1, KV, H);
    L.v = view(p + "self_attn.v_proj.weight", 1, KV, H);
    L.o = view(p + "self_attn.o_proj.weight", 1, H, Q);
    L.mlp1 = view(p + "mlp.experts.gate_up_proj", E, 2 * I, H);
    L.mlp2 = view(p + "mlp.experts.down_proj", E, H, I);
  }
  return f;
}

}  // namespace osprey
