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
    "engram_num_embeddings": [434, 606], "engram_max_ngram_size": 4, "engram_vocab_size": 61,
    "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_token_id": 2, "engram_compressed_vocab_size": 512,
    "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 511,
    "dspark_target_layer_ids": [5, 6, 7], "dspark_markov_rank": 32, "dspark_n_routed_experts": 4,
    "dspark_num_experts_per_tok": 2},
  "vision_config": {"model_type": "deepseek_v41_vision", "num_hidden_layers": 32, "max_wh_ratio": null}
})";
const char* kV41Inference = R"({
  "vocab_size": 512, "dim": 256, "moe_inter_dim": 128, "n_layers": 8, "n_mtp_layers": 3, "n_heads": 8,
  "n_routed_experts": 8, "n_shared_experts": 1, "n_activated_experts": 2, "score_func": "sqrtsoftplus",
  "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 128, "head_dim": 128, "rope_head_dim": 32,
  "norm_eps": 1e-20, "o_groups": 2, "o_lora_rank": 64, "window_size": 16, "kv_source_layers": [2, 5],
  "index_source_layers": [2, 5, 7], "original_seq_len": 65536, "rope_theta": 10000, "rope_factor": 16,
  "beta_fast": 32, "beta_slow": 1, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 8,
  "candidate_source_layer": 5, "candidate_topk_blocks": 4, "candidate_block_size": 4, "hc_mult": 4,
  "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "dtype": "fp8", "expert_dtype": "fp4", "compress_rope_theta": 160000,
  "compress_ratios": [0, 0, 2, 2, 2, 1, 1, 1], "engram_layer_ids": [1, 2], "engram_vocab_size": 61,
  "engram_num_embeddings": [434, 606], "engram_max_ngram_size": 4, "engram_pad_id": 2,
  "engram_compressed_vocab_size": 512, "engram_n_heads": 2, "engram_head_dim": 32, "dspark_block_size": 5,
  "dspark_noise_token_id": 511, "dspark_target_layer_ids": [5, 6, 7], "dspark_markov_rank": 32,
  "dspark_n_routed_experts": 4, "dspark_n_activated_experts": 2, "image_token_id": 509, "vision_n_layers": 32,
  "vision_dim": 1024, "vision_max_wh_ratio": null})";

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
    // The V4.1 keys are read, not left at defaults on both sides (values from the golden READMEs).
    const bool full = std::string(name) == "tiny_full";
    EXPECT_EQ(d.kv_source_layer_ids, (std::vector<int>{2, 5}));
    EXPECT_EQ(d.index_source_layer_ids, (std::vector<int>{2, 5, 7}));
    EXPECT_EQ(d.candidate_source_layer_id, 5);
    EXPECT_EQ(d.candidate_topk_blocks, 4);
    EXPECT_EQ(d.candidate_block_size, 4);
    EXPECT_EQ(d.image_token_id, 509);
    EXPECT_EQ(d.engram_layer_ids, full ? (std::vector<int>{1, 2}) : std::vector<int>{});
    EXPECT_EQ(d.engram_num_embeddings, full ? (std::vector<int64_t>{434, 606}) : std::vector<int64_t>{});
    EXPECT_EQ(d.engram_head_dim, 32);
    EXPECT_EQ(d.engram_n_heads, 2);
    EXPECT_EQ(d.engram_vocab_size, 61);
    EXPECT_EQ(d.engram_compressed_vocab_size, 512);
    EXPECT_EQ(d.num_nextn_predict_layers, full ? 3 : 0);
    EXPECT_EQ(d.mtp_compress_ratios, full ? (std::vector<int>{0, 0, 0}) : std::vector<int>{});
    EXPECT_EQ(d.dspark_target_layer_ids, full ? (std::vector<int>{5, 6, 7}) : std::vector<int>{});
    EXPECT_EQ(d.dspark_n_routed_experts, 4);
    EXPECT_EQ(d.dspark_num_experts_per_tok, 2);
    EXPECT_EQ(d.dspark_markov_rank, 32);
    EXPECT_EQ(d.dspark_noise_token_id, 511);
    EXPECT_FALSE(d.vision.present());  // vision_n_layers 0 in the inference spelling, no vision_config
    EXPECT_EQ(d.scale_fmt, "ue8m0");
  }
}

