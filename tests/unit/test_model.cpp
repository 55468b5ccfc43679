// The whole CPU model on small synthetic checkpoints: cache consistency, both checkpoint layouts,
// determinism of synth, broken checkpoints, and the command contracts.
#include <fstream>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cstring>
#include <regex>
#include <functional>
#include <gtest/gtest.h>

#include "formats/fp8.h"
#include "formats/mxfp4.h"
#include "model/gpt_oss_cost.h"
#include "cli/bench_serve_stream.h"
#include "cli/weights_arg.h"
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "engine/generate.h"
#include "formats/safetensors_writer.h"
#include "model/gpt_oss_forward.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

using test::expect_refused;
using test::TempDir;

double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

std::vector<int32_t> ramp_tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = int32_t((i * 7919 + 13) % vocab);
  return t;
}

class SmallModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    synth_checkpoint(synth_preset("parity-b"), dir_->str(), {.seed = 5, .progress = false});
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* SmallModel::dir_ = nullptr;

TEST_F(SmallModel, IncrementalDecodingMatchesFullSequence) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  GptOssCpuModel m(w);
  const int T = 30, V = w.config.vocab;  // window 8: sliding layers wrap their ring several times
  auto tokens = ramp_tokens(T, V);
  KvCache full = m.new_cache();
  std::vector<float> ref = m.forward(tokens, full, true);
  KvCache inc = m.new_cache();
  std::vector<float> first = m.forward(std::span(tokens).first(11), inc, true);  // a prefill chunk longer than the window
  EXPECT_LT(rel_err(first.data(), ref.data(), first.size()), 1e-6);
  for (int t = 11; t < T; t += 3) {
    int n = std::min(3, T - t);
    std::vector<float> l = m.forward(std::span(tokens).subspan(t, n), inc, true);
    for (int i = 0; i < n; ++i)
      EXPECT_LT(rel_err(&l[size_t(i) * V], &ref[size_t(t + i) * V], V), 1e-5) << "position " << t + i;
  }
}

TEST_F(SmallModel, LogitsAreFarFromUniform) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  GptOssCpuModel m(w);
  KvCache c = m.new_cache();
  std::vector<float> l = m.forward(ramp_tokens(4, w.config.vocab), c, false);
  double mean = 0, var = 0;
  for (float v : l) mean += v;
  mean /= l.size();
  for (float v : l) var += (v - mean) * (v - mean);
  EXPECT_GT(std::sqrt(var / l.size()), 1.0);
}

// Rewrites an HF-layout checkpoint in OpenAI's original/ layout (block.N.*, fused qkv).
void write_original_layout(const GptOssWeights& w, const std::string& out) {
  const GptOssConfig& c = w.config;
  const TensorStore& s = w.store;
  std::vector<TensorSpec> specs;
  std::vector<std::function<void(uint8_t*, uint64_t, size_t)>> fills;
  auto copy_of = [&](std::string dst, std::vector<std::string> srcs) {
    std::vector<int64_t> shape = s.get(srcs[0]).shape;
    for (size_t i = 1; i < srcs.size(); ++i) shape[0] += s.get(srcs[i]).shape[0];
    specs.push_back({dst, s.get(srcs[0]).dtype, shape});
    fills.push_back([&s, srcs](uint8_t* dst, uint64_t off, size_t n) {
      std::vector<uint8_t> all;
      for (auto& name : srcs) all.insert(all.end(), s.get(name).data, s.get(name).data + s.get(name).nbytes);
      std::memcpy(dst, all.data() + off, n);
    });
  };
  copy_of("embedding.weight", {"model.embed_tokens.weight"});
  copy_of("unembedding.weight", {"lm_head.weight"});
  copy_of("norm.scale", {"model.norm.weight"});
  for (int l = 0; l < c.num_layers; ++l) {
    std::string h = fmt::format("model.layers.{}.", l), o = fmt::format("block.{}.", l);
    copy_of(o + "attn.norm.scale", {h + "input_layernorm.weight"});
    copy_of(o + "attn.qkv.weight", {h + "self_attn.q_proj.weight", h + "self_attn.k_proj.weight", h + "self_attn.v_proj.weight"});
    copy_of(o + "attn.qkv.bias", {h + "self_attn.q_proj.bias", h + "self_attn.k_proj.bias", h + "self_attn.v_proj.bias"});
    copy_of(o + "attn.sinks", {h + "self_attn.sinks"});
    copy_of(o + "attn.out.weight", {h + "self_attn.o_proj.weight"});
    copy_of(o + "attn.out.bias", {h + "self_attn.o_proj.bias"});
    copy_of(o + "mlp.norm.scale", {h + "post_attention_layernorm.weight"});
    copy_of(o + "mlp.gate.weight", {h + "mlp.router.weight"});
    copy_of(o + "mlp.gate.bias", {h + "mlp.router.bias"});
    copy_of(o + "mlp.mlp1_weight.blocks", {h + "mlp.experts.gate_up_proj_blocks"});
    copy_of(o + "mlp.mlp1_weight.scales", {h + "mlp.experts.gate_up_proj_scales"});
    copy_of(o + "mlp.mlp1_bias", {h + "mlp.experts.gate_up_proj_bias"});
    copy_of(o + "mlp.mlp2_weight.blocks", {h + "mlp.experts.down_proj_blocks"});
    copy_of(o + "mlp.mlp2_weight.scales", {h + "mlp.experts.down_proj_scales"});
    copy_of(o + "mlp.mlp2_bias", {h + "mlp.experts.down_proj_bias"});
  }
  SafetensorsWriter wr(out + "/model.safetensors", specs);
  for (auto& f : fills) wr.write_next(f);
  wr.close();
  nlohmann::json cfg = {{"num_hidden_layers", c.num_layers}, {"num_experts", c.num_experts},
                        {"experts_per_token", c.experts_per_token}, {"vocab_size", c.vocab},
                        {"hidden_size", c.hidden}, {"intermediate_size", c.intermediate},
                        {"swiglu_limit", c.swiglu_limit}, {"head_dim", c.head_dim},
                        {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads},
                        {"sliding_window", c.sliding_window}, {"initial_context_length", c.rope_original_max_pos},
                        {"rope_theta", c.rope_theta}, {"rope_scaling_factor", c.rope_factor},
                        {"rope_ntk_alpha", c.rope_beta_slow}, {"rope_ntk_beta", c.rope_beta_fast}};
  test::write_file(out + "/config.json", cfg.dump());
}

TEST_F(SmallModel, OriginalLayoutGivesTheSameLogits) {
  GptOssWeights hf = GptOssWeights::load(dir_->str());
  TempDir orig;
  write_original_layout(hf, orig.str());
  GptOssWeights og = GptOssWeights::load(orig.str());
  EXPECT_EQ(og.layout, GptOssWeights::Layout::Original);
  auto tokens = ramp_tokens(12, hf.config.vocab);
  KvCache c1 = GptOssCpuModel(hf).new_cache(), c2 = GptOssCpuModel(og).new_cache();
  std::vector<float> a = GptOssCpuModel(hf).forward(tokens, c1, true);
  std::vector<float> b = GptOssCpuModel(og).forward(tokens, c2, true);
  EXPECT_EQ(a, b);
}

