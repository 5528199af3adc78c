// The tensors of a DeepSeek-V4.1 checkpoint (architecture spec section 3.3): names are the reference
// module names, shapes follow from the config, storage is the release's (FP8 32x32-block linears, FP4
// routed experts, FP8 Engram tables with one scale per 32 channels of a row, BF16/F32 elsewhere).
// Cross-checked: for the real V4.1-Flash config these rules give the release's 96,085 tensors and
// 510,286,023,000 payload bytes (tests/frontend/dry_run_test.cc).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "frontends/model.h"

namespace smelt {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

}  // namespace

std::string_view storage_name(Storage s) {
  switch (s) {
    case Storage::BF16: return "bf16";
    case Storage::F32: return "f32";
    case Storage::Integer: return "integer";
    case Storage::Fp8Block: return "fp8-block";
    case Storage::Fp4Row: return "fp4-row";
    case Storage::Fp8Row: return "fp8-row";
  }
  return "?";
}

std::vector<int64_t> scale_shape(const ModelConfig& c, Storage s, const std::vector<int64_t>& w) {
  if (w.size() != 2) return {};
  switch (s) {
    case Storage::Fp8Block: {
      int64_t b0 = c.weight_block_size.size() == 2 ? c.weight_block_size[0] : 128;
      int64_t b1 = c.weight_block_size.size() == 2 ? c.weight_block_size[1] : 128;
      return {ceil_div(w[0], b0), ceil_div(w[1], b1)};
    }
    case Storage::Fp4Row:
    case Storage::Fp8Row: return {w[0], ceil_div(w[1], 32)};
    default: return {};
  }
}

