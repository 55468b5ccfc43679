#include "formats/gpt_oss_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace osprey {
using json = nlohmann::json;

namespace {

template <typename T>
bool read_field(const json& j, const char* key, T& out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) fail("{}: '{}' must be a boolean, got {}", where, key, it->dump());
    out = it->get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer() && !(it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()))
      fail("{}: '{}' must be an integer, got {}", where, key, it->dump());
    double v = it->get<double>();
    if (v < -2e9 || v > 2e9) fail("{}: '{}' = {} is out of range", where, key, it->dump());
    out = T(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) fail("{}: '{}' must be a number, got {}", where, key, it->dump());
    out = it->get<double>();
  } else {
    if (!it->is_string()) fail("{}: '{}' must be a string, got {}", where, key, it->dump());
    out = it->get<std::string>();
  }
  return true;
}

template <typename T>
void require_field(const json& j, const char* key, T& out, const std::string& where) {
  if (!read_field(j, key, out, where)) fail("{}: missing required field '{}'", where, key);
}

void read_rope_dict(const json& r, GptOssConfig& c, const std::string& where) {
  if (!r.is_object()) fail("{}: rope parameters must be an object", where);
  std::string type = "default";
  if (!read_field(r, "rope_type", type, where)) read_field(r, "type", type, where);
  if (type == "yarn") {
    c.rope_yarn = true;
  } else if (type == "default") {
    c.rope_yarn = false;
  } else {
    fail("{}: rope_type '{}' is not supported (gpt-oss uses 'yarn')", where, type);
  }
  read_field(r, "rope_theta", c.rope_theta, where);
  if (c.rope_yarn) {
    require_field(r, "factor", c.rope_factor, where);
    read_field(r, "beta_fast", c.rope_beta_fast, where);
    read_field(r, "beta_slow", c.rope_beta_slow, where);
    read_field(r, "original_max_position_embeddings", c.rope_original_max_pos, where);
    read_field(r, "truncate", c.rope_truncate, where);
  }
}

}  // namespace

GptOssConfig GptOssConfig::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: config must be a JSON object", where);
  GptOssConfig c;
  bool original = j.contains("num_experts") && !j.contains("num_local_experts") && !j.contains("model_type");
  require_field(j, "num_hidden_layers", c.num_layers, where);
  require_field(j, "hidden_size", c.hidden, where);
  require_field(j, "num_attention_heads", c.num_heads, where);
  require_field(j, "num_key_value_heads", c.num_kv_heads, where);
  require_field(j, "head_dim", c.head_dim, where);
  require_field(j, "intermediate_size", c.intermediate, where);
  require_field(j, "vocab_size", c.vocab, where);
  read_field(j, "sliding_window", c.sliding_window, where);
  read_field(j, "swiglu_limit", c.swiglu_limit, where);
  if (original) {
    require_field(j, "num_experts", c.num_experts, where);
    require_field(j, "experts_per_token", c.experts_per_token, where);
    read_field(j, "rope_theta", c.rope_theta, where);
    read_field(j, "rope_scaling_factor", c.rope_factor, where);
    read_field(j, "rope_ntk_alpha", c.rope_beta_slow, where);
    read_field(j, "rope_ntk_beta", c.rope_beta_fast, where);
    read_field(j, "initial_context_length", c.rope_original_max_pos, where);
    c.rope_yarn = c.rope_factor != 1.0;
    c.max_position_embeddings = int(c.rope_original_max_pos * c.rope_factor);
    c.layer_is_sliding.assign(c.num_layers, false);
    for (int l = 0; l < c.num_layers; l += 2) c.layer_is_sliding[l] = true;
  } else {
    if (!read_field(j, "num_local_experts", c.num_experts, where)) require_field(j, "num_experts", c.num_experts, where);
    if (!read_field(j, "num_experts_per_tok", c.experts_per_token, where))
      require_field(j, "experts_per_token", c.experts_per_token, where);
    if (j.contains("model_type")) {
      std::string mt;
      read_field(j, "model_type", mt, where);
      if (mt != "gpt_oss") fail("{}: model_type is '{}', expected 'gpt_oss'", where, mt);
    }
    read_field(j, "max_position_embeddings", c.max_position_embeddings, where);
    read_field(j, "rms_norm_eps", c.rms_norm_eps, where);
    read_field(j, "rope_theta", c.rope_theta, where);
    auto rp = j.find("rope_parameters");
    auto rs = j.find("rope_scaling");
    if (rp != j.end() && !rp->is_null()) {
      read_rope_dict(*rp, c, where + " rope_parameters");
    } else if (rs != j.end() && !rs->is_null()) {
      read_rope_dict(*rs, c, where + " rope_scaling");
    } else {
      c.rope_yarn = false;
    }
    auto lt = j.find("layer_types");
    if (lt != j.end() && !lt->is_null()) {
      if (!lt->is_array()) fail("{}: layer_types must be an array", where);
      for (auto& t : *lt) {
        if (!t.is_string()) fail("{}: layer_types entries must be strings", where);
        std::string s = t.get<std::string>();
        if (s == "sliding_attention") c.layer_is_sliding.push_back(true);
        else if (s == "full_attention") c.layer_is_sliding.push_back(false);
        else fail("{}: unknown layer type '{}'", where, s);
      }
      if (int(c.layer_is_sliding.size()) != c.num_layers)
        fail("{}: layer_types has {} entries but num_hidden_layers is {}", where, c.layer_is_sliding.size(),
             c.num_layers);
    } else {
      c.layer_is_sliding.assign(c.num_layers > 0 ? c.num_layers : 0, false);
      for (int l = 0; l < c.num_layers; l += 2) c.layer_is_sliding[l] = true;
    }
    auto eos = j.find("eos_token_id");
    if (eos != j.end()) {
      c.eos_token_ids.clear();
      if (eos->is_null()) {
        // no end-of-sequence token
      } else if (eos->is_number_integer()) c.eos_token_ids.push_back(eos->get<int>());
      else if (eos->is_array()) {
        for (auto& e : *eos) {
          if (!e.is_number_integer()) fail("{}: eos_token_id entries must be integers", where);
          c.eos_token_ids.push_back(e.get<int>());
        }
      } else {
        fail("{}: eos_token_id must be an integer or a list", where);
      }
    }
  }
  c.validate(where);
  return c;
}

void GptOssConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, long v) {
    if (v <= 0) fail("{}: {} must be positive, got {}", where, name, v);
  };
  positive("num_hidden_layers", num_layers);
  positive("hidden_size", hidden);
  positive("num_attention_heads", num_heads);
  positive("num_key_value_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("num_local_experts", num_experts);
  positive("num_experts_per_tok", experts_per_token);
  positive("intermediate_size", intermediate);
  positive("vocab_size", vocab);
  positive("sliding_window", sliding_window);
  if (num_layers > 4096 || hidden > 65536 || num_heads > 1024 || head_dim > 1024 || num_experts > 4096 ||
      intermediate > 131072 || vocab > (1 << 24))
    fail("{}: a dimension is implausibly large", where);
  if (num_heads % num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, num_heads, num_kv_heads);
  if (head_dim % 2 != 0) fail("{}: head_dim {} must be even for RoPE", where, head_dim);
  if (experts_per_token > num_experts)
    fail("{}: num_experts_per_tok {} exceeds the {} experts", where, experts_per_token, num_experts);
  if (hidden % 32 != 0) fail("{}: hidden_size {} is not a multiple of the MXFP4 group size 32", where, hidden);
  if (intermediate % 32 != 0)
    fail("{}: intermediate_size {} is not a multiple of the MXFP4 group size 32", where, intermediate);
  if (int(layer_is_sliding.size()) != num_layers) fail("{}: layer types do not cover every layer", where);
  if (rope_theta <= 1.0) fail("{}: rope_theta must be > 1, got {}", where, rope_theta);
  if (rope_yarn) {
    if (rope_factor < 1.0) fail("{}: rope factor must be >= 1, got {}", where, rope_factor);
    if (!(rope_beta_fast > rope_beta_slow && rope_beta_slow > 0))
      fail("{}: YaRN needs beta_fast > beta_slow > 0 (got {}, {})", where, rope_beta_fast, rope_beta_slow);
    positive("original_max_position_embeddings", rope_original_max_pos);
  }
  if (!(rms_norm_eps > 0)) fail("{}: rms_norm_eps must be positive", where);
  if (!(swiglu_limit > 0)) fail("{}: swiglu_limit must be positive", where);
}

GptOssConfig GptOssConfig::load(const std::string& path) {
  if (!std::filesystem::exists(path)) fail("{} does not exist", path);
  std::ifstream in(path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", path);
  return from_json(j, path);
}

json GptOssConfig::to_hf_json() const {
  json lt = json::array();
  for (bool s : layer_is_sliding) lt.push_back(s ? "sliding_attention" : "full_attention");
  json j = {
      {"architectures", {"GptOssForCausalLM"}},
      {"model_type", "gpt_oss"},
      {"attention_bias", true},
      {"attention_dropout", 0.0},
      {"eos_token_id", eos_token_ids.empty()       ? json(nullptr)
                       : eos_token_ids.size() == 1 ? json(eos_token_ids[0])
                                                   : json(eos_token_ids)},
      // Published value; small test vocabularies have no such row.
      {"pad_token_id", vocab > 199999 ? json(199999) : json(nullptr)},
      {"experts_per_token", experts_per_token},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", hidden},
      {"initializer_range", 0.02},
      {"intermediate_size", intermediate},
      {"layer_types", lt},
      {"max_position_embeddings", max_position_embeddings},
      {"num_attention_heads", num_heads},
      {"num_experts_per_tok", experts_per_token},
      {"num_hidden_layers", num_layers},
      {"num_key_value_heads", num_kv_heads},
      {"num_local_experts", num_experts},
      {"output_router_logits", false},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"router_aux_loss_coef", 0.9},
      {"sliding_window", sliding_window},
      {"swiglu_limit", swiglu_limit},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.55.0.dev0"},
      {"use_cache", true},
      {"vocab_size", vocab},
      {"quantization_config",
       {{"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
        {"quant_method", "mxfp4"}}},
  };
  if (rope_yarn) {
    j["rope_scaling"] = {{"beta_fast", rope_beta_fast},
                         {"beta_slow", rope_beta_slow},
                         {"factor", rope_factor},
                         {"original_max_position_embeddings", rope_original_max_pos},
                         {"rope_type", "yarn"},
                         {"truncate", rope_truncate}};
  }
  return j;
}

}  // namespace osprey
