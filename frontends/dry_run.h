// Dry run of a model directory: config.json and the safetensors headers only (data pages are never read,
// so it runs in seconds on a 500 GB checkpoint, or on a sparse one made by smelt-make-checkpoint),
// validated exactly like load_model, with the memory the weights take, broken down by component.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace smelt {

struct DryRunComponent {
  std::string name;  // see tensor_component()
  uint64_t tensors = 0;
  uint64_t bytes = 0;
};

struct DryRunReport {
  std::string model_dir;
  std::string model_type;  // "deepseek_v4" or "deepseek_v41"
  std::string layout;      // "official", "transformers", "transformers-saved"
  int num_hidden_layers = 0;
  int dspark_stages = 0;   // V4.1 DSpark / V4 MTP stages stored in the checkpoint
  uint64_t files = 0;
  uint64_t file_bytes = 0;          // the safetensors files' sizes, headers included
  uint64_t largest_file_bytes = 0;
  uint64_t tensor_count = 0;        // tensors in the checkpoint
  uint64_t payload_bytes = 0;       // their data bytes
  std::map<std::string, uint64_t> dtype_tensors;  // safetensors dtype -> tensors
  std::map<std::string, uint64_t> dtype_bytes;    // safetensors dtype -> bytes
  // Fixed order, every component listed (possibly empty); tensors and bytes sum to the totals above.
  std::vector<DryRunComponent> components;
};

DryRunReport dry_run(const std::string& model_dir);

// Human-readable table, or one JSON object (json = true).
std::string format_dry_run(const DryRunReport& r, bool json);

// The component of a tensor, from its official (canonical) name: "routed_experts", "shared_experts",
// "attention", "indexer_compressor", "engram", "dspark", "embeddings_head", "vision", "router",
// "norms_hc_other". DSpark / MTP stages count whole under "dspark".
std::string_view tensor_component(std::string_view name);
const std::vector<std::string_view>& dry_run_components();  // the names above, in report order

}  // namespace smelt
