// DeepSeek-V4-family config.json: the V4 flat layout (transformers and official field names, legacy
// keys such as compress_ratios / num_hash_layers / rope_scaling) and, for V4.1, the nested text_config.
// Missing or ill-typed required keys raise smelt::Error naming the file and the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frontends/error.h"

namespace smelt {

enum class ModelFamily { DeepseekV4, DeepseekV41 };

struct YarnConfig {
  bool enabled = false;
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double original_max_position_embeddings = 65536.0;
  bool operator==(const YarnConfig&) const = default;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::DeepseekV4;
  std::string model_type;  // normalised: "deepseek_v4" or "deepseek_v41"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 1;
  int head_dim = 0;
  int qk_rope_head_dim = 0;
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  // MoE
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  std::string scoring_func = "sqrtsoftplus";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;
  std::vector<bool> hash_moe;  // per layer: routed by tid2eid (V4 num_hash_layers / mlp_layer_types)
  // Attention
  int sliding_window = 0;
  std::vector<int> compress_ratios;  // per backbone layer: 0 (window only), 4 (CSA), 128 (HCA); V4.1: 0/1/2
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  // Norms, RoPE
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  YarnConfig yarn;  // applied on compress layers only
  int64_t max_position_embeddings = 0;
  // Hyper-connections
  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  // Misc
  int num_nextn_predict_layers = 0;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  bool tie_word_embeddings = false;
  // Quantization of the stored weights (informational here; the V4.1 issue uses it)
  std::vector<int> weight_block_size;  // e.g. {128, 128}; empty = unquantized
  std::string expert_dtype;            // "fp4" or ""

  int compress_ratio(int layer) const { return compress_ratios.at(layer); }
  bool operator==(const ModelConfig&) const = default;
};

// Parse a config.json file (path used in errors) or its text.
ModelConfig load_config(const std::string& path);
ModelConfig parse_config(const std::string& json_text, const std::string& source_name);
// Normalised JSON form (what a plan records); parse_config(to_json(c)) == c.
std::string config_to_json(const ModelConfig& c);

}  // namespace smelt
