#include "runtime/op_specs.h"

namespace smelt::runtime {

namespace {

constexpr AttrKind I = AttrKind::Int, F = AttrKind::Float, S = AttrKind::String;

// YaRN and RoPE attributes shared by rope and compressor (defaults: transformers' rope_parameters).
std::vector<AttrSpec> with_rope(std::vector<AttrSpec> attrs) {
  attrs.push_back({"rope_dim", I, true});
  attrs.push_back({"theta", F, true});
  attrs.push_back({"yarn_factor", F, false, 0.0});
  attrs.push_back({"yarn_beta_fast", F, false, 32.0});
  attrs.push_back({"yarn_beta_slow", F, false, 1.0});
  attrs.push_back({"yarn_original_max_pos", I, false, 65536.0});
  return attrs;
}

std::vector<OpSpec> build() {
  std::vector<OpSpec> s;
  s.push_back({OpKind::Embedding, "smelt.embedding", {{"ids", 'i'}}, {{"x"}}, {{"embed"}}, {}, {}});
  s.push_back({OpKind::HcInit, "smelt.hc_init", {{"x"}}, {{"X"}}, {}, {}, {{"hc_mult", I, true}}});
  s.push_back({OpKind::HcMix, "smelt.hc_mix", {{"X"}}, {{"pre"}, {"post"}, {"comb"}},
               {{"fn"}, {"base"}, {"scale"}}, {},
               {{"hc_mult", I, true}, {"sinkhorn_iters", I, true}, {"hc_eps", F, true}, {"norm_eps", F, true}}});
  s.push_back({OpKind::HcCollapse, "smelt.hc_collapse", {{"X"}, {"pre"}}, {{"u"}}, {}, {},
               {{"hc_mult", I, true}}});
  s.push_back({OpKind::HcExpand, "smelt.hc_expand", {{"X"}, {"y"}, {"post"}, {"comb"}}, {{"X'"}}, {}, {},
               {{"hc_mult", I, true}}});
  s.push_back({OpKind::HcHead, "smelt.hc_head", {{"X"}}, {{"h"}}, {{"fn"}, {"base"}, {"scale"}}, {},
               {{"hc_mult", I, true}, {"hc_eps", F, true}, {"norm_eps", F, true}}});
  s.push_back({OpKind::RmsNorm, "smelt.rms_norm", {{"x"}}, {{"y"}}, {{"weight", 'f', true}}, {},
               {{"eps", F, true}, {"groups", I, false, 1.0}}, false, true});
  s.push_back({OpKind::Linear, "smelt.linear", {{"x"}}, {{"y"}}, {{"weight"}}, {}, {}});
  s.push_back({OpKind::GroupedLinear, "smelt.grouped_linear", {{"x"}}, {{"y"}}, {{"weight"}}, {},
               {{"groups", I, true}}});
  s.push_back({OpKind::Rope, "smelt.rope", {{"x"}}, {{"y"}}, {}, {},
               with_rope({{"heads", I, true}, {"head_dim", I, true}, {"inverse", I, false, 0.0}}), false, true});
  s.push_back({OpKind::WindowKvUpdate, "smelt.window_kv_update", {{"kv"}}, {}, {},
               {{"window_ring", 'f', false, "window_ring"}}, {{"window", I, true}}});
  s.push_back({OpKind::Compressor, "smelt.compressor", {{"x"}}, {}, {{"wkv"}, {"wgate"}, {"ape"}, {"norm"}},
               {{"compressor_ring", 'f', false, "compressor_ring"}, {"pool", 'f', false, "pool"}},
               with_rope({{"ratio", I, true}, {"head_dim", I, true}, {"overlap", I, false, 0.0}, {"eps", F, true}})});
  s.push_back({OpKind::IndexerTopk, "smelt.indexer_topk", {{"q"}, {"w"}}, {{"idx", 'i'}}, {},
               {{"index_pool", 'f', false, "index_pool"}},
               {{"heads", I, true}, {"head_dim", I, true}, {"ratio", I, true}, {"topk", I, true}}});
  s.push_back({OpKind::SparseAttention, "smelt.sparse_attention", {{"q"}, {"kv"}, {"idx", 'i', true}}, {{"o"}},
               {{"sink"}},
               {{"window_ring", 'f', false, "window_ring"}, {"pool", 'f', true, "compressed_pool"}},
               {{"heads", I, true}, {"head_dim", I, true}, {"window", I, true}, {"ratio", I, false, 0.0},
                {"scale", F, true}}});
  s.push_back({OpKind::MoeRoute, "smelt.moe_route", {{"x"}, {"ids", 'i', true}}, {{"weights"}, {"idx", 'i'}},
               {{"gate"}, {"bias", 'f', true}, {"tid2eid", 'i', true}}, {},
               {{"topk", I, true}, {"scoring", S, true}, {"norm_topk_prob", I, false, 1.0},
                {"route_scale", F, false, 1.0}}});
  s.push_back({OpKind::MoeExperts, "smelt.moe_experts", {{"x"}, {"weights"}, {"idx", 'i'}}, {{"y"}},
               {{"w1"}, {"w2"}, {"w3"}}, {},
               {{"n_experts", I, true}, {"topk", I, true}, {"swiglu_limit", F, false, 0.0}}, true});
  s.push_back({OpKind::SwigluMlp, "smelt.swiglu_mlp", {{"x"}}, {{"y"}}, {{"w1"}, {"w2"}, {"w3"}}, {},
               {{"swiglu_limit", F, false, 0.0}}});
  s.push_back({OpKind::Add, "smelt.add", {{"a"}, {"b"}}, {{"c"}}, {}, {}, {}, false, true});
  return s;
}

}  // namespace

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = build();
  return specs;
}

const OpSpec* find_op_spec(std::string_view name) {
  for (const OpSpec& s : op_specs())
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace smelt::runtime
