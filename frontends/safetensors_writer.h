// Safetensors writer: the runtime writes logits files with it, tests write checkpoints (good and bad).
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "frontends/safetensors.h"

namespace smelt {

struct WriteTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // not owned; must stay alive during the call
};

// Writes tensors contiguously in the given order, `__metadata__` first when non-empty. Checks that every
// tensor's bytes match shape x dtype and that names are unique; writes to `path.tmp` and renames, so a
// failed write never leaves a half file under `path`. Throws smelt::Error naming the file and the tensor.
void write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Lower level, for writers that place the data themselves (sparse or streamed files, deliberately bad files
// in tests): one header entry with its data_offsets relative to the data section, written as given.
struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};
// The 8-byte little-endian length followed by the JSON header, padded with spaces to a multiple of 8 so
// that the data section is aligned. No consistency checks.
std::vector<uint8_t> encode_safetensors_header(const std::vector<HeaderEntry>& entries,
                                               const std::map<std::string, std::string>& metadata = {});

template <class T>
std::span<const uint8_t> as_byte_span(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

}  // namespace smelt