TEST_F(SmallModel, SynthIsDeterministicAndSeeded) {
  TempDir again, other;
  synth_checkpoint(synth_preset("parity-b"), again.str(), {.seed = 5, .progress = false});
  synth_checkpoint(synth_preset("parity-b"), other.str(), {.seed = 6, .progress = false});
  for (auto& e : std::filesystem::directory_iterator(dir_->str())) {
    std::string name = e.path().filename().string();
    if (name == "osprey_synth.json") continue;
    EXPECT_EQ(test::read_file(e.path().string()), test::read_file(again / name)) << name;
  }
  auto f = "model-00000-of-00001.safetensors";
  EXPECT_NE(test::read_file(dir_->str() + "/" + f), test::read_file(other / f));
}

TEST_F(SmallModel, SynthBranchScaleScalesOnlyWhatLayersAddToTheStream) {
  TempDir calm;  // dir_ holds seed 5 at the default branch scale 1
  synth_checkpoint(synth_preset("parity-b"), calm.str(), {.seed = 5, .progress = false, .branch_scale = 0.25f});
  TensorStore a = TensorStore::open(dir_->str()), b = TensorStore::open(calm.str());
  auto bf16_values = [](const TensorView& t) {
    std::vector<float> v(t.nbytes / 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(t.as<bf16>()[i]);
    return v;
  };
  for (const char* name : {"model.layers.1.self_attn.o_proj.weight", "model.layers.1.self_attn.o_proj.bias",
                           "model.layers.2.mlp.experts.down_proj_bias"}) {
    std::vector<float> x = bf16_values(a.get(name)), y = bf16_values(b.get(name));
    ASSERT_EQ(x.size(), y.size()) << name;
    size_t nonzero = 0;
    for (size_t i = 0; i < x.size(); ++i) {  // a power of two commutes with the BF16 rounding
      EXPECT_EQ(y[i], 0.25f * x[i]) << name << " [" << i << "]";
      nonzero += x[i] != 0;
    }
    EXPECT_GT(nonzero, x.size() / 2) << name;
  }
  auto bytes = [](const TensorView& t) { return std::string(reinterpret_cast<const char*>(t.data), t.nbytes); };
  const TensorView &sa = a.get("model.layers.0.mlp.experts.down_proj_scales"), &sb = b.get("model.layers.0.mlp.experts.down_proj_scales");
  for (size_t i = 0; i < sa.nbytes; ++i) ASSERT_EQ(int(sb.data[i]), int(sa.data[i]) - 2) << i;  // 2^-2 per element
  for (const char* name : {"model.layers.0.mlp.experts.down_proj_blocks", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.mlp.experts.gate_up_proj_scales", "model.layers.0.mlp.router.weight",
                           "lm_head.weight", "model.embed_tokens.weight"})
    EXPECT_EQ(bytes(a.get(name)), bytes(b.get(name))) << name;
  auto meta = nlohmann::json::parse(test::read_file(calm / "osprey_synth.json"));
  EXPECT_EQ(meta["branch_scale"].get<float>(), 0.25f);
}

TEST_F(SmallModel, SynthWritesThePublishedLayout) {
  auto idx = nlohmann::json::parse(test::read_file(*dir_ / "model.safetensors.index.json"));
  std::string shard = idx["weight_map"]["model.layers.0.mlp.experts.gate_up_proj_blocks"];
  EXPECT_TRUE(std::regex_match(shard, std::regex("model-0000[01]-of-00001\\.safetensors"))) << shard;
  TensorStore s = TensorStore::open(dir_->str());
  const GptOssConfig& c = synth_preset("parity-b").config;
  EXPECT_EQ(s.size(), size_t(19 * c.num_layers + 3));
  EXPECT_EQ(s.get("model.layers.1.mlp.experts.down_proj_blocks").shape,
            (std::vector<int64_t>{c.num_experts, c.hidden, c.intermediate / 32, 16}));
  EXPECT_EQ(s.get("model.layers.1.mlp.experts.down_proj_scales").dtype, DType::U8);
  auto cfg = nlohmann::json::parse(test::read_file(*dir_ / "config.json"));
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "mxfp4");
}

TEST_F(SmallModel, GreedyGenerationIsDeterministicAndSamplingIsSeeded) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  GptOssCpuModel m(w);
  auto prompt = ramp_tokens(5, w.config.vocab);
  GenerateOptions g{.max_tokens = 6, .sampling = {.temperature = 0}};
  EXPECT_EQ(generate(m, prompt, g), generate(m, prompt, g));
  GenerateOptions s{.max_tokens = 6, .sampling = {.temperature = 1.0f, .top_p = 0.9f, .seed = 11}};
  EXPECT_EQ(generate(m, prompt, s), generate(m, prompt, s));
  // The first greedy token is the argmax of the prompt's last logits.
  KvCache c = m.new_cache();
  auto l = m.forward(prompt, c, false);
  EXPECT_EQ(generate(m, prompt, g)[0], argmax(l));
}

TEST_F(SmallModel, BadTokensAreRejected) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  GptOssCpuModel m(w);
  KvCache c = m.new_cache();
  std::vector<int32_t> bad = {1, w.config.vocab};
  EXPECT_THROW(m.forward(bad, c, false), Error);
}

