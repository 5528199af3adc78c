// config.json parsing: every spelling of the same model gives the same ModelConfig, hand-checked values,
// malformed and incomplete files, and config_to_json round trips.
#include "frontends/config.h"

#include "tests/frontend/test_util.h"

namespace smelt {
namespace {

const std::string kFixtures = SMELT_FRONTEND_FIXTURES;

// (c) The tiny model of fixtures/transformers_tiny in the official inference/config.json spelling.
const char* kTinyInference = R"({
  "vocab_size": 64, "dim": 32, "moe_inter_dim": 24, "n_layers": 4, "n_hash_layers": 2, "n_mtp_layers": 1,
  "n_heads": 4, "n_routed_experts": 4, "n_shared_experts": 1, "n_activated_experts": 2,
  "score_func": "sqrtsoftplus", "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 16, "head_dim": 16,
  "rope_head_dim": 8, "norm_eps": 1e-6, "o_groups": 2, "o_lora_rank": 8, "window_size": 8,
  "original_seq_len": 65536, "rope_theta": 10000, "rope_factor": 16, "beta_fast": 32, "beta_slow": 1,
  "index_n_heads": 2, "index_head_dim": 8, "index_topk": 4, "hc_mult": 2, "hc_sinkhorn_iters": 20,
  "hc_eps": 1e-6, "dtype": "bf16", "expert_dtype": "fp4", "compress_rope_theta": 160000,
  "compress_ratios": [128, 4, 0, 4, 0]})";

// (b) The V4-Flash-0731 release config.json as given in the architecture spec, section 1.3.
const char* kV4FlashRelease = R"({
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
  "bos_token_id": 0, "eos_token_id": 1, "vocab_size": 129280,
  "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
  "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_groups": 8, "o_lora_rank": 1024,
  "hidden_act": "silu", "swiglu_limit": 10.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "use_cache": true,
  "max_position_embeddings": 1048576, "rope_theta": 10000, "compress_rope_theta": 160000,
  "rope_scaling": {"type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 65536},
  "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
  "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
  "num_hash_layers": 3, "expert_dtype": "fp4", "sliding_window": 128,
  "compress_ratios": [0,0, 4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4, 0,0,0],
  "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
  "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
  "num_nextn_predict_layers": 1,
  "dspark_block_size": 5, "dspark_markov_rank": 256, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [40, 41, 42],
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
})";

// (d) A V4.1 model in the released nested layout and (c) the same model in the inference spelling.
const char* kV41Nested = R"({
  "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "bfloat16",
  "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "image_token_id": 509,
  "quantization_config": {"activation_scheme": "dynamic", "expert_dtype": "fp4", "quant_method": "fp8",
                          "scale_fmt": "ue8m0", "weight_block_size": [32, 32]},
  "text_config": {
    "model_type": "deepseek_v41_text", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 8,
    "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 32,
    "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "hidden_act": "silu", "swiglu_limit": 10.0,
    "rms_norm_eps": 1e-20, "max_position_embeddings": 1048576, "rope_theta": 10000, "compress_rope_theta": 160000,
    "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                     "original_max_position_embeddings": 65536},
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
    "sliding_window": 16, "compress_ratios": [0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0],
    "kv_source_layer_ids": [2, 5], "index_source_layer_ids": [2, 5, 7], "index_n_heads": 4, "index_head_dim": 64,
    "index_topk": 8, "candidate_source_layer_id": 5, "candidate_topk_blocks": 4, "candidate_block_size": 4,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "engram_layer_ids": [1, 2],
    "engram_num_embeddings": [434, 606], "num_nextn_predict_layers": 3, "dspark_block_size": 5},
  "vision_config": {"model_type": "deepseek_v41_vision", "num_hidden_layers": 32, "max_wh_ratio": null}
})";
const char* kV41Inference = R"({
  "vocab_size": 512, "dim": 256, "moe_inter_dim": 128, "n_layers": 8, "n_mtp_layers": 3, "n_heads": 8,
  "n_routed_experts": 8, "n_shared_experts": 1, "n_activated_experts": 2, "score_func": "sqrtsoftplus",
  "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 128, "head_dim": 128, "rope_head_dim": 32,
  "norm_eps": 1e-20, "o_groups": 2, "o_lora_rank": 64, "window_size": 16, "kv_source_layers": [2, 5],
  "index_source_layers": [2, 5, 7], "original_seq_len": 65536, "rope_theta": 10000, "rope_factor": 16,
  "beta_fast": 32, "beta_slow": 1, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 8,
  "candidate_source_layer": 5, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "dtype": "fp8",
  "expert_dtype": "fp4", "compress_rope_theta": 160000, "compress_ratios": [0, 0, 2, 2, 2, 1, 1, 1],
  "vision_max_wh_ratio": null})";

