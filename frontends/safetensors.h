// Safetensors reader: mmap'd files, zero-copy tensor views, sharded checkpoints
// (model.safetensors.index.json), files larger than 4 GiB. Every malformed input raises smelt::Error.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontends/error.h"

namespace smelt {

enum class DType : uint8_t { F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, F8_E8M0 };

std::string_view dtype_name(DType d);           // safetensors spelling, e.g. "F8_E4M3"
size_t dtype_size(DType d);                     // bytes per element
std::optional<DType> parse_dtype(std::string_view s);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset in its file (header included)
  uint64_t nbytes = 0;
  uint32_t file = 0;    // index into Checkpoint::files()
  int64_t numel() const;
};

// Read-only memory map of a whole file (RAII).
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  // A non-owning view of bytes already in memory (tests, fuzzing); `name` stands in for the path in errors.
  static std::shared_ptr<MappedFile> borrow(const uint8_t* data, uint64_t size, const std::string& name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool owned_ = false;  // munmap on destruction
};

// One .safetensors file: parsed and validated header (dtypes known, shapes x dtype == byte ranges, ranges
// inside the file, no overlaps), tensors in file order.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path, uint32_t file_index = 0);
  // Parse from memory (fuzzing, tests). `name` is used in error messages.
  static SafetensorsFile parse(std::shared_ptr<MappedFile> file, uint32_t file_index);
  static void validate_bytes(const uint8_t* data, uint64_t size, const std::string& name);  // fuzz entry

  const std::string& path() const;
  uint64_t file_size() const;
  uint64_t header_size() const { return header_size_; }   // the JSON length (without the 8-byte prefix)
  uint64_t header_hash() const { return header_hash_; }   // FNV-1a 64 of the first 8 + header_size bytes
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::shared_ptr<MappedFile> mapping() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  uint64_t header_size_ = 0;
  uint64_t header_hash_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: the shards listed by model.safetensors.index.json, else
// model.safetensors alone when present (as transformers loads it), else every *.safetensors file in the
// directory (sorted; engram_token_map.safetensors, which is data made from the tokenizer, is not a shard).
// A name present twice is an error.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);
  // One more file beside the shards (the Engram token map): its tensors join the others (a name already
  // present is an error) and it is listed last in files().
  const SafetensorsFile& add_file(const std::string& path);

  const std::string& dir() const { return dir_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // Zero-copy bytes of a tensor (lives as long as the Checkpoint).
  std::span<const uint8_t> bytes(const TensorInfo& t) const;
  uint64_t payload_bytes() const;

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace smelt
