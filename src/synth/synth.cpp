#include "synth/synth.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/safetensors_writer.h"
#include "harmony/o200k.h"
#include "harmony/tokenizer.h"

namespace osprey {
namespace fs = std::filesystem;

namespace {

GptOssConfig make_config(int layers, int hidden, int heads, int kv_heads, int head_dim, int experts, int top_k,
                         int intermediate, int vocab, int window) {
  GptOssConfig c;
  c.num_layers = layers;
  c.hidden = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.num_experts = experts;
  c.experts_per_token = top_k;
  c.intermediate = intermediate;
  c.vocab = vocab;
  c.sliding_window = window;
  c.layer_is_sliding.assign(layers, false);
  for (int l = 0; l < layers; l += 2) c.layer_is_sliding[l] = true;
  std::erase_if(c.eos_token_ids, [&](int id) { return id >= vocab; });  // small test vocabularies
  c.validate("synth preset");
  return c;
}

// Counter-based randomness: element i of a tensor is a pure function of (seed, tensor, i), so
// chunks can be produced in any order, in parallel, with identical bytes.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}
// Uniform in [-1, 1).
inline float unit(uint64_t key, uint64_t i) { return float(int64_t(mix64(key ^ mix64(i)) >> 40) - (1 << 23)) * 0x1p-23f; }

enum class Kind { Bf16Uniform, Mxfp4Blocks, Mxfp4Scales };
struct TensorPlan {
  TensorSpec spec;
  Kind kind;
  float center = 0, half_width = 1;  // BF16: center + half_width * U[-1, 1)
  int scale_exponent = 0;            // MXFP4 scales: 127 + exponent + {-1, 0, +1}
};

// Mean square of a uniformly random E2M1 code is 8.5625; an element scale of 2^e gives
// std ~ 2.93 * 2^e. Choose e so each output of a K-input dot has roughly `out_std`.
int mxfp4_exponent(int K, double out_std) { return int(std::lround(std::log2(out_std / (std::sqrt(double(K)) * 2.93)))); }

std::vector<TensorPlan> plan_tensors(const GptOssConfig& c, float branch_scale) {
  std::vector<TensorPlan> p;
  const int H = c.hidden, Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate, E = c.num_experts;
  const float s3 = std::sqrt(3.0f);  // uniform half-width for unit std
  auto bf16 = [&](std::string name, std::vector<int64_t> shape, float center, float std) {
    p.push_back({{std::move(name), DType::BF16, std::move(shape)}, Kind::Bf16Uniform, center, std * s3, 0});
  };
  auto mxfp4 = [&](const std::string& prefix, int rows, int cols, double out_std, float bias_std) {
    p.push_back({{prefix + "_blocks", DType::U8, {E, rows, cols / 32, 16}}, Kind::Mxfp4Blocks});
    p.push_back({{prefix + "_scales", DType::U8, {E, rows, cols / 32}}, Kind::Mxfp4Scales, 0, 0,
                 mxfp4_exponent(cols, out_std)});
    bf16(prefix + "_bias", {E, rows}, 0, bias_std);
  };
  auto inv_sqrt = [](int n) { return 1.0f / std::sqrt(float(n)); };
  bf16("model.embed_tokens.weight", {c.vocab, H}, 0, 1.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    std::string pre = fmt::format("model.layers.{}.", l);
    bf16(pre + "input_layernorm.weight", {H}, 1.0f, 0.25f);
    // q and k each give unit-variance heads; scores then have std ~ c^2 * sqrt(d) / sqrt(d) >> 0.
    bf16(pre + "self_attn.q_proj.weight", {Q, H}, 0, inv_sqrt(H));
    bf16(pre + "self_attn.q_proj.bias", {Q}, 0, 0.5f);
    bf16(pre + "self_attn.k_proj.weight", {KV, H}, 0, inv_sqrt(H));
    bf16(pre + "self_attn.k_proj.bias", {KV}, 0, 0.5f);
    bf16(pre + "self_attn.v_proj.weight", {KV, H}, 0, inv_sqrt(H));
    bf16(pre + "self_attn.v_proj.bias", {KV}, 0, 0.2f);
    bf16(pre + "self_attn.o_proj.weight", {H, Q}, 0, branch_scale * inv_sqrt(Q));
    bf16(pre + "self_attn.o_proj.bias", {H}, 0, branch_scale * 0.1f);
    bf16(pre + "self_attn.sinks", {c.num_heads}, 0.5f, 1.5f);  // sinks comparable to the scores
    bf16(pre + "post_attention_layernorm.weight", {H}, 1.0f, 0.25f);
    bf16(pre + "mlp.router.weight", {E, H}, 0, 2.0f * inv_sqrt(H));  // router logits std ~2: sharp routing
    bf16(pre + "mlp.router.bias", {E}, 0, 0.5f);
    // mlp1 outputs std ~4 so that the +-7 clamps on gate and up are exercised.
    mxfp4(pre + "mlp.experts.gate_up_proj", 2 * I, H, 4.0, 0.5f);
    mxfp4(pre + "mlp.experts.down_proj", H, I, branch_scale * 0.5, branch_scale * 0.1f);
  }
  bf16("model.norm.weight", {H}, 1.0f, 0.25f);
  bf16("lm_head.weight", {c.vocab, H}, 0, 3.0f * inv_sqrt(H));  // logits std ~3
  return p;
}

void fill_chunk(const TensorPlan& t, uint64_t key, uint8_t* dst, uint64_t off, size_t n) {
  switch (t.kind) {
    case Kind::Bf16Uniform: {
      const uint64_t first = off / 2;
      const int64_t count = int64_t(n / 2);
      bf16* out = reinterpret_cast<bf16*>(dst);
#pragma omp parallel for schedule(static) if (count > 65536)
      for (int64_t i = 0; i < count; ++i) out[i] = f32_to_bf16(t.center + t.half_width * unit(key, first + i));
      break;
    }
    case Kind::Mxfp4Blocks: {
      const int64_t words = int64_t((n + 7) / 8);
#pragma omp parallel for schedule(static) if (words > 65536)
      for (int64_t w = 0; w < words; ++w) {
        uint64_t r = mix64(key ^ mix64(off / 8 + uint64_t(w)));
        const size_t base = size_t(w) * 8;
        for (size_t b = 0; b < 8 && base + b < n; ++b) dst[base + b] = uint8_t(r >> (8 * b));
      }
      break;
    }
    case Kind::Mxfp4Scales: {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < int64_t(n); ++i)
        dst[i] = uint8_t(127 + t.scale_exponent + int(mix64(key ^ mix64(off + uint64_t(i))) % 3) - 1);
      break;
    }
  }
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() {
  static const std::vector<SynthPreset> presets = [] {
    std::vector<SynthPreset> v;
    // layers, hidden, heads, kv, head_dim, experts, top_k, intermediate, vocab, window
    v.push_back({"tiny", make_config(2, 64, 4, 2, 16, 8, 4, 64, 201088, 128), 2});
    v.push_back({"20b", make_config(24, 2880, 64, 8, 64, 32, 4, 2880, 201088, 128), 3});
    v.push_back({"120b", make_config(36, 2880, 64, 8, 64, 128, 4, 2880, 201088, 128), 15});
    // Parity shapes that catch shortcuts: hidden not a multiple of 128, intermediate != hidden,
    // GQA groups of 3 and 2, odd vocabularies, sharded files, a short window that sequences outrun.
    v.push_back({"parity-a", make_config(4, 96, 6, 2, 16, 8, 4, 160, 1000, 128), 3});
    v.push_back({"parity-b", make_config(3, 160, 4, 2, 32, 6, 3, 64, 777, 8), 2});
    return v;
  }();
  return presets;
}

const SynthPreset& synth_preset(const std::string& name) {
  std::string names;
  for (auto& p : synth_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("unknown preset '{}' (valid: {})", name, names);
}

uint64_t synth_checkpoint(const SynthPreset& preset, const std::string& out_dir, const SynthOptions& opt) {
  const GptOssConfig& c = preset.config;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("cannot create {}: {}", out_dir, ec.message());
  std::vector<TensorPlan> plan = plan_tensors(c, opt.branch_scale);
  uint64_t total = 0;
  for (auto& t : plan) total += t.spec.nbytes();

  Progress progress(fmt::format("synth {}", preset.name), opt.progress ? total : 0);
  std::vector<ShardedTensor> tensors;
  for (auto& t : plan) {
    const uint64_t key = mix64(opt.seed) ^ name_hash(t.spec.name);
    tensors.push_back({t.spec, [&t, key](uint8_t* dst, uint64_t off, size_t nb) { fill_chunk(t, key, dst, off, nb); }});
  }
  write_sharded_safetensors(out_dir, tensors, preset.num_shards, {{"format", "pt"}}, opt.progress ? &progress : nullptr);
  if (opt.progress) progress.finish();
  write_json_file((fs::path(out_dir) / "config.json").string(), c.to_hf_json());
  nlohmann::json gen = {{"do_sample", true}, {"transformers_version", "4.55.0.dev0"}};
  if (c.vocab > 200012) {  // the published special ids exist only in the full vocabulary
    gen["bos_token_id"] = 199998;
    gen["eos_token_id"] = {200002, 199999, 200012};
    gen["pad_token_id"] = 199999;
  }
  write_json_file((fs::path(out_dir) / "generation_config.json").string(), gen);
  write_json_file((fs::path(out_dir) / "osprey_synth.json").string(), {{"preset", preset.name}, {"seed", opt.seed}, {"branch_scale", opt.branch_scale}});
  if (c.vocab == harmony::kO200kHarmonyVocab) {  // the real tokenizer fits: ship it as published
    const harmony::Tokenizer& tok = harmony::Tokenizer::embedded_o200k_harmony();
    std::ofstream(fs::path(out_dir) / "tokenizer.json") << tok.to_hf_json();
    write_json_file((fs::path(out_dir) / "tokenizer_config.json").string(),
                    {{"bos_token", "<|startoftext|>"}, {"eos_token", "<|return|>"}, {"pad_token", "<|endoftext|>"},
                     {"model_max_length", c.max_position_embeddings}, {"tokenizer_class", "PreTrainedTokenizerFast"}});
  }
  return total;
}

}  // namespace osprey
