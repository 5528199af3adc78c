// The model description the compiler imports: config + every tensor the model needs, keyed by its
// canonical (official release layout) name, as zero-copy views into the checkpoint. Accepts three layouts:
//  - Official: the release's names (layers.{i}.attn.wq_a.weight, ffn.experts.{e}.w1.weight, embed.weight);
//  - Transformers: transformers' module names (model.layers.{i}.self_attn.q_a_proj.weight, fused
//    mlp.experts.gate_up_proj [E, 2F, D] and down_proj [E, D, F], split here into per-expert views);
//  - TransformersSaved: what transformers 5.17 save_pretrained writes (it undoes its renames): the official
//    per-layer names under "model.", except attn.kv_norm saved as attn.norm, and the globals
//    model.embed_tokens.weight, model.norm.weight, model.hc_head.hc_{fn,base,scale}, head.weight.
// Official checkpoints may store linears as FP8 (F8_E4M3 weight + F8_E8M0 `.scale`, blocks from
// weight_block_size) and routed experts as FP4 (I8 [out, in/2] + `.scale` [out, in/32]); the scales are
// then listed too, under the canonical name with `.scale` in place of `.weight`.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/config.h"
#include "frontends/safetensors.h"

namespace smelt {

enum class TensorLayout { Official, Transformers, TransformersSaved };
std::string_view layout_name(TensorLayout l);  // "official", "transformers", "transformers-saved"

struct ModelDescription {
  std::string dir;
  ModelConfig config;
  Checkpoint checkpoint;
  TensorLayout layout = TensorLayout::Official;
  // canonical name -> view (for split fused tensors: a sub-range of the stored tensor, name = source name)
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> source_names;  // canonical -> name in the checkpoint

  const TensorInfo& tensor(const std::string& canonical) const;  // throws smelt::Error if absent
  bool has(const std::string& canonical) const { return tensors.count(canonical) != 0; }
};

// Loads config.json + checkpoint from `dir`, detects the layout, resolves and validates every tensor the
// config implies (presence, dtype class, exact shape). Errors name the file and the tensor.
ModelDescription load_model(const std::string& dir);

// The canonical tensors the config requires, with expected shapes (used by load_model and the dry run).
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool integer = false;  // tid2eid
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c);

}  // namespace smelt