TEST(FrontendConfig, TinyV4AllSpellingsAgree) {
  // (a) transformers save_pretrained output and (b) its legacy input: both written by transformers 5.17.
  ModelConfig a = load_config(kFixtures + "/transformers_tiny/config_saved.json");
  ModelConfig b = load_config(kFixtures + "/transformers_tiny/config_legacy.json");
  ModelConfig c = parse_config(kTinyInference, "inference/config.json");

  // Hand-checked against the fixture's config_legacy.json.
  EXPECT_EQ(b.family, ModelFamily::DeepseekV4);
  EXPECT_EQ(b.model_type, "deepseek_v4");
  EXPECT_EQ(b.vocab_size, 64);
  EXPECT_EQ(b.hidden_size, 32);
  EXPECT_EQ(b.num_hidden_layers, 4);
  EXPECT_EQ(b.num_attention_heads, 4);
  EXPECT_EQ(b.head_dim, 16);
  EXPECT_EQ(b.qk_rope_head_dim, 8);
  EXPECT_EQ(b.q_lora_rank, 16);
  EXPECT_EQ(b.o_groups, 2);
  EXPECT_EQ(b.o_lora_rank, 8);
  EXPECT_EQ(b.n_routed_experts, 4);
  EXPECT_EQ(b.num_experts_per_tok, 2);
  EXPECT_EQ(b.moe_intermediate_size, 24);
  EXPECT_EQ(b.routed_scaling_factor, 1.5);
  EXPECT_EQ(b.compress_ratios, (std::vector<int>{128, 4, 0, 4}));  // the 5th entry is the MTP stage
  EXPECT_EQ(b.hash_moe, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(b.sliding_window, 8);
  EXPECT_EQ(b.index_n_heads, 2);
  EXPECT_EQ(b.index_head_dim, 8);
  EXPECT_EQ(b.index_topk, 4);
  EXPECT_EQ(b.hc_mult, 2);
  EXPECT_EQ(b.rope_theta, 10000.0);
  EXPECT_EQ(b.compress_rope_theta, 160000.0);
  EXPECT_TRUE(b.yarn.enabled);
  EXPECT_EQ(b.yarn.factor, 16.0);
  EXPECT_EQ(b.yarn.original_max_position_embeddings, 65536.0);
  EXPECT_EQ(b.max_position_embeddings, 4096);
  EXPECT_EQ(b.expert_dtype, "fp4");
  EXPECT_TRUE(b.weight_block_size.empty());

  EXPECT_EQ(a, b);
  // The inference config has no max_position_embeddings (the official code takes max_seq_len at run time).
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  c.max_position_embeddings = b.max_position_embeddings;
  EXPECT_EQ(c, b);
}

TEST(FrontendConfig, V4FlashRelease) {
  ModelConfig c = parse_config(kV4FlashRelease, "config.json");
  EXPECT_EQ(c.num_hidden_layers, 43);
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  for (int i = 0; i < 43; ++i) EXPECT_EQ(c.compress_ratios[i], i < 2 ? 0 : i % 2 == 0 ? 4 : 128) << i;
  ASSERT_EQ(c.hash_moe.size(), 43u);
  for (int i = 0; i < 43; ++i) EXPECT_EQ(c.hash_moe[i], i < 3) << i;
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.weight_block_size, (std::vector<int>{128, 128}));
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.yarn.enabled);
  EXPECT_EQ(c.yarn.beta_fast, 32.0);
  EXPECT_EQ(c.yarn.beta_slow, 1.0);
}

