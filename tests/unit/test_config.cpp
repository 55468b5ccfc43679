#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gpt_oss_config.h"
#include "test_util.h"

namespace osprey {
namespace {
using json = nlohmann::json;

// The published gpt-oss-20b config.json (HF root).
json hf_20b() {
  return json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention","full_attention","sliding_attention","full_attention",
      "sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention",
      "full_attention","sliding_attention","full_attention","sliding_attention","full_attention",
      "sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention",
      "full_attention","sliding_attention","full_attention","sliding_attention","full_attention"],
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "output_router_logits": false, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
      "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
      "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088})");
}

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    FAIL() << "expected an error containing " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Config, PublishedHuggingFace20b) {
  GptOssConfig c = GptOssConfig::from_json(hf_20b(), "config.json");
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.experts_per_token, 4);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_DOUBLE_EQ(c.rope_factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 150000.0);
  EXPECT_EQ(c.rope_original_max_pos, 4096);
  EXPECT_FALSE(c.rope_truncate);
  EXPECT_TRUE(c.layer_is_sliding[0]);
  EXPECT_FALSE(c.layer_is_sliding[1]);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{200002});
}

TEST(Config, Transformers5RopeParameters) {
  json j = hf_20b();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 150000.0}, {"factor", 32.0}, {"beta_fast", 32.0},
                          {"beta_slow", 1.0}, {"original_max_position_embeddings", 4096}, {"truncate", false}};
  GptOssConfig c = GptOssConfig::from_json(j, "config.json");
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_DOUBLE_EQ(c.rope_theta, 150000.0);
  EXPECT_DOUBLE_EQ(c.rope_factor, 32.0);
}

TEST(Config, OriginalLayout) {
  json j = json::parse(R"({"num_hidden_layers": 36, "num_experts": 128, "experts_per_token": 4, "vocab_size": 201088,
    "hidden_size": 2880, "intermediate_size": 2880, "swiglu_limit": 7.0, "head_dim": 64, "num_attention_heads": 64,
    "num_key_value_heads": 8, "sliding_window": 128, "initial_context_length": 4096, "rope_theta": 150000,
    "rope_scaling_factor": 32.0, "rope_ntk_alpha": 1, "rope_ntk_beta": 32})");
  GptOssConfig c = GptOssConfig::from_json(j, "original/config.json");
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_DOUBLE_EQ(c.rope_beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_beta_slow, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.layer_is_sliding[34]);
  EXPECT_FALSE(c.layer_is_sliding[35]);
}

TEST(Config, RoundTripThroughHfJson) {
  GptOssConfig c = GptOssConfig::from_json(hf_20b(), "a");
  GptOssConfig d = GptOssConfig::from_json(c.to_hf_json(), "b");
  EXPECT_EQ(d.num_layers, c.num_layers);
  EXPECT_EQ(d.layer_is_sliding, c.layer_is_sliding);
  EXPECT_DOUBLE_EQ(d.rope_factor, c.rope_factor);
}

TEST(Config, Inconsistencies) {
  auto with = [](auto edit) {
    json j = hf_20b();
    edit(j);
    return j;
  };
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j.erase("hidden_size"); }), "c.json"); },
               "c.json: missing required field 'hidden_size'");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["hidden_size"] = "big"; }), "c.json"); },
               "'hidden_size' must be an integer");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["num_key_value_heads"] = 7; }), "c.json"); },
               "not a multiple of num_key_value_heads");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["num_hidden_layers"] = 23; }), "c.json"); },
               "layer_types has 24 entries but num_hidden_layers is 23");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["layer_types"][3] = "local"; }), "c.json"); },
               "unknown layer type 'local'");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["num_experts_per_tok"] = 40; }), "c.json"); },
               "exceeds the 32 experts");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["hidden_size"] = 2881; }), "c.json"); },
               "MXFP4 group size");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["rope_scaling"]["rope_type"] = "longrope"; }),
                                             "c.json"); },
               "rope_type 'longrope' is not supported");
  expect_error([&] { GptOssConfig::from_json(with([](json& j) { j["model_type"] = "llama"; }), "c.json"); },
               "expected 'gpt_oss'");
  expect_error([&] { GptOssConfig::from_json(json::array(), "c.json"); }, "JSON object");
}

TEST(Config, FileErrors) {
  test::TempDir d;
  expect_error([&] { GptOssConfig::load(d / "config.json"); }, "does not exist");
  test::write_file(d / "config.json", "{\"hidden_size\": 64,");
  expect_error([&] { GptOssConfig::load(d / "config.json"); }, "not valid JSON");
}

}  // namespace
}  // namespace osprey