TEST_F(SmallModel, CliLogitsAndGenerateContracts) {
  TempDir out;
  auto r = test::run_cli(fmt::format("logits --model {} --tokens 1,2,3,4 --out {}", dir_->str(), out / "l.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  NpyF32 npy = read_npy_f32(out / "l.npy");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{4, 777}));
  GptOssWeights w = GptOssWeights::load(dir_->str());
  GptOssCpuModel m(w);
  KvCache c = m.new_cache();
  std::vector<int32_t> toks = {1, 2, 3, 4};
  EXPECT_EQ(npy.data, m.forward(toks, c, true));

  r = test::run_cli(fmt::format("generate --model {} --tokens 1,2,3,4 --max-tokens 5 --greedy", dir_->str()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  GenerateOptions g{.max_tokens = 5, .sampling = {.temperature = 0}};
  auto expect = generate(m, toks, g);
  EXPECT_EQ(r.out, fmt::format("{}\n", fmt::join(expect, ",")));

  r = test::run_cli(fmt::format("generate --model {} --tokens 1,x,3 --max-tokens 5 --greedy", dir_->str()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'x' is not a token id"), std::string::npos) << r.err;
  r = test::run_cli(fmt::format("generate --model {} --tokens 1,9999 --greedy", dir_->str()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("token id 9999 is outside the vocabulary"), std::string::npos) << r.err;
}

TEST_F(SmallModel, BrokenCheckpointsGetClearErrors) {
  // A copy whose index names a tensor that its shard lacks, then one with a wrong shape in config.
  TempDir d;
  for (auto& e : std::filesystem::directory_iterator(dir_->str()))
    std::filesystem::copy(e.path(), d / e.path().filename().string());
  auto idx = nlohmann::json::parse(test::read_file(d / "model.safetensors.index.json"));
  idx["weight_map"].erase("model.layers.2.self_attn.sinks");
  test::write_file(d / "model.safetensors.index.json", idx.dump());
  // sinks is still in its shard, so loading works; now drop a whole shard.
  std::filesystem::remove(d / "model-00001-of-00001.safetensors");
  expect_refused(fmt::format("logits --model {} --tokens 1 --out {}", d.str(), d / "x.npy"),
                 "model-00001-of-00001.safetensors");

  TempDir e;
  for (auto& f : std::filesystem::directory_iterator(dir_->str()))
    std::filesystem::copy(f.path(), e / f.path().filename().string());
  auto cfg = nlohmann::json::parse(test::read_file(e / "config.json"));
  cfg["intermediate_size"] = 96;
  test::write_file(e / "config.json", cfg.dump());
  expect_refused(fmt::format("generate --model {} --tokens 1 --greedy", e.str()), "gate_up_proj_blocks' has shape");

  // Truncated shard.
  std::filesystem::resize_file(e / "model-00000-of-00001.safetensors", 1000);
  expect_refused(fmt::format("inspect --model {}", e.str()), "model-00000-of-00001.safetensors");

  expect_refused("generate --model /nonexistent/dir --tokens 1 --greedy", "/nonexistent/dir does not exist");
}

}  // namespace
}  // namespace osprey

namespace osprey {
namespace {

// --precision fp8: the emulation differs from fp32 (it quantizes), stays close, and a converted
// checkpoint (`osprey convert`) gives exactly the logits of converting at load.
TEST(Fp8Emulation, ConvertedCheckpointGivesTheSameLogits) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-a"), dir / "src", {.seed = 9, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir / "src");
  const std::vector<int32_t> toks = {5, 77, 300, 12, 999, 41, 7, 512, 3};
  GptOssCpuModel ref(w), emu(w, CpuPrecision::Fp8);
  KvCache c1 = ref.new_cache(), c2 = emu.new_cache();
  const std::vector<float> a = ref.forward(toks, c1, true), b = emu.forward(toks, c2, true);
  EXPECT_GT(rel_err(b.data(), a.data(), a.size()), 1e-4);  // quantization is not a no-op
  EXPECT_LT(rel_err(b.data(), a.data(), a.size()), 0.6);   // nor a different model

  GptOssFp8Weights f = GptOssFp8Weights::convert(w, false);
  write_fp8_checkpoint(w, f, dir / "fp8", false);
  GptOssWeights w8 = GptOssWeights::load(dir / "fp8");
  ASSERT_TRUE(w8.fp8);
  GptOssCpuModel loaded(w8, CpuPrecision::Fp8);
  KvCache c3 = loaded.new_cache();
  EXPECT_EQ(loaded.forward(toks, c3, true), b);
  try {
    GptOssCpuModel wrong(w8);
    FAIL() << "a converted checkpoint must refuse fp32 (its weights are FP8)";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision fp8"), std::string::npos);
  }
  EXPECT_THROW(GptOssFp8Weights::convert(w8, false), Error);
}

// --precision bf16 (the emulation of the CUDA BF16 path): only the GEMM inputs are rounded, so it
// differs from fp32, by about what BF16's 8-bit mantissa gives, and rounding the same inputs again
// changes nothing (the model is deterministic).
TEST(Bf16Emulation, RoundsTheGemmInputsOnly) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-b"), dir / "m", {.seed = 9, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir / "m");
  const std::vector<int32_t> toks = {5, 77, 300, 12, 99, 41, 7, 512, 3};
  GptOssCpuModel ref(w), emu(w, CpuPrecision::Bf16), emu2(w, CpuPrecision::Bf16);
  KvCache c1 = ref.new_cache(), c2 = emu.new_cache(), c3 = emu2.new_cache();
  const std::vector<float> a = ref.forward(toks, c1, true), b = emu.forward(toks, c2, true);
  EXPECT_GT(rel_err(b.data(), a.data(), a.size()), 1e-5);  // rounding is not a no-op
  EXPECT_LT(rel_err(b.data(), a.data(), a.size()), 0.1);   // and stays near fp32 (2^-9 per rounded value)
  EXPECT_EQ(emu2.forward(toks, c3, true), b);
}

// --precision mxfp4 (the emulation of the Hopper path's default, --weights mxfp4): the dense GEMMs as
// the fp8 emulation runs them, the experts exact with BF16 inputs. So with the experts' FP8 rounding
// gone it sits between fp8 and fp32, and it is the fp8 emulation's attention with the bf16
// emulation's experts: replacing either half changes the logits.
TEST(Mxfp4Emulation, DenseAsFp8ExpertsExactWithBf16Inputs) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("parity-b"), dir / "m", {.seed = 9, .progress = false, .branch_scale = 0.25f});
  GptOssWeights w = GptOssWeights::load(dir / "m");
  const std::vector<int32_t> toks = {5, 77, 300, 12, 99, 41, 7, 512, 3};
  auto run = [&](CpuPrecision p) {
    GptOssCpuModel m(w, p);
    KvCache c = m.new_cache();
    return m.forward(toks, c, true);
  };
  const std::vector<float> f32 = run(CpuPrecision::AsStored), f8 = run(CpuPrecision::Fp8), b16 = run(CpuPrecision::Bf16),
                           mx = run(CpuPrecision::Mxfp4);
  const double e_mx = rel_err(mx.data(), f32.data(), f32.size()), e_f8 = rel_err(f8.data(), f32.data(), f32.size());
  EXPECT_GT(e_mx, rel_err(b16.data(), f32.data(), f32.size()));  // its attention is FP8
  EXPECT_LT(e_mx, e_f8);                                        // its experts are exact
  EXPECT_GT(rel_err(mx.data(), f8.data(), f8.size()), 1e-4);
  EXPECT_EQ(run(CpuPrecision::Mxfp4), mx);
}

// The wgmma layout: a permutation inside each 128-column block that keeps every column in its
// k16 step of the activation layout, with the step's 16 columns in MMA slot order, and that is the
// activation layout's 64-byte chunks transposed 4 x 4 in 4-byte units (what the GPU's row gather
// does: mxfp4_rows_to_wgmma_layout).
TEST(Mxfp4Layout, WgmmaLayoutTransposesTheActivationLayoutsChunks) {
  std::vector<int> seen(256, 0);
  for (int k = 0; k < 256; ++k) {
    const int a = mxfp4_act_position(k), w = mxfp4_wgmma_position(k);
    ++seen[size_t(w)];
    ASSERT_EQ(w / 128, k / 128);
    ASSERT_EQ(w % 128 / 16, a % 128 / 32 * 2 + a % 8 / 4) << "column " << k << " keeps its k16 step";
    ASSERT_EQ(a % 2, w % 2);  // the BF16 pairs (columns k, k + 4) stay together
    const int ua = a / 2, uw = w / 2;
    ASSERT_EQ(uw / 16, ua / 16);
    ASSERT_EQ(uw % 16, ua % 4 * 4 + ua % 16 / 4) << "column " << k;
  }
  for (int n : seen) ASSERT_EQ(n, 1);
  // Step 0's slots 0..15: thread c's pairs (k, k + 4) for k = 0 (slots 2c, 2c + 1) and k = 1
  // (slots 2c + 8, 2c + 9) of group c.
  EXPECT_EQ(mxfp4_wgmma_position(0), 0);
  EXPECT_EQ(mxfp4_wgmma_position(4), 1);
  EXPECT_EQ(mxfp4_wgmma_position(32), 2);
  EXPECT_EQ(mxfp4_wgmma_position(1), 8);
  EXPECT_EQ(mxfp4_wgmma_position(2), 16);
}

TEST(Mxfp4Layout, PositionsArePermutationsAndWeightTiles) {
  for (int K : {32, 64, 2880})
    for (int k = 0; k < mxfp4_act_cols(K); ++k) {
      ASSERT_EQ(mxfp4_act_column(mxfp4_act_position(k)), k);
      ASSERT_EQ(mxfp4_act_position(k) / 128, k / 128);  // within its 128-column block
    }
  // Word 0 of a block holds columns 0..7 of groups 0..3 as the decode's first two MMA steps read
  // them: step 0 takes pairs (k, k + 4) for k = 0, 1 of thread c's group c.
  EXPECT_EQ(mxfp4_act_column(0), 0);
  EXPECT_EQ(mxfp4_act_column(1), 4);
  EXPECT_EQ(mxfp4_act_column(2), 1);
  EXPECT_EQ(mxfp4_act_column(8), 32);
  // The last block with 1, 2 (2880 = 22.5 blocks) and 3 groups, the rest padding; and a full one.
  for (int K : {160, 2880, 224, 256}) {
    const int N = 32, G = K / 32, KB = (G + 3) / 4;
    std::vector<uint8_t> blocks(N * K / 2), scales(N * G), tiles(mxfp4_tiles_bytes(N, K));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 7 + 3);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(100 + i);
    ASSERT_EQ(tiles.size(), size_t(2 * KB * kMxfp4TileBytes));
    mxfp4_relayout_tiles(blocks.data(), scales.data(), N, K, tiles.data());
    for (int n = 0; n < N; ++n)
      for (int g = 0; g < 4 * KB; ++g) {  // groups G.. are padding
        const uint8_t* tile = &tiles[(size_t(n / 16) * KB + g / 4) * kMxfp4TileBytes];
        const int r = n % 16, c = g % 4;
        for (int w = 0; w < 4; ++w) {  // each word's bits packed for the decode
          uint32_t got, want = 0;
          std::memcpy(&got, &tile[r * 64 + c * 16 + 4 * w], 4);
          if (g < G) std::memcpy(&want, &blocks[size_t(n) * G * 16 + g * 16 + 4 * w], 4);
          ASSERT_EQ(got, mxfp4_pack_word(want)) << K << " " << n << " " << g;
          ASSERT_EQ(mxfp4_unpack_word(got), want) << K << " " << n << " " << g;
        }
        ASSERT_EQ(tile[1024 + r * 4 + c], g < G ? scales[size_t(n) * G + g] : 127) << K << " " << n << " " << g;
      }
  }
}

// Several experts at once (the load's form, OpenMP over every expert's tile rows) are each
// expert's own re-layout, one after another: 3 experts, 2880 columns (the last block half full).
TEST(Mxfp4Layout, ExpertsRelayoutIsEachExpertsOwn) {
  const int E = 3, N = 48, K = 2880;
  std::vector<uint8_t> blocks(size_t(E) * N * K / 2), scales(size_t(E) * N * K / 32);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 13 + 5);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(110 + i % 29);
  const size_t per_t = mxfp4_tiles_bytes(N, K);
  std::vector<uint8_t> all(per_t * E, 0xAB), one(per_t);
  mxfp4_relayout_experts(blocks.data(), scales.data(), E, N, K, all.data());
  for (int e = 0; e < E; ++e) {
    mxfp4_relayout_tiles(blocks.data() + size_t(e) * N * K / 2, scales.data() + size_t(e) * N * K / 32, N, K, one.data());
    ASSERT_TRUE(std::equal(one.begin(), one.end(), all.begin() + e * per_t)) << "expert " << e;
  }
}

// The packed word is a permutation of the checkpoint word's bits, and the decode's pair formulas
// (kernels/cuda/moe_gemm_mxfp4_decode.cuh, restated here on the host) read from it exactly the
// BF16 pair that the checkpoint's nibbles j and j + 4 give: sign on bit 15, exponent and mantissa
// on bits 8..6 (and 16 up).
TEST(Mxfp4Layout, PackedWordsDecodeToTheCheckpointPairs) {
  auto pair_of_checkpoint = [](uint32_t w, int j) {
    const uint32_t x = w << (12 - 4 * j);
    return (x & 0x80008000u) | ((x & 0x70007000u) >> 6);
  };
  auto pair_of_packed = [](uint32_t p, int j) {
    if (j < 3) return (p << (3 * j)) & 0x81C081C0u;
    return ((p << 1) & 0x80008000u) | ((p >> 3) & 0x01800180u) | ((p >> 7) & 0x00400040u);
  };
  uint32_t w = 0x12345678u;
  for (int i = 0; i < 100000; ++i) {
    w = w * 1664525u + 1013904223u;
    const uint32_t p = mxfp4_pack_word(w);
    ASSERT_EQ(mxfp4_unpack_word(p), w);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(pair_of_packed(p, j), pair_of_checkpoint(w, j)) << std::hex << w << " pair " << j;
  }
  // Each bit lands where mxfp4_word_bit says (the shift-and-mask form against the table), and back.
  for (int i = 0; i < 8; ++i)
    for (int b = 0; b < 4; ++b) {
      ASSERT_EQ(mxfp4_pack_word(1u << (4 * i + b)), 1u << mxfp4_word_bit(i, b)) << i << " " << b;
      ASSERT_EQ(mxfp4_unpack_word(1u << mxfp4_word_bit(i, b)), 1u << (4 * i + b)) << i << " " << b;
    }
}

// The W4A8 conversion kernel reads four codes' magnitudes and signs straight from a packed word
// (mxfp4_packed_magnitudes/_signs), without unpacking it: the same bits as the checkpoint word's
// nibbles 4h .. 4h + 3, their magnitude bits as PRMT selectors and their signs on bits 8q + 7.
// Every output bit comes from one input bit, so the single-bit words cover every path; random
// words on top.
TEST(Mxfp4Layout, PackedWordsGiveTheCheckpointCodesForALookup) {
  auto check = [](uint32_t p) {
    const uint32_t w = mxfp4_unpack_word(p);
    for (int h = 0; h < 2; ++h) {
      const uint32_t x = (w >> (16 * h)) & 0xFFFFu;
      const uint32_t sel = x & 0x7777u;
      const uint32_t sign = ((x & 0x8u) << 4) | ((x & 0x80u) << 8) | ((x & 0x800u) << 12) | ((x & 0x8000u) << 16);
      const uint32_t got_sel = h == 0 ? mxfp4_packed_magnitudes<0>(p) : mxfp4_packed_magnitudes<1>(p);
      const uint32_t got_sign = h == 0 ? mxfp4_packed_signs<0>(p) : mxfp4_packed_signs<1>(p);
      ASSERT_EQ(got_sel, sel) << std::hex << "packed " << p << " half " << h;
      ASSERT_EQ(got_sign, sign) << std::hex << "packed " << p << " half " << h;
    }
  };
  for (int bit = 0; bit < 32; ++bit) check(1u << bit);
  check(0u), check(~0u);
  uint32_t p = 0x9E3779B9u;
  for (int i = 0; i < 100000; ++i) check(p = p * 1664525u + 1013904223u);
}

// MXFP4 as FP8 with 1x128 scales (the W4A8 prefill's weights): every E2M1 code at every scale
// distance d = Smax - S converts exactly while d <= 14 (code times block scale is the value); past
// it the value rounds to E4M3's subnormal step, and from d = 19 it is a signed zero.
TEST(Mxfp4Fp8, EveryCodeConvertsExactlyWithinTheSpan) {
  for (int d = 0; d <= 30; ++d)
    for (int c = 0; c < 16; ++c) {
      const float want = std::ldexp(kE2M1Values[c], kMxfp4Fp8Shift - d);  // in units of the block scale
      const uint8_t code = mxfp4_e2m1_to_e4m3(c, d);
      const float got = fp8::to_f32(code);
      if (d <= kMxfp4Fp8ExactSpan) ASSERT_EQ(got, want) << "code " << c << " d " << d;
      else ASSERT_LE(std::fabs(got - want), std::ldexp(1.0f, -10)) << "code " << c << " d " << d;
      if (d >= 19) {
        ASSERT_EQ(got, 0.0f) << "code " << c << " d " << d;
      }
      ASSERT_EQ(code & 0x80, c & 8 ? 0x80 : 0) << "the sign, code " << c << " d " << d;
    }
}

// A row: its 128-column blocks take the largest of their four scales; K = 2880 ends in a block
// of two groups, whose scale ignores the groups K does not have.
TEST(Mxfp4Fp8, RowsConvertWithTheBlocksLargestScale) {
  const int N = 2, K = 2880, G = K / 32, KB = 23;
  std::vector<uint8_t> blocks(size_t(N) * G * 16), scales(size_t(N) * G);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 37 + 11);
  for (int n = 0; n < N; ++n)
    for (int g = 0; g < G; ++g) scales[size_t(n) * G + g] = uint8_t(120 + (g * 5 + n) % 9);
  scales[size_t(1) * G + 3] = 90;  // row 1, block 0: one group 2^30 below the block's largest
  std::vector<uint8_t> codes(size_t(N) * K);
  std::vector<float> bs(size_t(KB) * N);
  mxfp4_to_fp8(blocks.data(), scales.data(), N, K, 1, codes.data(), bs.data());
  EXPECT_EQ(mxfp4_fp8_inexact_blocks(scales.data(), N, K, 1), 1u);
  EXPECT_EQ(mxfp4_fp8_inexact_blocks(scales.data(), N, K, 128), 1u);  // the two rows share that block
  EXPECT_EQ(mxfp4_fp8_blocks(scales.data(), 1, N, K).block_rows, 1);
  std::vector<float> ref(K);
  for (int n = 0; n < N; ++n) {
    mxfp4_decode_row(&blocks[size_t(n) * G * 16], &scales[size_t(n) * G], K, ref.data());
    for (int kb = 0; kb < KB; ++kb) {
      int smax = 0;
      for (int g = 4 * kb; g < std::min(G, 4 * kb + 4); ++g) smax = std::max(smax, int(scales[size_t(n) * G + g]));
      ASSERT_EQ(bs[size_t(kb) * N + n], std::ldexp(1.0f, smax - 127 - kMxfp4Fp8Shift)) << n << " " << kb;
    }
    for (int k = 0; k < K; ++k) {
      const float got = fp8::to_f32(codes[size_t(n) * K + k]) * bs[size_t(k / 128) * N + n];
      if (n == 1 && k >= 96 && k < 128) ASSERT_EQ(got, 0.0f) << "the far group underflows, column " << k;
      else ASSERT_EQ(got, ref[k]) << "row " << n << " column " << k;
    }
  }
}

