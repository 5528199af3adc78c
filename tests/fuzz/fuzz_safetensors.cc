// Feeds arbitrary bytes to the safetensors header parser. smelt::Error is the expected answer to bad input;
// any other exception, a crash or a sanitizer report is a bug. A file that parses must only describe bytes
// inside itself.
#include <cstdint>
#include <cstdlib>

#include "frontends/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    smelt::SafetensorsFile::validate_bytes(data, size, "fuzz.safetensors");
    auto f = smelt::SafetensorsFile::parse(smelt::MappedFile::borrow(data, size, "fuzz.safetensors"), 0);
    const uint64_t data_start = 8 + f.header_size();
    uint64_t prev_end = data_start;
    for (const auto& t : f.tensors()) {
      if (t.offset < data_start || t.offset > size || t.nbytes > size - t.offset) abort();
      if (uint64_t(t.numel()) * smelt::dtype_size(t.dtype) != t.nbytes) abort();
      if (t.nbytes && t.offset < prev_end) abort();  // file order, no overlap
      if (t.nbytes) prev_end = t.offset + t.nbytes;
    }
  } catch (const smelt::Error&) {
  }
  return 0;
}
