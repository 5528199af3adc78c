#include "runtime/op_specs.h"

namespace smelt::runtime {

namespace {

constexpr AttrKind I = AttrKind::Int, F = AttrKind::Float, S = AttrKind::String, N = AttrKind::Ints;

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
               {{"hc_mult", I, true}, {"sinkhorn_iters", I, true}, {"hc_eps", F, true}, {"norm_eps", F, true},
                {"variant", S, false}}});
  s.push_back({OpKind::HcCollapse, "smelt.hc_collapse", {{"X"}, {"pre", 'f', true}}, {{"u"}}, {{"norm", 'f', true}}, {},
               {{"hc_mult", I, true}, {"norm_eps", F, false}, {"collapse_round", S, false}}});
  s.push_back({OpKind::HcExpand, "smelt.hc_expand", {{"X"}, {"y"}, {"post"}, {"comb"}}, {{"X'"}}, {}, {},
               {{"hc_mult", I, true}}});
  s.push_back({OpKind::HcHead, "smelt.hc_head", {{"X"}}, {{"h"}}, {{"fn"}, {"base"}, {"scale"}}, {},
               {{"hc_mult", I, true}, {"hc_eps", F, true}, {"norm_eps", F, true}}});
  s.push_back({OpKind::RmsNorm, "smelt.rms_norm", {{"x"}}, {{"y"}}, {{"weight", 'f', true}}, {},
               {{"eps", F, true}, {"groups", I, false, 1.0}}, false, true});
  s.push_back({OpKind::Linear, "smelt.linear", {{"x"}}, {{"y"}}, {{"weight", 'q'}}, {},
               {{"act_quant", S, false}, {"scale_after", F, false, 1.0}}, false, false, true});
  s.push_back({OpKind::GroupedLinear, "smelt.grouped_linear", {{"x"}}, {{"y"}}, {{"weight", 'q'}}, {},
               {{"groups", I, true}}, false, false, true});
  s.push_back({OpKind::Rope, "smelt.rope", {{"x"}}, {{"y"}}, {}, {},
               with_rope({{"heads", I, true}, {"head_dim", I, true}, {"inverse", I, false, 0.0}, {"variant", S, false}}),
               false, true});
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
                {"scale", F, true}, {"numerics", S, false}}});
  s.push_back({OpKind::MoeRoute, "smelt.moe_route", {{"x"}, {"ids", 'i', true}}, {{"weights"}, {"idx", 'i'}},
               {{"gate"}, {"bias", 'f', true}, {"tid2eid", 'i', true}}, {},
               {{"topk", I, true}, {"scoring", S, true}, {"norm_topk_prob", I, false, 1.0},
                {"route_scale", F, false, 1.0}, {"gate_temp", F, false, 1.0}}});
  s.push_back({OpKind::MoeExperts, "smelt.moe_experts", {{"x"}, {"weights"}, {"idx", 'i'}}, {{"y"}},
               {{"w1", 'q'}, {"w2", 'q'}, {"w3", 'q'}}, {},
               {{"n_experts", I, true}, {"topk", I, true}, {"swiglu_limit", F, false, 0.0}, {"act_quant", S, false},
                {"variant", S, false}, {"expert_begin", I, false, 0.0},
                {"n_routed", I, false, 0.0}},
               true, false, true});
  s.push_back({OpKind::SwigluMlp, "smelt.swiglu_mlp", {{"x"}}, {{"y"}}, {{"w1", 'q'}, {"w2", 'q'}, {"w3", 'q'}}, {},
               {{"swiglu_limit", F, false, 0.0}, {"act_quant", S, false}, {"variant", S, false}}, false, false, true});
  s.push_back({OpKind::Add, "smelt.add", {{"a"}, {"b"}}, {{"c"}}, {}, {}, {}, false, true});

  // DeepSeek-V4.1
  s.push_back({OpKind::FakeQuant, "smelt.fake_quant", {{"x"}}, {{"y"}}, {}, {},
               {{"mode", S, true}, {"heads", I, false, 1.0}, {"channels", I, false, 0.0}}, false, true});
  s.push_back({OpKind::KvCompressor, "smelt.kv_compressor", {{"x"}}, {},
               {{"wkv"}, {"wgate", 'f', true}, {"norm"}, {"wk", 'f', true}, {"k_norm", 'f', true}},
               {{"ring", 'f', true, "compressor_ring"}, {"pool", 'f', false, "compressed_pool"},
                {"index_pool", 'f', true, "index_pool"}},
               with_rope({{"ratio", I, true}, {"head_dim", I, true}, {"index_head_dim", I, true}, {"eps", F, true}})});
  s.push_back({OpKind::IndexerV41, "smelt.indexer_v41", {{"q"}, {"w"}, {"cand_in", 'i', true}},
               {{"idx", 'i'}, {"cand_out", 'i', true}}, {}, {{"index_pool", 'f', false, "index_pool"}},
               {{"heads", I, true}, {"head_dim", I, true}, {"ratio", I, true}, {"topk", I, true},
                {"candidate_blocks", I, false, 0.0}, {"candidate_block_size", I, false, 0.0},
                {"is_candidate_source", I, false, 0.0}}});
  s.push_back({OpKind::EngramHash, "smelt.engram_hash", {{"ids", 'i'}}, {{"hashes", 'i'}}, {{"token_map", 'i', true}},
               {{"history", 'f', false, "engram_history"}},
               {{"layers", N, true}, {"vocab", I, true}, {"heads", I, true}, {"max_ngram", I, true},
                {"compressed_vocab", I, true}, {"pad_id", I, true}}});
  s.push_back({OpKind::Engram, "smelt.engram", {{"X"}, {"hashes", 'i'}}, {{"X'"}},
               {{"table", '8'}, {"table_scale", 's'}, {"wkv", '8'}, {"wkv_scale", 's'}, {"q_weight"}, {"k_weight"}}, {},
               {{"layer_index", I, true}, {"hc_mult", I, true}, {"dim", I, true}, {"head_dim", I, true},
                {"cols", I, true}, {"eps", F, true}},
               false, true});
  // smelt.engram split for tensor parallelism: a rank's row range of the table (zeros elsewhere), all_reduce,
  // then the gate on the joined rows.
  s.push_back({OpKind::EngramLookup, "smelt.engram_lookup", {{"hashes", 'i'}}, {{"e"}},
               {{"table", '8'}, {"table_scale", 's'}}, {},
               {{"layer_index", I, true}, {"head_dim", I, true}, {"cols", I, true}, {"row_begin", I, true},
                {"rows_total", I, true}}});
  s.push_back({OpKind::EngramGate, "smelt.engram_gate", {{"X"}, {"e"}}, {{"X'"}},
               {{"wkv", '8', true}, {"wkv_scale", 's', true}, {"q_weight"}, {"k_weight"}}, {},
               {{"hc_mult", I, true}, {"dim", I, true}, {"head_dim", I, true}, {"cols", I, true}, {"eps", F, true}},
               false, true});
  // indexer_topk / indexer_v41 split for tensor parallelism: a rank's partial scores (its heads), all_reduce, then
  // the selection on the joined scores.
  s.push_back({OpKind::IndexerScores, "smelt.indexer_scores", {{"q"}, {"w"}}, {{"scores"}}, {},
               {{"index_pool", 'f', false, "index_pool"}},
               {{"heads", I, true}, {"head_dim", I, true}, {"ratio", I, true}, {"variant", S, true},
                {"heads_total", I, true}}});
  s.push_back({OpKind::IndexerSelect, "smelt.indexer_select", {{"scores"}, {"cand_in", 'i', true}},
               {{"idx", 'i'}, {"cand_out", 'i', true}}, {}, {},
               {{"ratio", I, true}, {"topk", I, true}, {"variant", S, true}, {"candidate_blocks", I, false, 0.0},
                {"candidate_block_size", I, false, 0.0}, {"is_candidate_source", I, false, 0.0}}});
  s.push_back({OpKind::HcMean, "smelt.hc_mean", {{"X"}}, {{"m"}}, {}, {}, {{"hc_mult", I, true}}});
  s.push_back({OpKind::Capture, "smelt.capture", {{"x"}}, {}, {}, {}, {{"name", S, true}, {"row_shape", N, false}}});
  s.push_back({OpKind::Concat, "smelt.concat", {{"x0"}, {"x1"}, {"x2", 'f', true}, {"x3", 'f', true}}, {{"y"}}, {}, {},
               {}});
  // DSpark (the dspark_draft program)
  s.push_back({OpKind::DsparkAttention, "smelt.dspark_attention", {{"q"}, {"kv"}}, {{"o"}}, {{"sink"}},
               {{"window_ring", 'f', false, "window_ring"}},
               {{"heads", I, true}, {"head_dim", I, true}, {"window", I, true}, {"scale", F, true}}});
  s.push_back({OpKind::DsparkHead, "smelt.dspark_head", {{"logits"}, {"x"}, {"ids", 'i'}},
               {{"biased_logits"}, {"draft_ids", 'i'}, {"confidence"}}, {{"markov_embed"}, {"markov_head"}, {"proj"}},
               {}, {}});

  // Collectives (docs/ops.md "Collectives"): group = global rank indices in summation / concatenation order.
  // all_reduce's x may be -1: a rank whose shard of the partial is empty contributes zeros.
  s.push_back({OpKind::AllReduce, "smelt.all_reduce", {{"x", 'f', true}}, {{"y"}}, {}, {}, {{"group", N, true}}});
  s.push_back({OpKind::AllGather, "smelt.all_gather", {{"x"}}, {{"y"}}, {}, {},
               {{"group", N, true}, {"widths", N, true}}});
  s.push_back({OpKind::Send, "smelt.send", {{"x"}}, {}, {}, {}, {{"peer", I, true}, {"tag", I, true}}});
  s.push_back({OpKind::Recv, "smelt.recv", {}, {{"y"}}, {}, {}, {{"peer", I, true}, {"tag", I, true}}});

  // Every op may round its float outputs to bf16 (V4.1: where the reference holds bf16).
  for (OpSpec& spec : s) spec.attrs.push_back({"round", S, false});
  // ... and every op may turn the model's numerics off (`numerics = "fp32"`, smelt-numerics{mode=fp32});
  // sparse_attention names its V4.1 numerics "v41" in the same attribute.
  for (OpSpec& spec : s)
    if (spec.kind != OpKind::SparseAttention) spec.attrs.push_back({"numerics", S, false});
  return s;
}

}  // namespace

const std::vector<AttrSpec>& schedule_attrs() {
  static const std::vector<AttrSpec> a = {{"stream", AttrKind::Int, false, 0.0}};
  return a;
}

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = build();
  return specs;
}

std::vector<OperandSpec> weight_specs(const OpSpec& spec, bool scaled) {
  if (!scaled) return spec.weights;
  std::vector<OperandSpec> out;
  for (const OperandSpec& w : spec.weights) {
    out.push_back(w);
    out.push_back({w.name + ".scale", 's', true});
  }
  return out;
}

bool is_collective(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::AllGather || k == OpKind::Send || k == OpKind::Recv;
}

const OpSpec* find_op_spec(std::string_view name) {
  for (const OpSpec& s : op_specs())
    if (name == s.name) return &s;
  return nullptr;
}

}  // namespace smelt::runtime