// 128x128 blocks (cuBLASLt's faster weight scales): a block's rows share its largest scale, the
// scales go in formats/fp8.h's Matrix layout, and where no block spans past 2^14 the conversion
// is exact: every value is its code times its block's scale. 200 rows: the second row block is
// cut short, as K's last column block is.
TEST(Mxfp4Fp8, BlocksOf128RowsShareTheirLargestScale) {
  const int N = 200, K = 2880, G = K / 32, KB = 23;
  std::vector<uint8_t> blocks(size_t(N) * G * 16), scales(size_t(N) * G);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 53 + 7);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(114 + (i * 7) % 15);  // span 14
  EXPECT_EQ(mxfp4_fp8_inexact_blocks(scales.data(), N, K, 128), 0u);
  EXPECT_EQ(mxfp4_fp8_blocks(scales.data(), 1, N, K).block_rows, 128);
  std::vector<uint8_t> codes(size_t(N) * K);
  std::vector<float> bs(mxfp4_fp8_scales_size(N, K, 128), -1.0f);
  ASSERT_EQ(bs.size(), size_t(4 * 24));  // round4(2 row blocks) x round4(23)
  mxfp4_to_fp8(blocks.data(), scales.data(), N, K, 128, codes.data(), bs.data());
  const auto smax = mxfp4_fp8_blocks(scales.data(), 1, N, K).smax;
  std::vector<float> ref(K);
  for (int n = 0; n < N; ++n) {
    mxfp4_decode_row(&blocks[size_t(n) * G * 16], &scales[size_t(n) * G], K, ref.data());
    for (int k = 0; k < K; ++k) {
      const float s = bs[size_t(n / 128) * 24 + k / 128];
      ASSERT_EQ(s, std::ldexp(1.0f, int(smax[size_t(n / 128) * KB + k / 128]) - 133)) << n << " " << k;
      ASSERT_EQ(fp8::to_f32(codes[size_t(n) * K + k]) * s, ref[k]) << "row " << n << " column " << k;
    }
  }
  EXPECT_EQ(bs[23], -1.0f) << "padding entries are left as they were";
  scales[5] = 99;  // one group 2^23 below its block's largest: the block no longer converts exactly
  EXPECT_EQ(mxfp4_fp8_inexact_blocks(scales.data(), N, K, 128), 1u);
  EXPECT_EQ(mxfp4_fp8_blocks(scales.data(), 1, N, K).block_rows, 1);
}