TEST(FrontendConfig, V41NestedEqualsInference) {
  ModelConfig d = parse_config(kV41Nested, "config.json");
  ModelConfig c = parse_config(kV41Inference, "inference/config.json");
  EXPECT_EQ(d.family, ModelFamily::DeepseekV41);
  EXPECT_EQ(c.family, ModelFamily::DeepseekV41);  // told apart by its V4.1-only keys
  EXPECT_EQ(d.model_type, "deepseek_v41");
  EXPECT_EQ(d.compress_ratios, (std::vector<int>{0, 0, 2, 2, 2, 1, 1, 1}));
  EXPECT_EQ(d.hash_moe, std::vector<bool>(8, false));
  EXPECT_EQ(d.rms_norm_eps, 1e-20);
  EXPECT_EQ(d.weight_block_size, (std::vector<int>{32, 32}));
  EXPECT_EQ(d.expert_dtype, "fp4");
  EXPECT_EQ(d.qk_rope_head_dim, 32);
  EXPECT_EQ(d.num_nextn_predict_layers, 3);
  EXPECT_EQ(d.hidden_size, 256);
  EXPECT_EQ(c, d);
}

// The goldens beside the checkout carry both spellings of one V4.1 model.
TEST(FrontendConfig, V41GoldensBothSpellings) {
  for (const char* name : {"tiny_backbone", "tiny_full"}) {
    std::string dir = std::string(SMELT_SHARED_DIR) + "/goldens/v41/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no " << dir;
    ModelConfig d = load_config(dir + "/config.json");
    ModelConfig c = load_config(dir + "/inference_config.json");
    EXPECT_EQ(d.family, ModelFamily::DeepseekV41);
    EXPECT_EQ(d.num_hidden_layers, 8);
    c.max_position_embeddings = d.max_position_embeddings;  // not in the inference spelling
    EXPECT_EQ(c, d) << name;
  }
}

TEST(FrontendConfig, TransformersDefaults) {
  // No schedule keys: transformers' defaults (two HCA, then HCA/CSA alternating; 3 hash layers; qk_rope = hd/8).
  const char* j = R"({"model_type": "deepseek_v4", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 5,
    "num_attention_heads": 2, "head_dim": 16, "q_lora_rank": 4, "o_groups": 1, "o_lora_rank": 4,
    "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 4, "sliding_window": 4,
    "hc_mult": 2, "index_n_heads": 1, "index_head_dim": 4, "index_topk": 2})";
  ModelConfig c = parse_config(j, "config.json");
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{128, 128, 128, 4, 128}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{true, true, true, false, false}));
  EXPECT_EQ(c.qk_rope_head_dim, 2);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_FALSE(c.yarn.enabled);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
}