std::vector<ExpectedTensor> expected_tensors_v41(const ModelConfig& c) {
  if (c.family != ModelFamily::DeepseekV41) throw Error("model_type '" + c.model_type + "' is not deepseek_v41");
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, Q = c.q_lora_rank;
  const int64_t G = c.o_groups, R = c.o_lora_rank, n = c.hc_mult, V = c.vocab_size;
  const int64_t F = c.moe_intermediate_size, FS = F * c.n_shared_experts;
  const int64_t HI = c.index_n_heads, dI = c.index_head_dim;
  const bool quantized = !c.weight_block_size.empty();
  const Storage linear = quantized ? Storage::Fp8Block : Storage::BF16;
  const Storage expert = c.expert_dtype == "fp4"                                   ? Storage::Fp4Row
                         : c.expert_dtype == "fp8" || (c.expert_dtype.empty() && quantized) ? Storage::Fp8Block
                                                                                  : Storage::BF16;
  const Storage table = quantized ? Storage::Fp8Row : Storage::BF16;
  const bool vision = c.vision.present();

  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, Storage s = Storage::BF16) {
    out.push_back({std::move(name), std::move(shape), false, s});
  };
  add("embed.weight", {V, D});
  add("head.weight", {V, D});
  add("norm.weight", {D});

  const int64_t mix = (2 + n) * n;  // pre, post and the n x n residual mix
  // One block: a backbone layer (layer >= 0) or a DSpark stage (layer -1, own expert count).
  auto block = [&](const std::string& p, int layer, int ratio, int64_t E) {
    add(p + "attn_norm.weight", {D});
    add(p + "ffn_norm.weight", {D});
    for (const char* site : {"attn", "ffn"}) {
      add(p + "hc_" + site + "_fn", {mix, n * D}, Storage::F32);
      add(p + "hc_" + site + "_base", {mix}, Storage::F32);
      add(p + "hc_" + site + "_scale", {3}, Storage::F32);
    }
    add(p + "attn.attn_sink", {H}, Storage::F32);
    add(p + "attn.q_norm.weight", {Q});
    add(p + "attn.kv_norm.weight", {hd});
    add(p + "attn.wq_a.weight", {Q, D}, linear);
    add(p + "attn.wq_b.weight", {H * hd, Q}, linear);
    add(p + "attn.wkv.weight", {hd, D}, linear);
    add(p + "attn.wo_a.weight", {G * R, H * hd / G}, linear);
    add(p + "attn.wo_b.weight", {D, G * R}, linear);
    if (layer >= 0 && c.is_kv_source(layer)) {
      add(p + "attn.compressor.wkv.weight", {hd, D});
      if (ratio > 1) add(p + "attn.compressor.wgate.weight", {hd, D});  // ratio 1 has no gate
      add(p + "attn.compressor.norm.weight", {hd});
      add(p + "attn.indexer.wk.weight", {dI, hd});
      add(p + "attn.indexer.k_norm.weight", {dI});
    }
    if (layer >= 0 && c.is_index_source(layer)) {
      add(p + "attn.indexer.wq_b.weight", {HI * dI, Q}, linear);
      add(p + "attn.indexer.weights_proj.weight", {HI, D});
    }
    if (int e = layer >= 0 ? c.engram_index(layer) : -1; e >= 0) {
      const int64_t ed = c.engram_head_dim;
      add(p + "engram.embed.weight", {c.engram_num_embeddings[e], ed}, table);
      add(p + "engram.wkv.weight", {(n + 1) * D, (c.engram_max_ngram_size - 1) * c.engram_n_heads * ed}, linear);
      add(p + "engram.q_weight", {n, D});
      add(p + "engram.k_weight", {n, D});
    }
    add(p + "ffn.gate.weight", {E, D});
    add(p + "ffn.gate.bias", {E}, Storage::F32);
    if (vision) add(p + "ffn.gate.bias_vl", {E}, Storage::F32);  // image tokens route with their own bias
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = p + "ffn.experts." + std::to_string(e) + ".";
      add(ep + "w1.weight", {F, D}, expert);
      add(ep + "w2.weight", {D, F}, expert);
      add(ep + "w3.weight", {F, D}, expert);
    }
    if (FS > 0) {
      add(p + "ffn.shared_experts.w1.weight", {FS, D}, linear);
      add(p + "ffn.shared_experts.w2.weight", {D, FS}, linear);
      add(p + "ffn.shared_experts.w3.weight", {FS, D}, linear);
    }
  };
  for (int i = 0; i < c.num_hidden_layers; ++i)
    block("layers." + std::to_string(i) + ".", i, c.compress_ratios.at(i), c.n_routed_experts);

  const int stages = c.num_nextn_predict_layers;
  for (int s = 0; s < stages; ++s) {
    const std::string p = "mtp." + std::to_string(s) + ".";
    block(p, -1, c.mtp_compress_ratios.at(s), c.dspark_n_routed_experts);
    if (s == 0) {  // the first stage reads the captured target-layer streams
      add(p + "main_proj.weight", {D, int64_t(c.dspark_target_layer_ids.size()) * D}, linear);
      add(p + "main_norm.weight", {D});
    }
    if (s == stages - 1) {  // the last stage carries the output norm and the Markov / confidence heads
      const int64_t rank = c.dspark_markov_rank;
      add(p + "norm.weight", {D});
      add(p + "markov_head.embed.weight", {V, rank});
      add(p + "markov_head.head.weight", {V, rank});
      add(p + "confidence_head.proj.weight", {1, D + rank});
    }
  }

  if (vision) {
    const VisionConfig& v = c.vision;
    const int64_t vd = v.hidden_size, vi = v.intermediate_size, ps = v.patch_size, ds = v.downsample_ratio;
    for (const char* s : {"image_start", "image_end", "image_newline"}) add(s, {D});
    add("aligner.w1.weight", {D, vd * ds * ds});
    add("aligner.w1.bias", {D});
    add("aligner.w2.weight", {D, D});
    add("aligner.w2.bias", {D});
    add("vision.patch_embed.proj.weight", {vd, 3 * ps * ps});
    add("vision.patch_embed.proj.bias", {vd});
    add("vision.norm.weight", {vd});
    for (int b = 0; b < v.num_hidden_layers; ++b) {
      const std::string p = "vision.blocks." + std::to_string(b) + ".";
      add(p + "attn.wqkv.weight", {3 * vd, vd});
      add(p + "attn.wqkv.bias", {3 * vd});
      add(p + "attn.wo.weight", {vd, vd});
      add(p + "attn.wo.bias", {vd});
      add(p + "mlp.w1.weight", {2 * vi, vd});  // gate and up, fused
      add(p + "mlp.w2.weight", {vd, vi});
      add(p + "norm1.weight", {vd});
      add(p + "norm2.weight", {vd});
    }
  }
  return out;
}

uint64_t StoredTensor::nbytes() const {
  uint64_t b = dtype_size(dtype);
  for (int64_t d : shape) b *= uint64_t(d);
  return b;
}

std::vector<StoredTensor> release_tensors(const ModelConfig& c) {
  if (c.family != ModelFamily::DeepseekV41)
    throw Error("model_type '" + c.model_type + "': only the DeepSeek-V4.1 release layout can be written");
  auto group_of = [](const std::string& name) -> std::string {
    if (starts_with(name, "vision.") || starts_with(name, "aligner.")) return "vision";
    if (name == "embed.weight" || starts_with(name, "image_")) return "embed";
    if (name == "head.weight" || name == "norm.weight") return "head";
    size_t dot = name.find('.', name.find('.') + 1);  // "layers.{i}" / "mtp.{s}"
    std::string unit = name.substr(0, dot);
    if (starts_with(name, "layers.") && name.compare(dot, 8, ".engram.") == 0) return "engram." + unit.substr(7);
    return unit;
  };
  std::vector<StoredTensor> out;
  for (const ExpectedTensor& e : expected_tensors_v41(c)) {
    const std::string group = group_of(e.name);
    switch (e.storage) {
      case Storage::BF16: out.push_back({e.name, DType::BF16, e.shape, group}); break;
      case Storage::F32: out.push_back({e.name, DType::F32, e.shape, group}); break;
      case Storage::Integer: out.push_back({e.name, DType::I64, e.shape, group}); break;
      case Storage::Fp8Block:
      case Storage::Fp8Row:
      case Storage::Fp4Row: {
        std::vector<int64_t> w = e.shape;
        if (e.storage == Storage::Fp4Row) w[1] = (w[1] + 1) / 2;
        out.push_back({e.name, e.storage == Storage::Fp4Row ? DType::I8 : DType::F8_E4M3, w, group});
        std::string scale = e.name.substr(0, e.name.size() - 7) + ".scale";
        out.push_back({scale, DType::F8_E8M0, scale_shape(c, e.storage, e.shape), group});
        break;
      }
    }
  }
  return out;
}