// The FP8 weight bytes of the cost model are what the GPU path holds (measured on the H200: 21.52 GB
// for the 20b, 117.55 GB for the 120b).
TEST(WeightsCli, Fp8BytesAreWhatTheGpuHolds) {
  const double g20 = fp8_weight_bytes(synth_preset("20b").config), g120 = fp8_weight_bytes(synth_preset("120b").config);
  EXPECT_NEAR(g20 / 1e9, 21.52, 0.25);
  EXPECT_NEAR(g120 / 1e9, 117.55, 1.2);
}

// --weights auto (the default) takes the experts as the checkpoint ships them: MXFP4, or FP8 for a
// checkpoint `osprey convert` wrote; an explicit choice stands.
TEST_F(SmallModel, WeightsAutoTakesTheShippedExperts) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  cli::WeightsArg a;
  EXPECT_EQ(a.experts(w), GptOssCudaFp8::ExpertWeights::Mxfp4);
  a.value = "auto";
  EXPECT_EQ(a.experts(w), GptOssCudaFp8::ExpertWeights::Mxfp4);
  a.value = "fp8";
  EXPECT_EQ(a.experts(w), GptOssCudaFp8::ExpertWeights::Fp8);
}

// --kv-cache-dtype auto (the default): FP16 where the run keeps BF16 activations (--dense bf16) and
// the tensor-core kernels take the head size (64), BF16 elsewhere and on the CPU's emulation (whose
// dense layers are FP8); an explicit choice stands.
TEST_F(SmallModel, KvCacheAutoIsFp16WithBf16DenseLayers) {
  GptOssConfig c = GptOssWeights::load(dir_->str()).config;
  c.head_dim = 64;
  cli::WeightsArg a;
  EXPECT_EQ(a.kv_cache, "auto");
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Bf16);
  a.dense = "bf16";
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Fp16);
  a.kv_cache = "bf16";
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Bf16);
  a.kv_cache = "fp8";
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Fp8);
  a.kv_cache = "auto";
  c.head_dim = 32;
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Bf16);
  a.dense = "fp8";
  a.kv_cache = "fp16";
  EXPECT_EQ(a.kv_cache_dtype(c), KvDtype::Fp16);
  // auto is not a choice the CPU refuses (the emulation's default); fp16 outside the engine is.
  a.kv_cache = "auto";
  EXPECT_NO_THROW(a.check("cpu", ""));
  a.kv_cache = "fp16";
  EXPECT_THROW(a.check("cpu", ""), std::exception);
}