TEST(FrontendConfig, CompressRatesAndLegacyFolding) {
  const std::string base = R"({"model_type": "deepseek_v4", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 3,
    "num_attention_heads": 2, "head_dim": 16, "q_lora_rank": 4, "o_groups": 1, "o_lora_rank": 4,
    "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 4, "sliding_window": 4,
    "hc_mult": 2, "index_n_heads": 1, "index_head_dim": 4, "index_topk": 2, "eos_token_id": [7, 8],
    "partial_rotary_factor": 0.25, )";
  // A smaller HCA rate through compress_rates (transformers spelling) ...
  ModelConfig c = parse_config(base + R"(
    "layer_types": ["heavily_compressed_attention", "sliding_attention", "compressed_sparse_attention"],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
    "mlp_layer_types": ["moe", "hash_moe", "moe"]})", "config.json");
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{16, 0, 4}));
  EXPECT_EQ(c.hash_moe, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_EQ(c.qk_rope_head_dim, 4);
  // ... equals the legacy flat ints with compress_rate_hca folded into the 128 entries, as transformers does.
  ModelConfig legacy = parse_config(base + R"(
    "compress_ratios": [128, 0, 4], "compress_rate_hca": 16,
    "mlp_layer_types": ["moe", "hash_moe", "moe"]})", "config.json");
  EXPECT_EQ(legacy, c);
}

TEST(FrontendConfig, RoundTripThroughJson) {
  std::vector<ModelConfig> configs = {
      load_config(kFixtures + "/transformers_tiny/config_saved.json"), parse_config(kV4FlashRelease, "a"),
      parse_config(kV41Nested, "b"), parse_config(kTinyInference, "c")};
  configs[0].tie_word_embeddings = true;
  configs[0].bos_token_id = 5;
  configs[0].rope_theta = 12345.678901234567;  // not a short decimal: doubles must survive exactly
  configs[0].hash_moe = {false, true, false, true};
  for (const ModelConfig& c : configs) {
    std::string j = config_to_json(c);
    ModelConfig back = parse_config(j, "normalised.json");
    EXPECT_EQ(back, c) << j;
    EXPECT_EQ(config_to_json(back), j);
  }
}

// ---- malformed and incomplete files ----

std::string tiny_without(const std::string& key) {
  std::string s = test::read_file(kFixtures + "/transformers_tiny/config_legacy.json");
  size_t at = s.find("\"" + key + "\"");
  EXPECT_NE(at, std::string::npos) << key;
  size_t end = s.find_first_of(",}", s.find(':', at));
  if (s[end] == '}' && s.rfind(',', at) != std::string::npos) at = s.rfind(',', at);  // last key: drop comma before
  else ++end;
  return s.erase(at, end - at);
}

std::string tiny_with(const std::string& key, const std::string& value) {
  std::string s = test::read_file(kFixtures + "/transformers_tiny/config_legacy.json");
  size_t at = s.find("\"" + key + "\"");
  if (at == std::string::npos) return s.insert(s.find('{') + 1, "\"" + key + "\": " + value + ", ");
  size_t colon = s.find(':', at) + 1;
  size_t depth = 0, end = colon;
  for (; end < s.size(); ++end) {  // skip a nested value
    if (s[end] == '[' || s[end] == '{') ++depth;
    if (s[end] == ']' || s[end] == '}') {
      if (depth == 0) break;
      --depth;
    }
    if (s[end] == ',' && depth == 0) break;
  }
  return s.replace(colon, end - colon, " " + value);
}

TEST(FrontendConfigBad, MalformedJson) {
  EXPECT_SMELT_ERROR(parse_config("{\"a\": 1,\n \"b\": }", "config.json"), "config.json", "not valid JSON", "line 2");
  EXPECT_SMELT_ERROR(parse_config("", "config.json"), "config.json", "not valid JSON");
  EXPECT_SMELT_ERROR(parse_config("[1]", "config.json"), "config.json", "not a JSON object");
  test::TempDir dir;
  EXPECT_SMELT_ERROR(load_config(dir / "config.json"), "config.json", "cannot open");
}

TEST(FrontendConfigBad, MissingRequiredKeys) {
  for (const char* key : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                          "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "sliding_window", "hc_mult", "index_n_heads"}) {
    SCOPED_TRACE(key);
    EXPECT_SMELT_ERROR(parse_config(tiny_without(key), "config.json"),
                       "config.json: missing required key '" + std::string(key) + "'");
  }
  // Nested: the key is named with its path.
  std::string nested = kV41Nested;
  nested.erase(nested.find("\"hidden_size\": 256, "), 20);
  EXPECT_SMELT_ERROR(parse_config(nested, "config.json"), "config.json: missing required key 'text_config.hidden_size'");
}

