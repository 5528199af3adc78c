// A checkpoint with real headers and no data: every safetensors file carries the names, dtypes, shapes and
// offsets the config implies (release storage, see release_tensors), and its data section is a hole
// (ftruncate; nothing written), plus model.safetensors.index.json and a copy of config.json. For testing
// loaders, dry runs and planning on full-size models without the disk: the real V4.1-Flash comes out at
// 510 GB apparent size and a few MB on disk.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace smelt {

struct SparseShard {
  std::string file;  // model-000kk-of-000nn.safetensors
  uint64_t tensors = 0;
  uint64_t payload_bytes = 0;
  uint64_t file_bytes = 0;  // header included
};

struct SparseCheckpointSummary {
  std::vector<SparseShard> shards;
  uint64_t tensors = 0;
  uint64_t payload_bytes = 0;  // = metadata.total_size of the index
};

// shards == 0: the release's split, one file per unit in this order: the vision tower + aligner (when
// present), embed + image_*, each backbone layer (without its Engram module), head + norm, each DSpark
// stage, each Engram module (its table, wkv and q/k weights). For V4.1-Flash that is the release's 48
// shards, byte for byte the same sizes. Within a file, tensors are in the order the safetensors library
// writes (dtype, then name), Engram tables first.
// shards > 0: that many files, the same tensor sequence cut into runs of about equal bytes.
// `progress` (may be empty) is called after each file. Throws smelt::Error naming the file at fault.
SparseCheckpointSummary write_sparse_checkpoint(const std::string& config_path, const std::string& out_dir,
                                                int shards = 0,
                                                const std::function<void(const SparseShard&, size_t index,
                                                                         size_t count)>& progress = {});

}  // namespace smelt