void attach_engram_token_map(ModelDescription& m, const std::string& given) {
  namespace fs = std::filesystem;
  const ModelConfig& c = m.config;
  const bool engram = c.family == ModelFamily::DeepseekV41 && !c.engram_layer_ids.empty();
  std::string path = given;
  if (path.empty()) {
    path = (fs::path(m.dir) / kEngramTokenMapFile).string();
    if (!engram || !fs::is_regular_file(path)) return;  // none beside the checkpoint: the importer decides
  } else {
    if (!fs::is_regular_file(path)) throw Error(path + ": no such Engram token map file");
    if (!engram) throw Error(path + ": an Engram token map was given, but " + m.dir + "/config.json has no Engram layers");
    // A plan names its files relative to the model directory (the runtime refuses anything else).
    const fs::path rel = fs::absolute(path).lexically_normal().lexically_relative(fs::absolute(m.dir).lexically_normal());
    if (rel.empty() || *rel.begin() == "..")
      throw Error(path + ": the Engram token map must lie inside the model directory " + m.dir +
                  " (plans name their files relative to it): move or copy it there");
  }
  const std::string how = " (scripts/make_engram_token_map.py MODEL_DIR makes it from tokenizer.json)";
  const SafetensorsFile& f = m.checkpoint.add_file(path);
  const TensorInfo* t = nullptr;
  for (const TensorInfo& x : f.tensors()) {
    if (x.name != kEngramTokenMapTensor)
      throw Error(path + ": unexpected tensor '" + x.name + "' in the Engram token map file (only '" +
                  kEngramTokenMapTensor + "' belongs there)");
    t = &x;
  }
  if (!t) throw Error(path + ": no tensor '" + kEngramTokenMapTensor + "'" + how);
  const std::string where = path + ": tensor '" + kEngramTokenMapTensor + "'";
  if (t->dtype != DType::I32 && t->dtype != DType::I64)
    throw Error(where + " has dtype " + std::string(dtype_name(t->dtype)) + " but must be I32 or I64");
  if (t->shape != std::vector<int64_t>{c.vocab_size})
  {
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw Error(where + " has shape [" + shape + "] but config.json's vocab_size needs [" +
                std::to_string(c.vocab_size) + "]");
  }
  const int64_t K = c.engram_compressed_vocab_size;
  const auto& meta = f.metadata();
  for (const auto& [key, want] : {std::pair<std::string, int64_t>{"compressed_vocab_size", K}, {"vocab_size", c.vocab_size}}) {
    auto it = meta.find(key);
    if (it == meta.end()) continue;
    if (it->second != std::to_string(want))
      throw Error(path + ": metadata " + key + " is '" + it->second + "' but config.json has " +
                  (key == "vocab_size" ? "vocab_size " : "engram_compressed_vocab_size ") + std::to_string(want) +
                  " (a map made for another model)");
  }
  // The map numbers its keys in order of first appearance, so it uses every id in [0, K) exactly as
  // the config counts them; anything else is a map of another tokenizer.
  std::span<const uint8_t> bytes = m.checkpoint.bytes(*t);
  const size_t es = dtype_size(t->dtype);
  std::vector<bool> used(size_t(std::max<int64_t>(K, 0)));
  int64_t n_used = 0;
  for (int64_t k = 0; k < c.vocab_size; ++k) {
    int64_t v;
    if (es == 4) {
      int32_t x;
      std::memcpy(&x, bytes.data() + size_t(k) * 4, 4);
      v = x;
    } else {
      std::memcpy(&v, bytes.data() + size_t(k) * 8, 8);
    }
    if (v < 0 || v >= K)
      throw Error(where + " maps token " + std::to_string(k) + " to " + std::to_string(v) +
                  ", outside [0, engram_compressed_vocab_size " + std::to_string(K) + ")");
    if (!used[size_t(v)]) used[size_t(v)] = true, ++n_used;
  }
  if (n_used != K)
    throw Error(where + " uses " + std::to_string(n_used) + " compressed ids but config.json has "
                "engram_compressed_vocab_size " + std::to_string(K) + " (a map of another tokenizer?)");
  m.tensors[kEngramTokenMapTensor] = *t;
  m.source_names[kEngramTokenMapTensor] = t->name;
}

}  // namespace smelt