// The CPU emulation of MXFP4 experts follows the GPU path's rule: a forward of at least 128 rows an
// expert on average (parity-b: 6 experts, top 3, from 256 tokens) runs its experts W4A8; shorter
// ones keep BF16 inputs. So the 300-token chunk differs with the rule off, the 200-token one does not.
TEST_F(SmallModel, Mxfp4EmulationRunsLongChunksW4a8) {
  GptOssWeights w = GptOssWeights::load(dir_->str());
  const GptOssCpuModel on(w, CpuPrecision::Mxfp4), off(w, CpuPrecision::Mxfp4, KvDtype::Bf16, /*w4a8_long_chunks=*/false);
  for (int T : {200, 300}) {
    const auto tokens = ramp_tokens(T, w.config.vocab);
    KvCache c1 = on.new_cache(), c2 = off.new_cache();
    const auto a = on.forward(tokens, c1, false), b = off.forward(tokens, c2, false);
    if (T == 200) EXPECT_EQ(a, b) << T << " tokens";
    else EXPECT_GT(rel_err(a.data(), b.data(), a.size()), 1e-4) << T << " tokens";
  }
}

// --weights is the GPU's: refused on the CPU, with the CUDA reference paths, and for bf16 (not
// built); --precision mxfp4 is the CPU emulation's.
TEST(WeightsCli, RefusedWhereItCannotApply) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string m = " --model " + (d / "m") + " --tokens 5,6,7 --max-tokens 2 --greedy";
  expect_refused("generate --weights fp8" + m, "--weights fp8 chooses the GPU's expert format");
  auto emu = test::run_cli("generate --precision mxfp4" + m);
  EXPECT_EQ(emu.exit_code, 0) << emu.err;
  auto logits = test::run_cli("logits --backend cpu --weights mxfp4 --model " + (d / "m") + " --tokens 5 --out " + (d / "l.npy"));
  EXPECT_EQ(logits.exit_code, 1);
  expect_refused("serve --backend cpu --weights mxfp4 --model " + (d / "m") + " --port 1",
                 "--weights mxfp4 chooses the GPU's expert format");
  auto bench = test::run_cli("bench --backend cpu --weights fp8 --model " + (d / "m"));
  EXPECT_EQ(bench.exit_code, 1);
  // Refused before the weights load (no GPU needed to say so).
  expect_refused("generate --backend cuda --weights bf16" + m, "--weights bf16 is not built");
}

// --decode-kernel persistent chooses how the GPU engine runs decode steps: refused on the CPU, with
// the CUDA reference paths and with --speculative (its verify steps run kernel by kernel), and
// --persistent-blocks without it; all before anything loads (no GPU needed to say so).
TEST(DecodeKernelCli, RefusedWhereItCannotApply) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string m = " --model " + (d / "m") + " --tokens 5,6,7 --max-tokens 2 --greedy";
  expect_refused("generate --decode-kernel persistent" + m,
                 "--decode-kernel persistent runs the GPU engine's decode steps");
  expect_refused("generate --backend cuda --precision bf16 --decode-kernel persistent" + m,
                 "this run is --backend cuda --precision bf16");
  expect_refused("generate --backend cuda --decode-kernel persistent --speculative ngram:2" + m,
                 "--decode-kernel persistent with --speculative");
  expect_refused("generate --backend cuda --persistent-blocks 2" + m,
                 "--persistent-blocks applies to the persistent decode kernel");
  // Given at all, whatever its value (1 was once the default and so passed unnoticed).
  expect_refused("generate --backend cuda --persistent-blocks 1" + m,
                 "--persistent-blocks applies to the persistent decode kernel");
  expect_refused("bench --backend cpu --decode-kernel persistent --model " + (d / "m"),
                 "--decode-kernel persistent runs the GPU engine's decode steps");
  expect_refused("bench --backend cuda --timeline " + (d / "t.json") + " --model " + (d / "m"),
                 "--timeline applies to the persistent decode kernel");
  auto bad = test::run_cli("generate --decode-kernel fused" + m);
  EXPECT_NE(bad.exit_code, 0);
}

// --kv-cache-dtype fp8 is the engine's GPU cache or its CPU emulation (--precision fp8 or mxfp4):
// refused with the fp32 CPU path (generate, serve, bench) and the CUDA reference paths, before any
// load; the emulation honours it (its logits differ from the BF16 cache's emulation).
TEST(KvCacheCli, Fp8IsTheEngineCacheOrItsEmulation) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string m = " --model " + (d / "m") + " --tokens 5,6,7 --max-tokens 2 --greedy";
  expect_refused("generate --kv-cache-dtype fp8" + m, "--kv-cache-dtype fp8 chooses the engine's GPU KV cache");
  expect_refused("serve --backend cpu --kv-cache-dtype fp8 --model " + (d / "m") + " --port 1", "--kv-cache-dtype fp8");
  auto bench = test::run_cli("bench --backend cpu --kv-cache-dtype fp8 --model " + (d / "m"));
  EXPECT_EQ(bench.exit_code, 1);
  expect_refused("generate --backend cuda --precision bf16 --kv-cache-dtype fp8" + m, "--kv-cache-dtype fp8 chooses");
  auto bad = test::run_cli("generate --kv-cache-dtype fp4" + m);
  EXPECT_NE(bad.exit_code, 0);
  auto emu = test::run_cli("generate --precision mxfp4 --kv-cache-dtype fp8" + m);
  EXPECT_EQ(emu.exit_code, 0) << emu.err;
  const std::string tokens = " --model " + (d / "m") + " --tokens 5,6,7,8,9,10,11,12";
  ASSERT_EQ(test::run_cli("logits --precision fp8 --kv-cache-dtype fp8" + tokens + " --out " + (d / "a.npy")).exit_code, 0);
  ASSERT_EQ(test::run_cli("logits --precision fp8" + tokens + " --out " + (d / "b.npy")).exit_code, 0);
  const std::string a = test::read_file(d / "a.npy"), b = test::read_file(d / "b.npy");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_GT(a.size(), 1000u);
  EXPECT_NE(a, b);
}