TEST(FrontendConfigBad, WrongTypes) {
  EXPECT_SMELT_ERROR(parse_config(tiny_with("hidden_size", "\"32\""), "config.json"), "config.json", "'hidden_size'",
                     "must be an integer");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("hidden_size", "32.5"), "config.json"), "'hidden_size'", "integer");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("hidden_size", "-4"), "config.json"), "'hidden_size'", "out of range");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("rope_theta", "\"big\""), "config.json"), "'rope_theta'", "number");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("norm_topk_prob", "1"), "config.json"), "'norm_topk_prob'", "true or false");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("compress_ratios", "4"), "config.json"), "'compress_ratios'", "array");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("compress_ratios", "[0, \"x\", 0, 0]"), "config.json"),
                     "'compress_ratios[1]'");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("rope_scaling", "[16]"), "config.json"), "'rope_scaling'", "object");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("model_type", "\"llama\""), "config.json"), "config.json", "'llama'");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("vocab_size", "1e300"), "config.json"), "'vocab_size'");
}

TEST(FrontendConfigBad, Inconsistent) {
  EXPECT_SMELT_ERROR(parse_config(tiny_with("o_groups", "3"), "config.json"), "config.json",
                     "num_attention_heads (4) is not divisible by o_groups (3)");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("qk_rope_head_dim", "7"), "config.json"), "qk_rope_head_dim");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("qk_rope_head_dim", "32"), "config.json"), "qk_rope_head_dim", "head_dim");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("compress_ratios", "[0, 4, 0]"), "config.json"), "config.json",
                     "'compress_ratios' has 3 entries but num_hidden_layers is 4");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("num_experts_per_tok", "5"), "config.json"), "num_experts_per_tok");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("num_key_value_heads", "2"), "config.json"), "num_key_value_heads");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("scoring_func", "\"relu\""), "config.json"), "scoring_func", "relu");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("rope_scaling", R"({"type": "longrope", "factor": 2})"), "config.json"),
                     "'rope_scaling.rope_type'", "longrope");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("rope_scaling", R"({"type": "yarn"})"), "config.json"),
                     "missing required key 'rope_scaling.factor'");
  EXPECT_SMELT_ERROR(parse_config(tiny_with("partial_rotary_factor", "0.25"), "config.json"), "partial_rotary_factor",
                     "qk_rope_head_dim");
  std::string saved = test::read_file(kFixtures + "/transformers_tiny/config_saved.json");
  std::string bad_type = saved;
  bad_type.replace(bad_type.find("\"sliding_attention\""), 19, "\"full_attention\"");
  EXPECT_SMELT_ERROR(parse_config(bad_type, "config.json"), "'layer_types[2]'", "full_attention");
  std::string bad_rate = saved;
  bad_rate.replace(bad_rate.find("\"compressed_sparse_attention\": 4"), 32, "\"compressed_sparse_attention\": 8");
  EXPECT_SMELT_ERROR(parse_config(bad_rate, "config.json"), "compressed_sparse_attention rate 8");
  std::string bad_af = saved;
  bad_af.replace(bad_af.find("\"attention_factor\": 1.0"), 23, "\"attention_factor\": 1.3");
  EXPECT_SMELT_ERROR(parse_config(bad_af, "config.json"), "'rope_parameters.compress.attention_factor'");
  std::string bad_mlp = saved;
  bad_mlp.replace(bad_mlp.find("\"hash_moe\""), 10, "\"dense\"");
  EXPECT_SMELT_ERROR(parse_config(bad_mlp, "config.json"), "'mlp_layer_types[0]'", "dense");
}

}  // namespace
}  // namespace smelt
