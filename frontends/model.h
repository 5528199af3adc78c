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
// DeepSeek-V4.1 (model_v41.cc) is read in the official layout only: its DSpark stages (mtp.{s}.*), Engram
// tables (FP8 rows + one scale per 32 channels) and vision tower are part of the model; V4's MTP stages
// are ignored.
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
// V4.1 with Engram: the compressed token map (see attach_engram_token_map) is taken from
// `engram_token_map` when given, else from `dir`/engram_token_map.safetensors when that file exists.
ModelDescription load_model(const std::string& dir, const std::string& engram_token_map = {});

// The Engram compressed-token map (architecture spec section 2.6, step 1) is made from the tokenizer, not
// stored in the release (scripts/make_engram_token_map.py writes it): a safetensors file holding
// `engram.token_map` I32 or I64 [vocab_size], metadata `compressed_vocab_size`. Checked here: dtype, shape,
// every value in [0, engram_compressed_vocab_size) and every compressed id used (the map numbers its keys
// in order of first appearance), the metadata (when present) equal to the config's. The file joins the
// checkpoint (last in checkpoint.files(), so the plan records its size and header hash) and the tensor
// joins m.tensors. `path` empty: the default file in m.dir, skipped when absent. Errors name the file.
inline constexpr const char* kEngramTokenMapFile = "engram_token_map.safetensors";
inline constexpr const char* kEngramTokenMapTensor = "engram.token_map";
void attach_engram_token_map(ModelDescription& m, const std::string& path);

// How the release stores a tensor. load_model also accepts a plain floating-point tensor of the logical
// shape in place of any quantized form (a dequantized checkpoint), and FP8 in place of FP4.
enum class Storage : uint8_t {
  BF16,
  F32,
  Integer,   // I64 or I32 (V4 tid2eid)
  Fp8Block,  // F8_E4M3 [out, in] + F8_E8M0 `.scale` [ceil(out/b0), ceil(in/b1)], b = weight_block_size
  Fp4Row,    // I8 [out, in/2] (two E2M1 codes a byte) + F8_E8M0 `.scale` [out, ceil(in/32)]
  Fp8Row,    // F8_E4M3 [rows, dim] + F8_E8M0 `.scale` [rows, ceil(dim/32)] (Engram tables)
};
std::string_view storage_name(Storage s);

// The canonical tensors the config requires, with expected (logical) shapes and their release storage
// (used by load_model, the dry run and smelt-make-checkpoint). For a quantized storage the name is the
// `.weight`; its `.scale` is implied.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool integer = false;  // tid2eid
  Storage storage = Storage::BF16;
};
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c);
std::vector<ExpectedTensor> expected_tensors_v41(const ModelConfig& c);  // model_v41.cc; V4.1 only

// The tensors as the release writes them: every quantized weight followed by its scale, with stored
// dtypes and shapes. `group` names the release shard group of the tensor (see smelt-make-checkpoint):
// "vision", "embed", "layers.{i}", "head", "mtp.{s}" or "engram.{i}".
struct StoredTensor {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  std::string group;
  uint64_t nbytes() const;
};
std::vector<StoredTensor> release_tensors(const ModelConfig& c);
// The stored shape of a scale for weight `w` (logical shape) in storage `s`.
std::vector<int64_t> scale_shape(const ModelConfig& c, Storage s, const std::vector<int64_t>& w);

}  // namespace smelt
