// The V4.1-only part of config.json: CSA2 source layers, Engram, DSpark, the vision tower, router
// temperature, image token; in the release's nested spelling (text_config / vision_config) and in the flat
// inference/config.json spelling (architecture spec section 1.2 lists the renames).
//
// Defaults and derivations follow transformers' V4.1 config (architecture spec section 6): KV sources
// absent -> the first layer of each run of equal nonzero ratios (the released 40-layer schedule keeps its
// released sources); index sources absent -> the KV sources (the released ones for the released schedule);
// candidate source absent -> the last KV source. Keys that fix tensor shapes and have no stated rule
// (Engram sizes, DSpark sizes and targets) are required when the feature is on.
#include <algorithm>

#include "frontends/config.h"
#include "frontends/config_reader.h"

namespace smelt::config_detail {
namespace {

const std::vector<int> kReleasedRatios = [] {
  std::vector<int> r = {0, 0};
  r.insert(r.end(), 18, 2);
  r.insert(r.end(), 20, 1);
  return r;
}();
const std::vector<int> kReleasedKvSources = {2, 8, 14, 20};
const std::vector<int> kReleasedIndexSources = {2, 8, 14, 20, 24, 28, 32, 36};

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::optional<std::vector<int>> opt_ids(const Reader& r, Names names, int64_t lo, int64_t hi) {
  auto v = opt_int_list(r, names, lo, hi);
  if (!v) return std::nullopt;
  return std::vector<int>(v->begin(), v->end());
}

// Layer ids must be listed once each, in order; the error names the key as the file spells it.
void require_increasing(const Reader& r, Names names, const std::vector<int>& ids) {
  std::string used = *names.begin();
  r.find(names, &used);
  for (size_t i = 1; i < ids.size(); ++i)
    if (ids[i] <= ids[i - 1]) r.fail("key '" + r.key(used) + "' = " + list_str(ids) + " is not strictly increasing");
}

// CSA2: which layers own the compressed KV, which run the indexer, which restricts the others.
void read_sources(const Reader& r, ModelConfig& c) {
  const int n = c.num_hidden_layers;
  const std::vector<int>& ratios = c.compress_ratios;
  const std::vector<int> released_prefix(kReleasedRatios.begin(), kReleasedRatios.begin() + std::min<size_t>(n, 40));
  const bool released = n <= 40 && ratios == released_prefix;
  // The released sources that exist in the first n layers (a config cut to fewer layers keeps the prefix's).
  auto below_n = [n](const std::vector<int>& ids) {
    std::vector<int> v;
    for (int id : ids)
      if (id < n) v.push_back(id);
    return v;
  };
  const std::vector<int> released_kv = below_n(kReleasedKvSources);

  if (auto kv = opt_ids(r, {"kv_source_layer_ids", "kv_source_layers"}, 0, n - 1)) {
    c.kv_source_layer_ids = *kv;
  } else if (released) {
    c.kv_source_layer_ids = released_kv;
  } else {
    for (int i = 0; i < n; ++i)
      if (ratios[i] > 0 && (i == 0 || ratios[i - 1] != ratios[i])) c.kv_source_layer_ids.push_back(i);
  }
  if (auto idx = opt_ids(r, {"index_source_layer_ids", "index_source_layers"}, 0, n - 1))
    c.index_source_layer_ids = *idx;
  else
    c.index_source_layer_ids =
        c.kv_source_layer_ids == kReleasedKvSources || (released && c.kv_source_layer_ids == released_kv)
            ? below_n(kReleasedIndexSources)
            : c.kv_source_layer_ids;
  if (auto cand = r.opt_int({"candidate_source_layer_id", "candidate_source_layer"}, -(int64_t(1) << 30), n - 1))
    c.candidate_source_layer_id = *cand < 0 ? -1 : int(*cand);
  else
    c.candidate_source_layer_id = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();
  c.candidate_topk_blocks = int(r.int_or({"candidate_topk_blocks"}, 2048, 1, kMaxDim));
  c.candidate_block_size = int(r.int_or({"candidate_block_size"}, 8, 1, kMaxDim));

  const auto& kv = c.kv_source_layer_ids;
  const auto& idx = c.index_source_layer_ids;
  require_increasing(r, {"kv_source_layer_ids", "kv_source_layers"}, kv);
  require_increasing(r, {"index_source_layer_ids", "index_source_layers"}, idx);
  for (int id : kv)
    if (ratios[id] == 0)
      r.fail("kv_source_layer_ids " + list_str(kv) + ": layer " + std::to_string(id) + " has compress ratio 0");
  for (int id : idx) {
    if (ratios[id] == 0)
      r.fail("index_source_layer_ids " + list_str(idx) + ": layer " + std::to_string(id) + " has compress ratio 0");
    if (kv.empty() || kv.front() > id)
      r.fail("index_source_layer_ids " + list_str(idx) + ": layer " + std::to_string(id) +
             " has no KV source at or before it to take index keys from");
  }
  for (int i = 0; i < n; ++i)
    if (ratios[i] > 0 && (kv.empty() || kv.front() > i))
      r.fail("layer " + std::to_string(i) + " has compress ratio " + std::to_string(ratios[i]) +
             " but no KV source at or before it (kv_source_layer_ids " + list_str(kv) + ")");
  if (c.candidate_source_layer_id >= 0 && !c.is_index_source(c.candidate_source_layer_id))
    r.fail("candidate_source_layer_id " + std::to_string(c.candidate_source_layer_id) +
           " is not one of index_source_layer_ids " + list_str(idx));
}

void read_engram(const Reader& r, ModelConfig& c) {
  const int n = c.num_hidden_layers;
  c.engram_layer_ids = opt_ids(r, {"engram_layer_ids"}, 0, n - 1).value_or(std::vector<int>{});
  require_increasing(r, {"engram_layer_ids"}, c.engram_layer_ids);
  const bool on = !c.engram_layer_ids.empty();
  // Shape-fixing sizes are required once a layer uses Engram.
  auto size = [&](Names names, int64_t dflt, int64_t lo, int64_t hi) {
    return on ? r.req_int(names, lo, hi) : r.int_or(names, dflt, lo, hi);
  };
  if (auto rows = opt_int_list(r, {"engram_num_embeddings"}, 1, int64_t(1) << 40)) c.engram_num_embeddings = *rows;
  else if (on) r.missing({"engram_num_embeddings"});
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    r.fail("key '" + r.key("engram_num_embeddings") + "' has " + std::to_string(c.engram_num_embeddings.size()) +
           " entries but engram_layer_ids has " + std::to_string(c.engram_layer_ids.size()));
  c.engram_max_ngram_size = int(size({"engram_max_ngram_size"}, 4, 2, 64));
  c.engram_n_heads = int(size({"engram_n_heads"}, 8, 1, 1 << 16));
  c.engram_head_dim = int(size({"engram_head_dim"}, 256, 1, kMaxDim));
  c.engram_vocab_size = r.int_or({"engram_vocab_size"}, 16000000, 1, int64_t(1) << 40);
  c.engram_pad_token_id = r.int_or({"engram_pad_token_id", "engram_pad_id"}, 2, 0, INT64_MAX);
  c.engram_compressed_vocab_size = r.int_or({"engram_compressed_vocab_size"}, 99092, 1, int64_t(1) << 40);
}

void read_dspark(const Reader& r, ModelConfig& c, const std::vector<int64_t>& all_ratios) {
  const int n = c.num_hidden_layers, stages = c.num_nextn_predict_layers;
  const bool on = stages > 0;
  // Stage ratios follow the backbone's in compress_ratios; missing ones are 0, as in transformers.
  if (all_ratios.size() > size_t(n + stages))
    r.fail("key '" + r.key("compress_ratios") + "' has " + std::to_string(all_ratios.size()) +
           " entries but num_hidden_layers + num_nextn_predict_layers is " + std::to_string(n + stages));
  c.mtp_compress_ratios.assign(stages, 0);
  for (size_t i = n; i < all_ratios.size(); ++i) {
    if (all_ratios[i] != 0)
      r.fail("key '" + r.key("compress_ratios[" + std::to_string(i) + "]") + "' = " + std::to_string(all_ratios[i]) +
             ": DSpark stages are window-only and need ratio 0");
  }
  auto size = [&](Names names, int64_t dflt, int64_t lo, int64_t hi) {
    return on ? r.req_int(names, lo, hi) : r.int_or(names, dflt, lo, hi);
  };
  c.dspark_block_size = int(r.int_or({"dspark_block_size"}, 5, 0, 1 << 16));
  c.dspark_noise_token_id = r.int_or({"dspark_noise_token_id"}, 128799, 0, INT64_MAX);
  c.dspark_markov_rank = int(size({"dspark_markov_rank"}, 256, 1, kMaxDim));
  c.dspark_n_routed_experts = int(size({"dspark_n_routed_experts"}, 128, 1, 1 << 20));
  c.dspark_num_experts_per_tok = int(size({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 3, 1, 1 << 20));
  if (auto t = opt_ids(r, {"dspark_target_layer_ids"}, 0, n - 1)) c.dspark_target_layer_ids = *t;
  else if (on) r.missing({"dspark_target_layer_ids"});
  if (!on) return;
  if (c.dspark_target_layer_ids.empty()) r.fail("key '" + r.key("dspark_target_layer_ids") + "' is empty");
  if (c.dspark_block_size < 1) r.fail("key '" + r.key("dspark_block_size") + "' must be at least 1 with DSpark stages");
  if (c.dspark_num_experts_per_tok > c.dspark_n_routed_experts)
    r.fail("dspark_num_experts_per_tok (" + std::to_string(c.dspark_num_experts_per_tok) +
           ") exceeds dspark_n_routed_experts (" + std::to_string(c.dspark_n_routed_experts) + ")");
  if (c.dspark_noise_token_id >= c.vocab_size)
    r.fail("dspark_noise_token_id " + std::to_string(c.dspark_noise_token_id) + " is not below vocab_size " +
           std::to_string(c.vocab_size));
}

// vision_config (nested, transformers' defaults for absent keys) or the flat vision_* keys.
void read_vision(const Reader& top, const Reader& r, ModelConfig& c) {
  VisionConfig v;
  if (const json* vc = top.opt_object({"vision_config"})) {
    Reader vr = top.sub(*vc, "vision_config");
    v.num_hidden_layers = int(vr.int_or({"num_hidden_layers"}, 32, 0, 1 << 16));
    v.hidden_size = int(vr.int_or({"hidden_size"}, v.hidden_size, 1, kMaxDim));
    v.num_attention_heads = int(vr.int_or({"num_attention_heads"}, v.num_attention_heads, 1, 1 << 16));
    v.intermediate_size = int(vr.int_or({"intermediate_size"}, v.intermediate_size, 1, kMaxDim));
    v.patch_size = int(vr.int_or({"patch_size"}, v.patch_size, 1, 1 << 12));
    v.downsample_ratio = int(vr.int_or({"downsample_ratio"}, v.downsample_ratio, 1, 1 << 8));
    v.rope_theta = vr.double_or({"rope_theta"}, v.rope_theta, 1e-9, 1e30);
    v.max_image_tokens = vr.int_or({"max_image_tokens"}, v.max_image_tokens, 1, int64_t(1) << 40);
    v.min_pixels = vr.int_or({"min_pixels"}, v.min_pixels, 1, int64_t(1) << 50);
    v.max_wh_ratio = vr.double_or({"max_wh_ratio"}, 0.0, 0, 1e9);
  } else {
    v.num_hidden_layers = int(r.int_or({"vision_n_layers"}, 0, 0, 1 << 16));
    v.hidden_size = int(r.int_or({"vision_dim"}, v.hidden_size, 1, kMaxDim));
    v.num_attention_heads = int(r.int_or({"vision_n_heads"}, v.num_attention_heads, 1, 1 << 16));
    v.intermediate_size = int(r.int_or({"vision_inter_dim"}, v.intermediate_size, 1, kMaxDim));
    v.patch_size = int(r.int_or({"vision_patch_size"}, v.patch_size, 1, 1 << 12));
    v.downsample_ratio = int(r.int_or({"vision_downsample_ratio"}, v.downsample_ratio, 1, 1 << 8));
    v.rope_theta = r.double_or({"vision_rope_theta"}, v.rope_theta, 1e-9, 1e30);
    v.max_image_tokens = r.int_or({"vision_max_n_token"}, v.max_image_tokens, 1, int64_t(1) << 40);
    v.min_pixels = r.int_or({"vision_min_pixels"}, v.min_pixels, 1, int64_t(1) << 50);
    v.max_wh_ratio = r.double_or({"vision_max_wh_ratio"}, 0.0, 0, 1e9);
  }
  if (!v.present()) return;  // no tower: keep the defaults, whatever the file says
  if (v.hidden_size % v.num_attention_heads)
    top.fail("vision hidden size " + std::to_string(v.hidden_size) + " is not divisible by its " +
             std::to_string(v.num_attention_heads) + " heads");
  c.vision = v;
}

}  // namespace

void read_v41_fields(const Reader& top, const Reader& r, ModelConfig& c) {
  std::vector<int64_t> all_ratios = opt_int_list(r, {"compress_ratios"}, 0, kMaxDim).value_or(std::vector<int64_t>{});
  read_sources(r, c);
  read_engram(r, c);
  read_dspark(r, c, all_ratios);
  read_vision(top, r, c);
  c.gate_temp = r.double_or({"gate_temp"}, 1.0, 1e-30, 1e30);
  // image_token_id sits beside text_config in the nested layout.
  const Reader& ir = r.has({"image_token_id"}) ? r : top;
  c.image_token_id = ir.int_or({"image_token_id"}, -1, -1, INT64_MAX);
}

}  // namespace smelt::config_detail