// --kv-cache-dtype fp16 alike: the engine's GPU cache or its emulation, refused elsewhere by name;
// the emulation honours it (its logits differ from the BF16 and the FP8 caches' emulations).
TEST(KvCacheCli, Fp16IsTheEngineCacheOrItsEmulation) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string m = " --model " + (d / "m") + " --tokens 5,6,7 --max-tokens 2 --greedy";
  expect_refused("generate --kv-cache-dtype fp16" + m, "--kv-cache-dtype fp16 chooses the engine's GPU KV cache");
  expect_refused("logits --backend cuda --precision bf16 --kv-cache-dtype fp16 --model " + (d / "m") + " --tokens 5 --out " +
                     (d / "x.npy"),
                 "--kv-cache-dtype fp16 chooses");
  auto emu = test::run_cli("generate --precision mxfp4 --kv-cache-dtype fp16" + m);
  EXPECT_EQ(emu.exit_code, 0) << emu.err;
  const std::string tokens = " --model " + (d / "m") + " --tokens 5,6,7,8,9,10,11,12,13,14,15,16";
  for (const char* kv : {"bf16", "fp16", "fp8"})
    ASSERT_EQ(test::run_cli(std::string("logits --precision fp8 --kv-cache-dtype ") + kv + tokens + " --out " +
                            (d / (std::string(kv) + ".npy")))
                  .exit_code,
              0);
  const auto b = read_npy_f32(d / "bf16.npy"), h = read_npy_f32(d / "fp16.npy"), e = read_npy_f32(d / "fp8.npy");
  ASSERT_EQ(b.data.size(), h.data.size());
  ASSERT_EQ(b.data.size(), e.data.size());
  EXPECT_NE(h.data, b.data);
  EXPECT_NE(h.data, e.data);
  for (float x : h.data) ASSERT_TRUE(std::isfinite(x));
}

// `logits --tokens-file`: each line's logits, from an empty cache, into DIR/i.npy, byte for byte
// what `--tokens` of that line writes (the model loaded once); --tokens and --tokens-file exclude
// each other; a bad line is refused naming the file and line, before anything is written.
TEST(LogitsCli, TokensFileWritesEachSequenceAsTokensWould) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 3 --quiet --out " + (d / "m")).exit_code, 0);
  test::write_file(d / "seqs.txt", "5,6,7,8\n\n9,10\n5,6,7,8,11,12,13\n");  // a blank line is skipped
  const std::string m = " --model " + (d / "m");
  auto many = test::run_cli("logits --precision fp8" + m + " --tokens-file " + (d / "seqs.txt") + " --out " + (d / "out"));
  ASSERT_EQ(many.exit_code, 0) << many.err;
  const char* lines[] = {"5,6,7,8", "9,10", "5,6,7,8,11,12,13"};
  for (int i = 0; i < 3; ++i) {
    const std::string one = d / ("one" + std::to_string(i) + ".npy");
    ASSERT_EQ(test::run_cli("logits --precision fp8" + m + " --tokens " + lines[i] + " --out " + one).exit_code, 0);
    const std::string a = test::read_file(one), b = test::read_file(d / ("out/" + std::to_string(i) + ".npy"));
    EXPECT_GT(a.size(), 1000u);
    EXPECT_EQ(a, b) << "line " << i;
  }
  EXPECT_FALSE(std::filesystem::exists(d / "out/3.npy"));
  auto both = test::run_cli("logits" + m + " --tokens 1 --tokens-file " + (d / "seqs.txt") + " --out " + (d / "x"));
  EXPECT_NE(both.exit_code, 0);
  expect_refused("logits" + m + " --out " + (d / "x"), "--tokens or --tokens-file is required");
  test::write_file(d / "bad.txt", "1,2\nabc\n");
  expect_refused("logits" + m + " --tokens-file " + (d / "bad.txt") + " --out " + (d / "badout"), "bad.txt line 2");
  EXPECT_FALSE(std::filesystem::exists(d / "badout"));
}

// bench serve's chat TTFT and ITL count the chunks that carry generated output: not the first
// chunk (the role, content ""), not a finish chunk with an empty delta; content, reasoning or a
// tool call do count. (Before, the role chunk made every chat TTFT well under a millisecond.)
TEST(BenchServeCli, ChatChunksCountOnlyWithOutput) {
  using nlohmann::json;
  auto chunk = [](json delta) { return json{{"choices", json::array({json{{"index", 0}, {"delta", delta}}})}}; };
  EXPECT_FALSE(cli::chat_chunk_has_output(chunk({{"role", "assistant"}, {"content", ""}})));
  EXPECT_FALSE(cli::chat_chunk_has_output(chunk(json::object())));
  EXPECT_FALSE(cli::chat_chunk_has_output(json{{"choices", json::array()}, {"usage", {{"completion_tokens", 3}}}}));
  EXPECT_TRUE(cli::chat_chunk_has_output(chunk({{"content", "Paris"}})));
  EXPECT_TRUE(cli::chat_chunk_has_output(chunk({{"reasoning_content", "The user asks"}})));
  EXPECT_TRUE(cli::chat_chunk_has_output(chunk({{"tool_calls", json::array({json{{"index", 0}}})}})));
  EXPECT_FALSE(cli::chat_chunk_has_output(chunk({{"tool_calls", json::array()}})));
}

// bench's GPU options are refused with the CPU backend (not silently dropped), before any load.
TEST(BenchCli, GpuOptionsRefusedOnTheCpu) {
  for (const std::string opt :
       {"--kv-blocks 16", "--steps 4", "--prefill-lens 64", "--no-graphs", "--json /tmp/x.json", "--moe-batches 1,8"}) {
    auto r = test::run_cli("bench --backend cpu --model /nonexistent/dir " + opt);
    EXPECT_EQ(r.exit_code, 1) << opt;
    const std::string name = opt.substr(0, opt.find(' '));
    EXPECT_NE(r.err.find("bench: " + name + " applies to --backend cuda"), std::string::npos) << r.err;
  }
}

// `bench --backend cuda --prefill-lens "" --batches ""` times the MoE table alone; without
// --moe-batches there is nothing to time, said before the GPU or the model is touched.
TEST(BenchCli, NothingToTimeIsRefused) {
  expect_refused("bench --backend cuda --model /nonexistent/dir --prefill-lens '' --batches ''", "nothing to time");
  expect_refused("bench --backend cuda --model /nonexistent/dir --prefill-lens '' --batches '' --moe-batches 0",
                 "--moe-batches");
}

// An empty --prefill-lens times decode steps alone and an empty --batches prompts alone: neither
// is refused as an empty entry (here the run then fails at the model, which does not exist).
TEST(BenchCli, EmptyPrefillOrBatchListIsAccepted) {
  for (const std::string lists : {"--prefill-lens '' --batches 1", "--prefill-lens 64 --batches ''"}) {
    auto r = test::run_cli("bench --backend cuda --model /nonexistent/dir " + lists);
    EXPECT_NE(r.exit_code, 0) << lists;
    EXPECT_EQ(r.err.find("empty entry"), std::string::npos) << lists << ": " << r.err;
  }
  expect_refused("bench --backend cuda --model /nonexistent/dir --prefill-lens 64,,128 --batches 1", "empty entry");
}