void replace_text(std::string& s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

// The V4.1-Flash release config (spec section 1.1), hand-checked, and its flat inference/config.json
// spelling (section 1.2's renames, same values) parsing to the same ModelConfig.
const std::string kFlash = std::string(SMELT_FRONTEND_DATA) + "/deepseek-v4.1-flash/config.json";
const char* kFlashInference = R"({
  "vocab_size": 129280, "dim": 5120, "moe_inter_dim": 2304, "n_layers": 40, "n_mtp_layers": 3,
  "dspark_block_size": 5, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [37, 38, 39],
  "dspark_markov_rank": 256, "dspark_n_routed_experts": 128, "dspark_n_activated_experts": 3, "n_heads": 64,
  "n_routed_experts": 384, "n_shared_experts": 1, "n_activated_experts": 6, "score_func": "sqrtsoftplus",
  "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 1280, "head_dim": 512, "rope_head_dim": 64,
  "norm_eps": 1e-20, "o_groups": 8, "o_lora_rank": 1024, "window_size": 128, "kv_source_layers": [2, 8, 14, 20],
  "index_source_layers": [2, 8, 14, 20, 24, 28, 32, 36], "original_seq_len": 65536, "rope_theta": 10000,
  "rope_factor": 16, "beta_fast": 32, "beta_slow": 1, "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512,
  "candidate_source_layer": 20, "candidate_topk_blocks": 2048, "candidate_block_size": 8, "hc_mult": 4,
  "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "engram_layer_ids": [1, 14], "engram_vocab_size": 16000000,
  "engram_num_embeddings": [384006168, 384016682], "engram_max_ngram_size": 4, "engram_pad_id": 2,
  "engram_compressed_vocab_size": 99092, "dtype": "fp8", "expert_dtype": "fp4", "compress_rope_theta": 160000,
  "compress_ratios": [0,0, 2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2, 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 0,0,0],
  "vision_n_layers": 32, "vision_dim": 1024, "vision_n_heads": 16, "vision_inter_dim": 2816, "vision_patch_size": 14,
  "vision_downsample_ratio": 3, "vision_max_n_token": 1024, "vision_min_pixels": 295936, "vision_max_wh_ratio": null,
  "image_token_id": 129264, "engram_n_heads": 8, "engram_head_dim": 256, "vision_rope_theta": 10000})";

TEST(FrontendConfig, V41FlashRelease) {
  ModelConfig c = load_config(kFlash);
  EXPECT_EQ(c.family, ModelFamily::DeepseekV41);
  EXPECT_EQ(c.num_hidden_layers, 40);
  ASSERT_EQ(c.compress_ratios.size(), 40u);  // backbone only; the DSpark stages apart
  for (int i = 0; i < 40; ++i) EXPECT_EQ(c.compress_ratios[i], i < 2 ? 0 : i < 20 ? 2 : 1) << i;
  EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layer_ids, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.candidate_block_size, 8);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram_max_ngram_size, 4);
  EXPECT_EQ(c.engram_vocab_size, 16000000);
  EXPECT_EQ(c.engram_n_heads, 8);
  EXPECT_EQ(c.engram_head_dim, 256);
  EXPECT_EQ(c.engram_pad_token_id, 2);
  EXPECT_EQ(c.engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c.num_nextn_predict_layers, 3);
  EXPECT_EQ(c.dspark_block_size, 5);
  EXPECT_EQ(c.dspark_noise_token_id, 128799);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{37, 38, 39}));
  EXPECT_EQ(c.dspark_markov_rank, 256);
  EXPECT_EQ(c.dspark_n_routed_experts, 128);
  EXPECT_EQ(c.dspark_num_experts_per_tok, 3);
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.gate_temp, 1.0);  // not in the released config: the reference default
  EXPECT_EQ(c.weight_block_size, (std::vector<int>{32, 32}));
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.scale_fmt, "ue8m0");
  EXPECT_TRUE(c.vision.present());
  EXPECT_EQ(c.vision.num_hidden_layers, 32);
  EXPECT_EQ(c.vision.hidden_size, 1024);
  EXPECT_EQ(c.vision.num_attention_heads, 16);
  EXPECT_EQ(c.vision.intermediate_size, 2816);
  EXPECT_EQ(c.vision.patch_size, 14);
  EXPECT_EQ(c.vision.downsample_ratio, 3);
  EXPECT_EQ(c.vision.min_pixels, 295936);
  EXPECT_EQ(c.vision.max_wh_ratio, 0.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);

  ModelConfig flat = parse_config(kFlashInference, "inference/config.json");
  flat.max_position_embeddings = c.max_position_embeddings;  // not in the inference spelling
  EXPECT_EQ(flat, c) << config_to_json(flat) << "\n" << config_to_json(c);
}

