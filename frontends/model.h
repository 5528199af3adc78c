// The model description the compiler imports: config + every tensor the model needs, keyed by its
// canonical (official release layout) name, as zero-copy views into the checkpoint. Accepts the official
// layout (layers.{i}.attn.wq_a.weight, ffn.experts.{e}.w1.weight, ...) and the transformers layout
// (model.layers.{i}.self_attn.q_a_proj.weight, fused mlp.experts.gate_up_proj, ...).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "frontends/config.h"
#include "frontends/safetensors.h"

namespace smelt {

enum class TensorLayout { Official, Transformers };

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
