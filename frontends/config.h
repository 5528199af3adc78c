// DeepSeek-V4-family config.json: the V4 flat layout (transformers and official field names, legacy
// keys such as compress_ratios / num_hash_layers / rope_scaling) and, for V4.1, the nested text_config
// (+ vision_config, quantization_config) of the release as well as the flat inference/config.json.
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

// V4.1 vision tower (present when num_hidden_layers > 0; otherwise every field is left at its default so
// that "no tower" compares equal across spellings). Absent keys take transformers' V4.1 defaults.
struct VisionConfig {
  int num_hidden_layers = 0;
  int hidden_size = 1024;
  int num_attention_heads = 16;
  int intermediate_size = 2816;
  int patch_size = 14;
  int downsample_ratio = 3;
  double rope_theta = 10000.0;
  int64_t max_image_tokens = 1024;
  int64_t min_pixels = 295936;
  double max_wh_ratio = 0.0;  // 0: no cap (null in the file)
  bool present() const { return num_hidden_layers > 0; }
  bool operator==(const VisionConfig&) const = default;
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
  std::vector<int> mtp_compress_ratios;  // V4.1: per DSpark stage (the entries after the backbone), all 0
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
  // Quantization of the stored weights
  std::vector<int> weight_block_size;  // e.g. {128, 128}; empty = unquantized
  std::string expert_dtype;            // "fp4", "fp8", "bf16" or ""
  std::string scale_fmt;               // "ue8m0" (power-of-two E8M0 scales) or ""

  // ---- V4.1 only (left at these defaults for V4) ----
  // CSA2 sharing: layers that own a compressor + index keys, layers that run the indexer query side, and
  // the index source whose candidate blocks restrict later index sources (-1: no second level).
  std::vector<int> kv_source_layer_ids;
  std::vector<int> index_source_layer_ids;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 2048;
  int candidate_block_size = 8;
  double gate_temp = 1.0;          // router logits are divided by it
  int64_t image_token_id = -1;     // -1: none given
  // Engram n-gram memory, before the listed layers.
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer
  int engram_max_ngram_size = 4;
  int64_t engram_vocab_size = 16000000;
  int engram_n_heads = 8;
  int engram_head_dim = 256;
  int64_t engram_pad_token_id = 2;
  int64_t engram_compressed_vocab_size = 99092;
  // DSpark: num_nextn_predict_layers stages (mtp.{s}) after the backbone.
  int dspark_block_size = 5;
  int64_t dspark_noise_token_id = 128799;
  std::vector<int> dspark_target_layer_ids;
  int dspark_markov_rank = 256;
  int dspark_n_routed_experts = 128;
  int dspark_num_experts_per_tok = 3;
  VisionConfig vision;

  int compress_ratio(int layer) const { return compress_ratios.at(layer); }
  bool is_kv_source(int layer) const { return contains(kv_source_layer_ids, layer); }
  bool is_index_source(int layer) const { return contains(index_source_layer_ids, layer); }
  // Index into engram_layer_ids / engram_num_embeddings, or -1.
  int engram_index(int layer) const {
    for (size_t i = 0; i < engram_layer_ids.size(); ++i)
      if (engram_layer_ids[i] == layer) return int(i);
    return -1;
  }
  bool operator==(const ModelConfig&) const = default;

 private:
  static bool contains(const std::vector<int>& v, int x) {
    for (int y : v)
      if (y == x) return true;
    return false;
  }
};

// Parse a config.json file (path used in errors) or its text.
ModelConfig load_config(const std::string& path);
ModelConfig parse_config(const std::string& json_text, const std::string& source_name);
// Normalised JSON form (what a plan records); parse_config(to_json(c)) == c.
std::string config_to_json(const ModelConfig& c);

}  // namespace smelt
