// gpt-oss hyper-parameters, read from a checkpoint's config.json in either published layout:
// Hugging Face (rope_scaling + top-level rope_theta, or transformers 5's rope_parameters) and
// OpenAI's original/ layout (num_experts, rope_scaling_factor, rope_ntk_alpha/beta, ...).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace osprey {

struct GptOssConfig {
  int num_layers = 24;
  int hidden = 2880;
  int num_heads = 64;
  int num_kv_heads = 8;
  int head_dim = 64;
  int num_experts = 32;
  int experts_per_token = 4;
  int intermediate = 2880;  // per expert
  int vocab = 201088;
  int sliding_window = 128;
  std::vector<bool> layer_is_sliding;  // [num_layers]

  // YaRN RoPE
  double rope_theta = 150000.0;
  double rope_factor = 32.0;
  double rope_beta_fast = 32.0;
  double rope_beta_slow = 1.0;
  int rope_original_max_pos = 4096;
  bool rope_truncate = false;  // true: floor/ceil the correction range (generic YaRN); gpt-oss uses false
  bool rope_yarn = true;       // false: plain RoPE (rope_type "default")
  int max_position_embeddings = 131072;

  double rms_norm_eps = 1e-5;
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  std::vector<int> eos_token_ids{200002};

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }

  // Throws Error("<where>: ...") on anything missing, malformed or inconsistent.
  static GptOssConfig from_json(const nlohmann::json& j, const std::string& where);
  static GptOssConfig load(const std::string& config_json_path);
  nlohmann::json to_hf_json() const;  // the published Hugging Face config.json layout
  void validate(const std::string& where) const;
};

}  // namespace osprey