// `generate --prompts`: one model load, one output line per prompt, each what `--tokens` gives.
TEST(GenerateCli, PromptsFileEqualsOneRunPerPrompt) {
  test::TempDir d;
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  test::write_file(d / "prompts.txt", "5,6,7\n\n9\n1,2,3,4,5,6,7,8,9,10\n");
  auto many = test::run_cli("generate --model " + (d / "m") + " --prompts " + (d / "prompts.txt") + " --max-tokens 6 --greedy --ignore-eos");
  ASSERT_EQ(many.exit_code, 0) << many.err;
  std::string expect;
  for (const char* p : {"5,6,7", "9", "1,2,3,4,5,6,7,8,9,10"}) {
    auto one = test::run_cli("generate --model " + (d / "m") + " --tokens " + p + " --max-tokens 6 --greedy --ignore-eos");
    ASSERT_EQ(one.exit_code, 0) << one.err;
    expect += one.out;
  }
  EXPECT_EQ(many.out, expect);
  EXPECT_EQ(std::count(many.out.begin(), many.out.end(), '\n'), 3);
  test::write_file(d / "bad.txt", "5,6\n5,x\n");
  expect_refused("generate --model " + (d / "m") + " --prompts " + (d / "bad.txt") + " --max-tokens 2", "line 2");
  auto both = test::run_cli("generate --model " + (d / "m") + " --prompts " + (d / "bad.txt") + " --tokens 1 --max-tokens 2");
  EXPECT_NE(both.exit_code, 0);
}

// Options that a run would drop are refused by name before anything loads (no checkpoint needed to
// say so): sampling options under argmax decoding, a speculative mode without speculation, a KV
// cache or dense format the run has none of, KV sizes another option already sets, bench's own
// options before `bench serve` or `bench grammar`, one bench's options on the other backend, and
// options of modes that are not on.
TEST(CliOptions, DroppedOptionsAreRefused) {
  const std::string gen = "generate --model /nonexistent/dir --tokens 5,6,7 --max-tokens 2 ";
  expect_refused(gen + "--greedy --temperature 0.7", "--greedy and --temperature both choose the temperature");
  for (const char* o : {"--top-p 0.5", "--top-k 3", "--seed 9"}) {
    const std::string name = std::string(o).substr(0, std::string(o).find(' '));
    expect_refused(gen + "--greedy " + o, name + " has no effect on argmax decoding (--greedy)");
    expect_refused(gen + "--temperature 0 " + o, name + " has no effect on argmax decoding (--temperature 0)");
  }
  expect_refused("chat --model /nonexistent/dir --temperature 0 --seed 2 </dev/null", "--seed has no effect on argmax decoding");
  expect_refused("chat --model /nonexistent/dir --top-p 5 </dev/null", "top_p must be in (0, 1]");  // before the first turn
  expect_refused(gen + "--greedy --speculative-mode always", "--speculative-mode always needs --speculative");
  expect_refused(gen + "--greedy --kv-cache-dtype bf16", "this run is --backend cpu, whose cache it would not change");
  expect_refused(gen + "--greedy --backend cuda --precision fp32 --kv-cache-dtype bf16",
                 "this run is --backend cuda --precision fp32");
  expect_refused(gen + "--greedy --dense fp8", "--dense fp8 chooses the engine's GPU path");
  const std::string serve = "serve --model /nonexistent/dir --port 1 ";
  expect_refused(serve + "--speculative-mode off", "--speculative-mode off needs --speculative");
  expect_refused(serve + "--speculative-default off", "--speculative-default off needs --speculative");
  expect_refused(serve + "--kv-cache-dtype bf16", "--kv-cache-dtype bf16 chooses");
  expect_refused(serve + "--kv-blocks 10 --kv-cache-gib 1", "--kv-blocks 10 sets the KV pool's size; --kv-cache-gib");
  expect_refused(serve + "--backend cuda --kv-blocks 10 --gpu-memory-utilization 0.5",
                 "--kv-blocks 10 sets the KV pool's size; --gpu-memory-utilization");
  expect_refused(serve + "--gpu-memory-utilization 0.5", "--gpu-memory-utilization applies to --backend cuda");
  expect_refused(serve + "--backend cuda --kv-cache-gib 1", "--kv-cache-gib sizes the CPU's KV cache");
  expect_refused("bench --prompt-len 4 serve --url http://127.0.0.1:1",
                 "bench serve: --prompt-len is an option of `bench` itself");
  expect_refused("bench --backend cuda grammar --cases /nonexistent", "bench grammar: --backend is an option of `bench` itself");
  const std::string cuda = "bench --backend cuda --model /nonexistent/dir ";
  for (const char* o : {"--prompt-len 4", "--decode-tokens 4", "--membw-mib 64"})
    expect_refused(cuda + o, "bench: " + std::string(o).substr(0, std::string(o).find(' ')) + " applies to --backend cpu");
  expect_refused(cuda + "--top-p 0.5", "bench: --top-p shapes sampled decode steps");
  expect_refused(cuda + "--top-k 5", "bench: --top-k shapes sampled decode steps");
  expect_refused(cuda + "--verify-batches 1", "--verify-batches sizes the verify table of --verify-k");
  for (const char* o : {"--weights fp8", "--kv-blocks 8", "--no-graphs", "--contexts 64", "--seed 2", "--attention-lens 64"})
    expect_refused(cuda + "--prefill-lens '' --batches '' --moe-batches 1 " + o,
                   "bench: " + std::string(o).substr(0, std::string(o).find(' ')) + " applies to the model's runs");
  expect_refused("tokenize --text x --jsonl --repeat 3", "--repeat times one text");
  test::TempDir d;
  test::write_file(d / "cases.jsonl", "{\"schema\": \"json_object\", \"prefixes\": [\"\"]}\n");
  expect_refused("grammar-masks --cases " + (d / "cases.jsonl") + " --item-separator ';'", "--item-separator applies with --compact");
  expect_refused("bench grammar --cases " + (d / "cases.jsonl") + " --key-separator =", "--key-separator applies with --compact");
  // The same options where they do apply.
  EXPECT_EQ(test::run_cli("grammar-masks --cases " + (d / "cases.jsonl") + " --compact --item-separator ,").exit_code, 0);
  ASSERT_EQ(test::run_cli("synth --preset parity-b --seed 2 --quiet --out " + (d / "m")).exit_code, 0);
  const std::string ok = "generate --model " + (d / "m") + " --tokens 5,6,7 --max-tokens 2 ";
  for (const char* o : {"--temperature 0.8 --top-p 0.9 --top-k 5 --seed 3", "--greedy", "--temperature 0",
                        "--precision mxfp4 --dense fp8 --kv-cache-dtype bf16 --greedy"}) {
    const auto r = test::run_cli(ok + o);
    EXPECT_EQ(r.exit_code, 0) << o << ": " << r.err;
  }
}

}  // namespace
}  // namespace osprey