// Sources absent: transformers' rules (spec section 6).
TEST(FrontendConfig, V41DerivedSources) {
  std::string base = kV41Inference;
  auto without = [](std::string s, const std::string& key) {
    size_t at = s.find("\"" + key + "\"");
    EXPECT_NE(at, std::string::npos) << key;
    size_t colon = s.find(':', at) + 2;
    size_t end = s[colon] == '[' ? s.find(']', colon) + 1 : s.find_first_of(",}", colon);
    if (s[end] == ',') ++end;  // the comma goes too
    return s.erase(at, end - at);
  };
  std::string none = without(without(without(base, "kv_source_layers"), "index_source_layers"), "candidate_source_layer");
  ModelConfig c = parse_config(none, "inference/config.json");
  // [0, 0, 2, 2, 2, 1, 1, 1]: the first layer of each run of equal nonzero ratios; index = KV sources;
  // candidate = the last KV source.
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int>{2, 5}));
  EXPECT_EQ(c.index_source_layer_ids, (std::vector<int>{2, 5}));
  EXPECT_EQ(c.candidate_source_layer_id, 5);
  // The released 40-layer schedule keeps the released sources.
  std::string flash = without(without(without(kFlashInference, "kv_source_layers"), "index_source_layers"),
                              "candidate_source_layer");
  ModelConfig f = parse_config(flash, "inference/config.json");
  EXPECT_EQ(f.kv_source_layer_ids, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(f.index_source_layer_ids, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(f.candidate_source_layer_id, 20);
  // A schedule that is the released one cut to fewer layers keeps the released sources inside them (an
  // out-of-range read the config fuzzer found: a 1-layer prefix took sources 2, 8, 14, 20).
  std::string cut = none;
  replace_text(cut, "\"compress_ratios\": [0, 0, 2, 2, 2, 1, 1, 1]", "\"compress_ratios\": [0, 0, 2, 2, 2, 2, 2, 2]");
  ModelConfig c8 = parse_config(cut, "inference/config.json");
  EXPECT_EQ(c8.kv_source_layer_ids, (std::vector<int>{2}));
  EXPECT_EQ(c8.index_source_layer_ids, (std::vector<int>{2}));
  EXPECT_EQ(c8.candidate_source_layer_id, 2);
  // A negative candidate source turns the second level off.
  std::string off = base;
  replace_text(off, "\"candidate_source_layer\": 5", "\"candidate_source_layer\": -1");
  EXPECT_EQ(parse_config(off, "x").candidate_source_layer_id, -1);
}

TEST(FrontendConfigBad, V41Inconsistent) {
  auto with = [](const std::string& key, const std::string& value) {
    std::string s = kV41Inference;
    size_t at = s.find("\"" + key + "\"");
    EXPECT_NE(at, std::string::npos) << key;
    size_t colon = s.find(':', at) + 2;
    size_t end = s[colon] == '[' ? s.find(']', colon) + 1 : s.find_first_of(",}", colon);
    return s.replace(colon, end - colon, value);
  };
  EXPECT_SMELT_ERROR(parse_config(with("kv_source_layers", "[1, 5]"), "config.json"), "config.json",
                     "kv_source_layer_ids [1, 5]: layer 1 has compress ratio 0");
  EXPECT_SMELT_ERROR(parse_config(with("kv_source_layers", "[5, 2]"), "config.json"), "'kv_source_layers'",
                     "strictly increasing");
  EXPECT_SMELT_ERROR(parse_config(with("kv_source_layers", "[5]"), "config.json"),
                     "index_source_layer_ids [2, 5, 7]: layer 2 has no KV source at or before it");
  EXPECT_SMELT_ERROR(parse_config(with("kv_source_layers", "[2, 9]"), "config.json"), "'kv_source_layers[1]'",
                     "out of range");
  EXPECT_SMELT_ERROR(parse_config(with("index_source_layers", "[1, 5]"), "config.json"),
                     "index_source_layer_ids [1, 5]: layer 1 has compress ratio 0");
  EXPECT_SMELT_ERROR(parse_config(with("candidate_source_layer", "6"), "config.json"),
                     "candidate_source_layer_id 6 is not one of index_source_layer_ids [2, 5, 7]");
  EXPECT_SMELT_ERROR(parse_config(with("engram_num_embeddings", "[434]"), "config.json"),
                     "'engram_num_embeddings' has 1 entries but engram_layer_ids has 2");
  std::string no_dim = kV41Inference;
  replace_text(no_dim, "\"engram_head_dim\": 32, ", "");
  EXPECT_SMELT_ERROR(parse_config(no_dim, "config.json"), "missing required key 'engram_head_dim'");
  EXPECT_SMELT_ERROR(parse_config(with("compress_ratios", "[0, 0, 2, 2, 2, 1, 1, 1, 0, 1, 0]"), "config.json"),
                     "'compress_ratios[9]' = 1", "DSpark stages");
  EXPECT_SMELT_ERROR(parse_config(with("compress_ratios", "[0, 0, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0]"), "config.json"),
                     "'compress_ratios' has 12 entries but num_hidden_layers + num_nextn_predict_layers is 11");
  EXPECT_SMELT_ERROR(parse_config(with("dspark_noise_token_id", "512"), "config.json"),
                     "dspark_noise_token_id 512 is not below vocab_size 512");
  std::string no_targets = kV41Inference;
  replace_text(no_targets, "\"dspark_target_layer_ids\": [5, 6, 7], ", "");
  EXPECT_SMELT_ERROR(parse_config(no_targets, "config.json"), "missing required key 'dspark_target_layer_ids'");
  EXPECT_SMELT_ERROR(parse_config(with("dspark_n_activated_experts", "5"), "config.json"),
                     "dspark_num_experts_per_tok (5) exceeds dspark_n_routed_experts (4)");
  // Nested: the key is named with its path.
  std::string nested = kV41Nested;
  replace_text(nested, "\"kv_source_layer_ids\": [2, 5]", "\"kv_source_layer_ids\": \"2\"");
  EXPECT_SMELT_ERROR(parse_config(nested, "config.json"), "'text_config.kv_source_layer_ids' must be a JSON array");
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
  configs.push_back(load_config(std::string(SMELT_FRONTEND_DATA) + "/deepseek-v4.1-flash/config.json"));
  configs.push_back(parse_config(kV41Inference, "d"));
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
