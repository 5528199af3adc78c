// config.json of the DeepSeek-V4 family, in any of the spellings that exist:
//  - transformers save_pretrained: layer_types + compress_rates, mlp_layer_types, nested rope_parameters
//    {main, compress}, partial_rotary_factor;
//  - the official release's flat config.json: compress_ratios (may list MTP stages after the backbone),
//    num_hash_layers, rope_scaling, qk_rope_head_dim, quantization_config, expert_dtype;
//  - the official inference/config.json: dim, n_layers, n_heads, rope_factor, original_seq_len, ...;
//  - V4.1's nested layout: the text model's keys under text_config, quantization_config beside it.
// Where a key is absent, the default is transformers 5.17's (the V4 oracle); keys that fix tensor shapes
// are required.
#include "frontends/config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "frontends/config_reader.h"

namespace smelt {
namespace {

using namespace config_detail;

// RoPE settings of one spelling: rope_scaling, a flat rope_parameters, or rope_parameters.compress.
void read_yarn(const Reader& r, ModelConfig& c) {
  std::string type = r.opt_string({"rope_type", "type"}).value_or("default");
  if (type == "default") return;
  if (type != "yarn")
    r.fail("key '" + r.key("rope_type") + "' = '" + type + "' is not supported (DeepSeek-V4 uses 'yarn' or 'default')");
  c.yarn.enabled = true;
  c.yarn.factor = r.opt_double({"factor"}, 1e-9, 1e9).value_or(0);
  if (c.yarn.factor == 0) r.missing({"factor"});
  c.yarn.beta_fast = r.double_or({"beta_fast"}, 32.0, -1e9, 1e9);
  c.yarn.beta_slow = r.double_or({"beta_slow"}, 1.0, -1e9, 1e9);
  // transformers falls back to max_position_embeddings for a yarn block without the original length.
  c.yarn.original_max_position_embeddings =
      r.double_or({"original_max_position_embeddings"}, double(c.max_position_embeddings), 1, 1e15);
  if (auto af = r.opt_double({"attention_factor"}, -1e9, 1e9); af && *af != 1.0)
    r.fail("key '" + r.key("attention_factor") + "' = " + num_str(*af) +
           " is not supported (the DeepSeek-V4 reference applies no YaRN attention scaling)");
}

void read_rope(const Reader& r, ModelConfig& c) {
  c.rope_theta = r.double_or({"rope_theta"}, 10000.0, 1e-9, 1e30);
  c.compress_rope_theta = r.double_or({"compress_rope_theta"}, 160000.0, 1e-9, 1e30);
  const json* rp = r.opt_object({"rope_parameters"});
  if (rp && rp->contains("main") && rp->contains("compress")) {
    Reader rpr = r.sub(*rp, "rope_parameters");
    rpr.opt_object({"main"});  // type checks
    rpr.opt_object({"compress"});
    Reader main = rpr.sub(rp->at("main"), "main");
    Reader comp = rpr.sub(rp->at("compress"), "compress");
    std::string mt = main.opt_string({"rope_type", "type"}).value_or("default");
    if (mt != "default")
      main.fail("key '" + main.key("rope_type") + "' = '" + mt + "' is not supported (the main rotary is plain RoPE)");
    c.rope_theta = main.double_or({"rope_theta"}, c.rope_theta, 1e-9, 1e30);
    c.compress_rope_theta = comp.double_or({"rope_theta"}, c.compress_rope_theta, 1e-9, 1e30);
    read_yarn(comp, c);
  } else if (rp) {
    read_yarn(r.sub(*rp, "rope_parameters"), c);  // flat: the yarn block of the compressed layers
  } else if (const json* rs = r.opt_object({"rope_scaling"})) {
    read_yarn(r.sub(*rs, "rope_scaling"), c);
  } else if (r.has({"rope_factor"}) || r.has({"original_seq_len"})) {
    // inference/config.json: YaRN on compressed layers when original_seq_len > 0.
    int64_t orig = r.req_int({"original_seq_len"}, 0, int64_t(1) << 50);
    double factor = r.opt_double({"rope_factor"}, 1e-9, 1e9).value_or(0);
    if (factor == 0) r.missing({"rope_factor"});
    if (orig > 0) {
      c.yarn.enabled = true;
      c.yarn.factor = factor;
      c.yarn.beta_fast = r.double_or({"beta_fast"}, 32.0, -1e9, 1e9);
      c.yarn.beta_slow = r.double_or({"beta_slow"}, 1.0, -1e9, 1e9);
      c.yarn.original_max_position_embeddings = double(orig);
    }
  }
}

// partial_rotary_factor x head_dim, as transformers truncates it.
int rope_dim_from_factor(const Reader& r, const json& v, const std::string& k, int head_dim) {
  double f = r.to_double(v, k, 0, 1);
  return int(double(head_dim) * f);
}

int read_rope_head_dim(const Reader& r, int head_dim) {
  std::optional<int> explicit_dim;
  if (auto d = r.opt_int({"qk_rope_head_dim", "rope_head_dim"}, 0, kMaxDim)) explicit_dim = int(*d);
  // The factor (top level, or per rotary in rope_parameters) is what transformers uses when it is given.
  std::vector<std::pair<std::string, int>> from_factor;
  if (const json* f = r.find({"partial_rotary_factor"}))
    from_factor.push_back({"partial_rotary_factor", rope_dim_from_factor(r, *f, "partial_rotary_factor", head_dim)});
  if (const json* rp = r.find({"rope_parameters"}); rp && rp->is_object())
    for (const char* part : {"main", "compress"})
      if (auto it = rp->find(part); it != rp->end() && it->is_object())
        if (auto f = it->find("partial_rotary_factor"); f != it->end() && !f->is_null()) {
          std::string k = std::string("rope_parameters.") + part + ".partial_rotary_factor";
          from_factor.push_back({k, rope_dim_from_factor(r, *f, k, head_dim)});
        }
  int dim = explicit_dim ? *explicit_dim : from_factor.empty() ? head_dim / 8 : from_factor[0].second;
  for (const auto& [k, d] : from_factor)
    if (d != dim)
      r.fail("key '" + r.key(k) + "' gives a rope dim of " + std::to_string(d) + " but " +
             (explicit_dim ? "qk_rope_head_dim" : "another key") + " says " + std::to_string(dim));
  return dim;
}

std::vector<int> read_compress_ratios(const Reader& r, const ModelConfig& c) {
  const int n = c.num_hidden_layers;
  std::vector<int> ratios;
  bool v4 = c.family == ModelFamily::DeepseekV4;
  int csa = 4, hca = 128;
  if (const json* rates = r.opt_object({"compress_rates"})) {
    Reader rr = r.sub(*rates, "compress_rates");
    csa = int(rr.int_or({"compressed_sparse_attention"}, csa, 1, kMaxDim));
    hca = int(rr.int_or({"heavily_compressed_attention"}, hca, 1, kMaxDim));
  }
  csa = int(r.int_or({"compress_rate_csa"}, csa, 1, kMaxDim));
  hca = int(r.int_or({"compress_rate_hca"}, hca, 1, kMaxDim));
  if (csa != 4)
    r.fail("compressed_sparse_attention rate " + std::to_string(csa) +
           " is not supported (DeepSeek-V4 keys its overlapping compressor and indexer on ratio 4)");
  if (hca == 4) r.fail("heavily_compressed_attention rate 4 would be indistinguishable from CSA");

  // V4.1's layer_types (sliding / shared_compressed, written by transformers) do not carry the ratio.
  const json* types = v4 ? r.opt_array({"layer_types"}) : nullptr;
  if (types) {
    if (types->size() < size_t(n))
      r.fail("key '" + r.key("layer_types") + "' has " + std::to_string(types->size()) +
             " entries but num_hidden_layers is " + std::to_string(n));
    for (int i = 0; i < n; ++i) {
      const json& t = (*types)[i];
      std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s == "sliding_attention") ratios.push_back(0);
      else if (s == "compressed_sparse_attention") ratios.push_back(csa);
      else if (s == "heavily_compressed_attention") ratios.push_back(hca);
      else
        r.fail("key '" + r.key("layer_types") + "[" + std::to_string(i) + "]' = " + short_dump(t) +
               " is not sliding_attention, compressed_sparse_attention or heavily_compressed_attention");
    }
  } else if (const json* cr = r.opt_array({"compress_ratios"})) {
    // The release lists the MTP / DSpark stages after the backbone layers: keep the first n.
    if (cr->size() < size_t(n))
      r.fail("key '" + r.key("compress_ratios") + "' has " + std::to_string(cr->size()) +
             " entries but num_hidden_layers is " + std::to_string(n));
    for (int i = 0; i < n; ++i) {
      int v = int(r.to_int((*cr)[i], "compress_ratios[" + std::to_string(i) + "]", 0, kMaxDim));
      if (v4 && v == 128) v = hca;  // transformers folds legacy ints through the layer type
      ratios.push_back(v);
    }
  } else if (v4) {
    // transformers' default schedule: two HCA layers, then HCA / CSA alternating.
    for (int i = 0; i < n; ++i) ratios.push_back(i < 2 ? hca : ((i - 2) % 2 ? csa : hca));
  } else {
    r.missing({"compress_ratios"});
  }
  return ratios;
}

std::vector<bool> read_hash_layers(const Reader& r, const ModelConfig& c) {
  const int n = c.num_hidden_layers;
  std::vector<bool> hash(n, false);
  if (const json* types = r.opt_array({"mlp_layer_types"})) {
    if (types->size() < size_t(n))
      r.fail("key '" + r.key("mlp_layer_types") + "' has " + std::to_string(types->size()) +
             " entries but num_hidden_layers is " + std::to_string(n));
    for (int i = 0; i < n; ++i) {
      const json& t = (*types)[i];
      if (t == "hash_moe") hash[i] = true;
      else if (t != "moe")
        r.fail("key '" + r.key("mlp_layer_types") + "[" + std::to_string(i) + "]' = " + short_dump(t) +
               " is not hash_moe or moe");
    }
    return hash;
  }
  // transformers defaults to 3 hash layers for deepseek_v4; V4.1 has no hash routing.
  int64_t k = r.int_or({"num_hash_layers", "n_hash_layers"}, c.family == ModelFamily::DeepseekV4 ? 3 : 0, 0, 1 << 20);
  for (int i = 0; i < n && i < k; ++i) hash[i] = true;
  return hash;
}

void validate(const Reader& r, const ModelConfig& c) {
  auto fail = [&](const std::string& m) { r.fail(m); };
  if (c.num_key_value_heads != 1)
    fail("num_key_value_heads = " + std::to_string(c.num_key_value_heads) +
         ", but DeepSeek-V4 attention has one shared K=V head");
  if (c.num_attention_heads % c.o_groups != 0)
    fail("num_attention_heads (" + std::to_string(c.num_attention_heads) + ") is not divisible by o_groups (" +
         std::to_string(c.o_groups) + ")");
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim > c.head_dim || c.qk_rope_head_dim % 2)
    fail("qk_rope_head_dim = " + std::to_string(c.qk_rope_head_dim) + " must be even and in [2, head_dim = " +
         std::to_string(c.head_dim) + "]");
  if (c.num_experts_per_tok > c.n_routed_experts)
    fail("num_experts_per_tok (" + std::to_string(c.num_experts_per_tok) + ") exceeds n_routed_experts (" +
         std::to_string(c.n_routed_experts) + ")");
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    fail("scoring_func '" + c.scoring_func + "' is not sqrtsoftplus, softmax or sigmoid");
  bool needs_indexer = false;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    int v = c.compress_ratios[i];
    if (c.family == ModelFamily::DeepseekV4 ? v == 4 : v > 0) needs_indexer = true;
  }
  if (needs_indexer) {
    if (c.index_n_heads <= 0) r.missing({"index_n_heads"});
    if (c.index_head_dim <= 0) r.missing({"index_head_dim"});
    if (c.index_topk <= 0) r.missing({"index_topk"});
    if (c.qk_rope_head_dim > c.index_head_dim)
      fail("qk_rope_head_dim (" + std::to_string(c.qk_rope_head_dim) + ") exceeds index_head_dim (" +
           std::to_string(c.index_head_dim) + ")");
  }
  if (!c.weight_block_size.empty() && c.weight_block_size.size() != 2)
    fail("quantization_config.weight_block_size must have two entries");
  if (!c.expert_dtype.empty() && c.expert_dtype != "fp4" && c.expert_dtype != "fp8" && c.expert_dtype != "bf16")
    fail("expert_dtype '" + c.expert_dtype + "' is not fp4, fp8 or bf16");
}

}  // namespace

