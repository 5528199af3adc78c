// Model description: which tensors a DeepSeek-V4 config implies (canonical = official release names; V4.1's
// list is in model_v41.cc),
// where each one lives in the checkpoint for each of the three name layouts, and the checks that every
// one is present with the right dtype class and exact shape.
#include "frontends/model.h"

#include <filesystem>
#include <set>

namespace smelt {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// Per-layer names: official suffix -> transformers module suffix (under model.layers.{i}.).
struct Rename {
  std::string_view official, module;
};
constexpr Rename kLayerRenames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"hc_attn_fn", "attn_hc.fn"},
    {"hc_attn_base", "attn_hc.base"},
    {"hc_attn_scale", "attn_hc.scale"},
    {"hc_ffn_fn", "ffn_hc.fn"},
    {"hc_ffn_base", "ffn_hc.base"},
    {"hc_ffn_scale", "ffn_hc.scale"},
    {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
    {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
    {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
    {"attn.wkv.weight", "self_attn.kv_proj.weight"},
    {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
    {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
    {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
    {"attn.attn_sink", "self_attn.sinks"},
    {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
    {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
    {"attn.compressor.ape", "self_attn.compressor.position_bias"},
    {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
    {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
    {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
    {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
    {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
    {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
    {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
    {"ffn.gate.weight", "mlp.gate.weight"},
    {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
    {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
    {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
};
// Globals: official -> transformers module name -> transformers saved name.
struct GlobalRename {
  std::string_view official, module, saved;
};
constexpr GlobalRename kGlobalRenames[] = {
    {"embed.weight", "model.embed_tokens.weight", "model.embed_tokens.weight"},
    {"head.weight", "lm_head.weight", "head.weight"},
    {"norm.weight", "model.norm.weight", "model.norm.weight"},
    {"hc_head_fn", "model.hc_head.hc_fn", "model.hc_head.hc_fn"},
    {"hc_head_base", "model.hc_head.hc_base", "model.hc_head.hc_base"},
    {"hc_head_scale", "model.hc_head.hc_scale", "model.hc_head.hc_scale"},
};

// Splits "layers.{i}.rest" into i and rest.
bool split_layer(const std::string& canonical, int* layer, std::string* rest) {
  if (!starts_with(canonical, "layers.")) return false;
  size_t dot = canonical.find('.', 7);
  if (dot == std::string::npos) return false;
  *layer = std::stoi(canonical.substr(7, dot - 7));
  *rest = canonical.substr(dot + 1);
  return true;
}

// "ffn.experts.{e}.w{1,2,3}.weight" -> e and which (1, 2, 3).
bool split_expert(const std::string& rest, int* expert, int* which) {
  if (!starts_with(rest, "ffn.experts.") || !ends_with(rest, ".weight")) return false;
  size_t dot = rest.find('.', 12);
  if (dot == std::string::npos || rest.size() != dot + 10 || rest[dot + 1] != 'w') return false;
  *expert = std::stoi(rest.substr(12, dot - 12));
  *which = rest[dot + 2] - '0';
  return true;
}

// Name of a canonical tensor in a layout ("" for routed experts in the fused transformers layout).
std::string source_name(const std::string& canonical, TensorLayout layout) {
  if (layout == TensorLayout::Official) return canonical;
  for (const auto& g : kGlobalRenames)
    if (canonical == g.official) return std::string(layout == TensorLayout::Transformers ? g.module : g.saved);
  int layer, e, w;
  std::string rest;
  if (!split_layer(canonical, &layer, &rest)) return canonical;
  std::string prefix = "model.layers." + std::to_string(layer) + ".";
  if (layout == TensorLayout::TransformersSaved)
    return prefix + (rest == "attn.kv_norm.weight" ? std::string("attn.norm.weight") : rest);
  if (split_expert(rest, &e, &w)) return "";
  for (const auto& r : kLayerRenames)
    if (rest == r.official) return prefix + std::string(r.module);
  return "";
}

TensorLayout detect_layout(const Checkpoint& ck) {
  bool official = ck.find("embed.weight") || ck.find("layers.0.attn_norm.weight");
  bool module = ck.find("lm_head.weight") || ck.find("model.layers.0.input_layernorm.weight");
  bool saved = ck.find("model.layers.0.attn_norm.weight") || (ck.find("head.weight") && ck.find("model.embed_tokens.weight"));
  int n = int(official) + int(module) + int(saved);
  if (n == 0)
    throw Error(ck.dir() + ": cannot tell the tensor layout: none of 'embed.weight' (official), 'lm_head.weight' "
                           "(transformers) or 'head.weight' with 'model.embed_tokens.weight' (transformers-saved)");
  if (n > 1) throw Error(ck.dir() + ": the checkpoint mixes official and transformers tensor names");
  return official ? TensorLayout::Official : module ? TensorLayout::Transformers : TensorLayout::TransformersSaved;
}

bool is_float(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16 || d == DType::F64; }
bool is_int(DType d) { return d == DType::I64 || d == DType::I32; }

}  // namespace

std::string_view layout_name(TensorLayout l) {
  switch (l) {
    case TensorLayout::Official: return "official";
    case TensorLayout::Transformers: return "transformers";
    case TensorLayout::TransformersSaved: return "transformers-saved";
  }
  return "?";
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  if (c.family == ModelFamily::DeepseekV41) return expected_tensors_v41(c);
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, Q = c.q_lora_rank;
  const int64_t G = c.o_groups, R = c.o_lora_rank, n = c.hc_mult, E = c.n_routed_experts;
  const int64_t F = c.moe_intermediate_size, FS = F * c.n_shared_experts, V = c.vocab_size;
  const int64_t HI = c.index_n_heads, dI = c.index_head_dim;
  std::vector<ExpectedTensor> out;
  // V4: the storage says which quantized forms the loader accepts (FP8 blocks for every 2-D linear, FP4 for
  // routed experts); the exact V4 release dtypes are not modelled (no writer for V4).
  auto add = [&](std::string name, std::vector<int64_t> shape, bool integer = false) {
    Storage s = integer ? Storage::Integer : Storage::BF16;
    if (!integer && shape.size() == 2 && ends_with(name, ".weight") && name != "embed.weight" && name != "head.weight")
      s = name.find(".ffn.experts.") != std::string::npos ? Storage::Fp4Row : Storage::Fp8Block;
    out.push_back({std::move(name), std::move(shape), integer, s});
  };
  add("embed.weight", {V, D});
  add("head.weight", {V, D});
  add("norm.weight", {D});
  add("hc_head_fn", {n, n * D});
  add("hc_head_base", {n});
  add("hc_head_scale", {1});
  const int64_t mix = (2 + n) * n;  // pre, post and the n x n residual mix
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const int ratio = c.compress_ratios.at(i);
    add(p + "attn_norm.weight", {D});
    add(p + "ffn_norm.weight", {D});
    for (const char* site : {"attn", "ffn"}) {
      add(p + "hc_" + site + "_fn", {mix, n * D});
      add(p + "hc_" + site + "_base", {mix});
      add(p + "hc_" + site + "_scale", {3});
    }
    add(p + "attn.wq_a.weight", {Q, D});
    add(p + "attn.q_norm.weight", {Q});
    add(p + "attn.wq_b.weight", {H * hd, Q});
    add(p + "attn.wkv.weight", {hd, D});
    add(p + "attn.kv_norm.weight", {hd});
    add(p + "attn.wo_a.weight", {G * R, H * hd / G});
    add(p + "attn.wo_b.weight", {D, G * R});
    add(p + "attn.attn_sink", {H});
    if (ratio > 0) {
      const int64_t cw = ratio == 4 ? 2 : 1;  // CSA windows overlap: two halves per entry
      add(p + "attn.compressor.wkv.weight", {cw * hd, D});
      add(p + "attn.compressor.wgate.weight", {cw * hd, D});
      add(p + "attn.compressor.ape", {ratio, cw * hd});
      add(p + "attn.compressor.norm.weight", {hd});
    }
    if (ratio == 4) {
      add(p + "attn.indexer.wq_b.weight", {HI * dI, Q});
      add(p + "attn.indexer.weights_proj.weight", {HI, D});
      add(p + "attn.indexer.compressor.wkv.weight", {2 * dI, D});
      add(p + "attn.indexer.compressor.wgate.weight", {2 * dI, D});
      add(p + "attn.indexer.compressor.ape", {4, 2 * dI});
      add(p + "attn.indexer.compressor.norm.weight", {dI});
    }
    add(p + "ffn.gate.weight", {E, D});
    if (c.hash_moe.at(i)) add(p + "ffn.gate.tid2eid", {V, c.num_experts_per_tok}, true);
    else add(p + "ffn.gate.bias", {E});
    for (int64_t e = 0; e < E; ++e) {
      std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      add(ep + "w1.weight", {F, D});
      add(ep + "w2.weight", {D, F});
      add(ep + "w3.weight", {F, D});
    }
    if (FS > 0) {
      add(p + "ffn.shared_experts.w1.weight", {FS, D});
      add(p + "ffn.shared_experts.w2.weight", {D, FS});
      add(p + "ffn.shared_experts.w3.weight", {FS, D});
    }
  }
  return out;
}

const TensorInfo& ModelDescription::tensor(const std::string& canonical) const {
  auto it = tensors.find(canonical);
  if (it == tensors.end()) throw Error(dir + ": the model has no tensor '" + canonical + "'");
  return it->second;
}

ModelDescription load_model(const std::string& dir, const std::string& engram_token_map) {
  ModelDescription m;
  m.dir = dir;
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  m.config = load_config(config_path);
  const bool v41 = m.config.family == ModelFamily::DeepseekV41;
  m.checkpoint = Checkpoint::open(dir);
  m.layout = detect_layout(m.checkpoint);
  if (v41 && m.layout != TensorLayout::Official)
    throw Error(dir + ": DeepSeek-V4.1 checkpoints must use the release's tensor names (found the " +
                std::string(layout_name(m.layout)) + " layout)");
  const Checkpoint& ck = m.checkpoint;
  const ModelConfig& c = m.config;
  std::set<std::string> used;  // checkpoint names accounted for

  auto file_of = [&](const TensorInfo& t) { return ck.files()[t.file].path(); };
  auto describe = [&](const std::string& src, const std::string& canonical) {
    return "tensor '" + src + "'" + (src == canonical ? "" : " (canonical '" + canonical + "')");
  };
  auto check_shape = [&](const TensorInfo& t, const std::string& canonical, const std::vector<int64_t>& want) {
    if (t.shape != want)
      throw Error(file_of(t) + ": " + describe(t.name, canonical) + " has shape " + shape_str(t.shape) +
                  " but the config needs " + shape_str(want));
  };
  auto add = [&](const std::string& canonical, const TensorInfo& t) {
    m.tensors[canonical] = t;
    m.source_names[canonical] = t.name;
    used.insert(t.name);
  };
  // FP8 / FP4 weights of the release carry a `.scale` beside them, in the shape the storage implies.
  auto add_scale = [&](const std::string& canonical, const TensorInfo& w, Storage storage,
                       const std::vector<int64_t>& logical) {
    std::string base = w.name.substr(0, w.name.size() - 7);  // strip ".weight"
    const TensorInfo* s = ck.find(base + ".scale");
    if (!s) throw Error(file_of(w) + ": tensor '" + w.name + "' is " + std::string(dtype_name(w.dtype)) +
                        " but '" + base + ".scale' is missing");
    std::string cs = canonical.substr(0, canonical.size() - 7) + ".scale";
    if (s->dtype != DType::F8_E8M0 && s->dtype != DType::F32)
      throw Error(file_of(*s) + ": tensor '" + s->name + "' has dtype " + std::string(dtype_name(s->dtype)) +
                  " but a block scale must be F8_E8M0 or F32");
    std::vector<int64_t> want = scale_shape(c, storage, logical);
    if (s->shape != want) {
      std::string blocks = storage == Storage::Fp8Block && c.weight_block_size.size() == 2
                               ? std::to_string(c.weight_block_size[0]) + "x" + std::to_string(c.weight_block_size[1]) +
                                     " blocks"
                               : "one scale per 32 inputs of a row";
      throw Error(file_of(*s) + ": scale '" + s->name + "' has shape " + shape_str(s->shape) + " but weight '" +
                  w.name + "' " + shape_str(w.shape) + " (" + std::string(dtype_name(w.dtype)) + ", " + blocks +
                  ") needs " + shape_str(want));
    }
    add(cs, *s);
  };

  std::set<int> fused_done;
  for (const ExpectedTensor& e : expected_tensors(c)) {
    int layer = -1, expert = -1, which = 0;
    std::string rest;
    bool is_expert = split_layer(e.name, &layer, &rest) && split_expert(rest, &expert, &which);
    if (is_expert && m.layout == TensorLayout::Transformers) {
      // Fused experts: gate_up_proj [E, 2F, D] (rows 0..F-1 gate = w1, F..2F-1 up = w3), down_proj [E, D, F].
      const int64_t E = c.n_routed_experts, F = c.moe_intermediate_size, D = c.hidden_size;
      std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
      const TensorInfo* gu = ck.find(p + "gate_up_proj");
      const TensorInfo* dn = ck.find(p + "down_proj");
      for (const auto& [t, nm] : {std::pair{gu, "gate_up_proj"}, std::pair{dn, "down_proj"}}) {
        if (!t)
          throw Error(dir + ": missing tensor '" + e.name + "' (transformers name '" + p + nm + "', fused)");
        if (!is_float(t->dtype))
          throw Error(file_of(*t) + ": tensor '" + t->name + "' has dtype " + std::string(dtype_name(t->dtype)) +
                      " but must be floating point (F32, BF16, F16 or F64)");
      }
      if (!fused_done.count(layer)) {
        check_shape(*gu, gu->name, {E, 2 * F, D});
        check_shape(*dn, dn->name, {E, D, F});
        fused_done.insert(layer);
        used.insert(gu->name);
        used.insert(dn->name);
      }
      const TensorInfo* src = which == 2 ? dn : gu;
      const uint64_t es = dtype_size(src->dtype), block = uint64_t(F * D) * es;
      TensorInfo v = *src;
      v.shape = e.shape;
      v.nbytes = block;
      v.offset = src->offset + (which == 2 ? uint64_t(expert) * block : uint64_t(expert) * 2 * block +
                                                                             (which == 3 ? block : 0));
      m.tensors[e.name] = v;
      m.source_names[e.name] = src->name;
      continue;
    }
    const std::string src = source_name(e.name, m.layout);
    const TensorInfo* t = ck.find(src);
    if (!t && e.name == "head.weight" && c.tie_word_embeddings) {
      t = ck.find(source_name("embed.weight", m.layout));  // tied: the head is the embedding
      if (t) {
        m.tensors[e.name] = *t;
        m.source_names[e.name] = t->name;
        continue;
      }
    }
    if (!t) {
      std::string msg = dir + ": missing tensor '" + e.name + "'";
      if (m.layout != TensorLayout::Official)
        msg += " (" + std::string(layout_name(m.layout)) + " name '" + src + "')";
      throw Error(msg);
    }
    const bool fp8_ok = e.storage == Storage::Fp8Block || e.storage == Storage::Fp4Row || e.storage == Storage::Fp8Row;
    if (e.integer) {
      if (!is_int(t->dtype))
        throw Error(file_of(*t) + ": " + describe(src, e.name) + " has dtype " + std::string(dtype_name(t->dtype)) +
                    " but must be an integer (I64 or I32)");
      check_shape(*t, e.name, e.shape);
    } else if (t->dtype == DType::F8_E4M3 && fp8_ok) {
      check_shape(*t, e.name, e.shape);  // FP8 [out, in] (or an FP8 expert in place of FP4) + its scale
      add_scale(e.name, *t, e.storage == Storage::Fp8Row ? Storage::Fp8Row : Storage::Fp8Block, e.shape);
    } else if (t->dtype == DType::I8 && e.storage == Storage::Fp4Row) {
      // FP4: two E2M1 codes per byte, one scale per row per 32 inputs.
      if (e.shape[1] % 2) throw Error(file_of(*t) + ": " + describe(src, e.name) + " is FP4 but its input dim is odd");
      check_shape(*t, e.name, {e.shape[0], e.shape[1] / 2});
      add_scale(e.name, *t, Storage::Fp4Row, e.shape);
    } else {
      if (!is_float(t->dtype))
        throw Error(file_of(*t) + ": " + describe(src, e.name) + " has dtype " + std::string(dtype_name(t->dtype)) +
                    " but must be floating point (F32, BF16, F16 or F64)");
      check_shape(*t, e.name, e.shape);
    }
    add(e.name, *t);
  }

  // Anything left over means the config and the checkpoint disagree (V4's MTP stages are not used; V4.1's
  // DSpark stages are part of the model).
  for (const auto& [name, t] : ck.tensors()) {
    if (used.count(name)) continue;
    if (!v41 && (starts_with(name, "mtp.") || name.find(".mtp.") != std::string::npos || starts_with(name, "model.mtp.")))
      continue;
    throw Error(file_of(t) + ": unexpected tensor '" + name + "' that the config does not use (check " +
                (v41 ? "compress_ratios, the KV/index source layers, engram_layer_ids, num_nextn_predict_layers, "
                       "vision_config and the expert counts)"
                     : "compress_ratios, num_hash_layers and the expert count)"));
  }
  if (v41 || !engram_token_map.empty()) attach_engram_token_map(m, engram_token_map);
  return m;
}

}  // namespace smelt