ModelConfig parse_config(const std::string& json_text, const std::string& source_name) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(one_line(source_name + ": not valid JSON: " + e.what()));
  }
  if (!root.is_object()) throw Error(source_name + ": the top level is not a JSON object");
  Reader top{root, source_name, ""};
  const json* text_config = top.opt_object({"text_config"});
  Reader r = text_config ? top.sub(*text_config, "text_config") : top;

  ModelConfig c;
  // Family: model_type outside, then inside; the inference config has none, so look for V4.1-only keys.
  std::optional<std::string> mt = top.opt_string({"model_type"});
  if (!mt && text_config) mt = r.opt_string({"model_type"});
  if (mt) {
    if (*mt == "deepseek_v4") c.family = ModelFamily::DeepseekV4;
    else if (*mt == "deepseek_v41" || *mt == "deepseek_v41_text") c.family = ModelFamily::DeepseekV41;
    else top.fail("model_type '" + *mt + "' is not a DeepSeek-V4-family model (deepseek_v4 or deepseek_v41)");
  } else {
    bool v41 = r.has({"kv_source_layer_ids", "kv_source_layers", "index_source_layer_ids", "index_source_layers"});
    if (const json* cr = r.find({"compress_ratios"}); cr && cr->is_array())
      for (const auto& v : *cr) v41 = v41 || v == 1 || v == 2;
    c.family = v41 ? ModelFamily::DeepseekV41 : ModelFamily::DeepseekV4;
  }
  const bool v4 = c.family == ModelFamily::DeepseekV4;
  c.model_type = v4 ? "deepseek_v4" : "deepseek_v41";

  c.vocab_size = r.req_int({"vocab_size"}, 1, kMaxDim);
  c.hidden_size = r.req_int({"hidden_size", "dim"}, 1, kMaxDim);
  c.num_hidden_layers = int(r.req_int({"num_hidden_layers", "n_layers"}, 1, 1 << 16));
  c.num_attention_heads = int(r.req_int({"num_attention_heads", "n_heads"}, 1, 1 << 16));
  c.num_key_value_heads = int(r.int_or({"num_key_value_heads"}, 1, 1, 1 << 16));
  c.head_dim = int(r.req_int({"head_dim"}, 1, 1 << 16));
  c.q_lora_rank = int(r.req_int({"q_lora_rank"}, 1, kMaxDim));
  c.o_groups = int(r.req_int({"o_groups"}, 1, 1 << 16));
  c.o_lora_rank = int(r.req_int({"o_lora_rank"}, 1, kMaxDim));

  c.n_routed_experts = int(r.req_int({"n_routed_experts", "num_local_experts"}, 1, 1 << 20));
  c.n_shared_experts = int(r.int_or({"n_shared_experts"}, 1, 0, 1 << 10));
  c.num_experts_per_tok = int(r.req_int({"num_experts_per_tok", "n_activated_experts"}, 1, 1 << 20));
  c.moe_intermediate_size = int(r.req_int({"moe_intermediate_size", "moe_inter_dim", "intermediate_size"}, 1, kMaxDim));
  c.scoring_func = r.opt_string({"scoring_func", "score_func"}).value_or("sqrtsoftplus");
  c.norm_topk_prob = r.bool_or({"norm_topk_prob"}, true);
  c.routed_scaling_factor = r.double_or({"routed_scaling_factor", "route_scale"}, 1.5, -1e9, 1e9);
  c.swiglu_limit = r.double_or({"swiglu_limit"}, 10.0, 0, 1e30);

  c.sliding_window = int(r.req_int({"sliding_window", "window_size"}, 1, kMaxDim));
  c.index_n_heads = int(r.int_or({"index_n_heads"}, 0, 0, 1 << 16));
  c.index_head_dim = int(r.int_or({"index_head_dim"}, 0, 0, 1 << 16));
  c.index_topk = int(r.int_or({"index_topk"}, 0, 0, kMaxDim));

  c.rms_norm_eps = r.double_or({"rms_norm_eps", "norm_eps"}, 1e-6, 0, 1);
  c.max_position_embeddings = r.int_or({"max_position_embeddings"}, 1048576, 1, int64_t(1) << 50);
  c.qk_rope_head_dim = read_rope_head_dim(r, c.head_dim);
  read_rope(r, c);

  c.hc_mult = int(r.req_int({"hc_mult"}, 1, 64));
  c.hc_sinkhorn_iters = int(r.int_or({"hc_sinkhorn_iters"}, 20, 0, 1 << 20));
  c.hc_eps = r.double_or({"hc_eps"}, 1e-6, 0, 1);

  c.num_nextn_predict_layers = int(r.int_or({"num_nextn_predict_layers", "n_mtp_layers"}, v4 ? 1 : 0, 0, 1 << 10));
  // Token ids and tying live at the top in the nested layout.
  const Reader& ids = r.has({"bos_token_id"}) || !text_config ? r : top;
  c.bos_token_id = ids.int_or({"bos_token_id"}, 0, 0, INT64_MAX);
  const Reader& eos_r = r.has({"eos_token_id"}) || !text_config ? r : top;
  if (const json* eos = eos_r.find({"eos_token_id"})) {
    const json& first = eos->is_array() ? (eos->empty() ? *eos : (*eos)[0]) : *eos;
    c.eos_token_id = eos_r.to_int(first, "eos_token_id", 0, INT64_MAX);
  }
  const Reader& tie_r = r.has({"tie_word_embeddings"}) || !text_config ? r : top;
  c.tie_word_embeddings = tie_r.bool_or({"tie_word_embeddings"}, false);

  c.compress_ratios = read_compress_ratios(r, c);
  c.hash_moe = read_hash_layers(r, c);

  // Quantization: quantization_config beside text_config (V4.1) or at the top (V4); the inference config
  // says only dtype "fp8", with the block fixed by the release (128 for V4, 32 for V4.1).
  const json* qc = r.opt_object({"quantization_config"});
  const Reader* qbase = &r;
  if (!qc && text_config) {
    qc = top.opt_object({"quantization_config"});
    qbase = &top;
  }
  std::optional<Reader> qr;
  if (qc) qr.emplace(qbase->sub(*qc, "quantization_config"));
  if (qr) {
    if (const json* wbs = qr->opt_array({"weight_block_size"}))
      for (size_t i = 0; i < wbs->size(); ++i)
        c.weight_block_size.push_back(
            int(qr->to_int((*wbs)[i], "weight_block_size[" + std::to_string(i) + "]", 1, kMaxDim)));
  } else if (r.find({"dtype"}) && r.find({"dtype"})->is_string() && *r.find({"dtype"}) == "fp8") {
    int b = v4 ? 128 : 32;
    c.weight_block_size = {b, b};
    c.scale_fmt = "ue8m0";  // both releases use power-of-two E8M0 scales
  }
  if (qr) c.scale_fmt = qr->opt_string({"scale_fmt"}).value_or("");
  std::optional<std::string> ed = r.opt_string({"expert_dtype"});
  if (!ed && qr) ed = qr->opt_string({"expert_dtype"});
  if (!ed && text_config) ed = top.opt_string({"expert_dtype"});
  c.expert_dtype = ed.value_or("");

  validate(r, c);
  if (!v4) read_v41_fields(top, r, c);
  return c;
}

ModelConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read");
  return parse_config(ss.str(), path);
}

std::string config_to_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["model_type"] = c.family == ModelFamily::DeepseekV4 ? "deepseek_v4" : "deepseek_v41";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["q_lora_rank"] = c.q_lora_rank;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["scoring_func"] = c.scoring_func;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["swiglu_limit"] = c.swiglu_limit;
  std::vector<std::string> mlp;
  for (bool h : c.hash_moe) mlp.push_back(h ? "hash_moe" : "moe");
  j["mlp_layer_types"] = mlp;
  j["sliding_window"] = c.sliding_window;
  std::vector<int> ratios = c.compress_ratios;
  ratios.insert(ratios.end(), c.mtp_compress_ratios.begin(), c.mtp_compress_ratios.end());
  j["compress_ratios"] = ratios;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["compress_rope_theta"] = c.compress_rope_theta;
  if (c.yarn.enabled)
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", c.yarn.factor},
                         {"beta_fast", c.yarn.beta_fast},
                         {"beta_slow", c.yarn.beta_slow},
                         {"original_max_position_embeddings", c.yarn.original_max_position_embeddings}};
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!c.weight_block_size.empty() || !c.scale_fmt.empty()) {
    auto& q = j["quantization_config"] = nlohmann::ordered_json::object();
    if (!c.weight_block_size.empty()) q["weight_block_size"] = c.weight_block_size;
    if (!c.scale_fmt.empty()) q["scale_fmt"] = c.scale_fmt;
  }
  if (!c.expert_dtype.empty()) j["expert_dtype"] = c.expert_dtype;
  if (c.family == ModelFamily::DeepseekV41) {
    j["kv_source_layer_ids"] = c.kv_source_layer_ids;
    j["index_source_layer_ids"] = c.index_source_layer_ids;
    j["candidate_source_layer_id"] = c.candidate_source_layer_id;
    j["candidate_topk_blocks"] = c.candidate_topk_blocks;
    j["candidate_block_size"] = c.candidate_block_size;
    j["gate_temp"] = c.gate_temp;
    j["image_token_id"] = c.image_token_id;
    j["engram_layer_ids"] = c.engram_layer_ids;
    j["engram_num_embeddings"] = c.engram_num_embeddings;
    j["engram_max_ngram_size"] = c.engram_max_ngram_size;
    j["engram_vocab_size"] = c.engram_vocab_size;
    j["engram_n_heads"] = c.engram_n_heads;
    j["engram_head_dim"] = c.engram_head_dim;
    j["engram_pad_token_id"] = c.engram_pad_token_id;
    j["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
    j["dspark_block_size"] = c.dspark_block_size;
    j["dspark_noise_token_id"] = c.dspark_noise_token_id;
    j["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
    j["dspark_markov_rank"] = c.dspark_markov_rank;
    j["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
    j["dspark_num_experts_per_tok"] = c.dspark_num_experts_per_tok;
    if (c.vision.present()) {
      const VisionConfig& v = c.vision;
      j["vision_config"] = {{"num_hidden_layers", v.num_hidden_layers},   {"hidden_size", v.hidden_size},
                            {"num_attention_heads", v.num_attention_heads}, {"intermediate_size", v.intermediate_size},
                            {"patch_size", v.patch_size},                 {"downsample_ratio", v.downsample_ratio},
                            {"rope_theta", v.rope_theta},                 {"max_image_tokens", v.max_image_tokens},
                            {"min_pixels", v.min_pixels}};
      j["vision_config"]["max_wh_ratio"] = v.max_wh_ratio > 0 ? nlohmann::ordered_json(v.max_wh_ratio) : nullptr;
    }
  }
  return j.dump(2);
}

}  // namespace smelt
