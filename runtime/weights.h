// The weights of a plan, mapped from the checkpoint files the plan lists and converted for the cpu
// backend: float weights (F32/BF16/F16/F64) to F32, integer weights (I64/I32) to I32. An F32 weight that
// is 4-byte aligned in its file is used in place (zero-copy); every other weight gets its own copy.
// A weight with a load transform (docs/plan.md) is built from its source tensor first; a contiguous
// rows(a:b) slice stays in place. Quantized storage (F8_E4M3, I8 = packed FP4, F8_E8M0 scales) stays raw bytes in the mapping: the
// kernels read the release formats directly.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "frontends/safetensors.h"
#include "runtime/plan.h"

namespace smelt::runtime {

class Weights {
 public:
  // `model_dir`: the directory given on the command line (--model), or "" for the plan's "model_dir" option.
  // Each checkpoint file must have the size and header hash the plan recorded; each weight must be the
  // tensor the plan names at the offset, dtype and shape the plan says.
  // `host_copies` false (the cuda backend): validate and map only, convert nothing; stored() gives the bytes.
  static Weights load(const Plan& plan, const std::string& model_dir, bool host_copies = true);

  const float* f32(int id) const { return entries_[id].f; }      // nullptr for integer weights
  const int32_t* i32(int id) const { return entries_[id].i; }    // nullptr for float weights
  const uint8_t* raw(int id) const { return entries_[id].raw; }   // F8_E4M3 / I8 / F8_E8M0 bytes, else nullptr
  // The weight's bytes in its stored dtype and the plan's shape (after the load transform), for any dtype.
  std::span<const uint8_t> stored(int id) const { return {entries_[id].stored, size_t(entries_[id].stored_bytes)}; }
  const std::string& model_dir() const { return dir_; }
  uint64_t copied_bytes() const { return copied_bytes_; }        // memory taken by conversions

 private:
  struct Entry {
    const float* f = nullptr;
    const int32_t* i = nullptr;
    const uint8_t* raw = nullptr;
    std::vector<float> f_owned;
    std::vector<int32_t> i_owned;
    const uint8_t* stored = nullptr;  // stored bytes after the transform (in the mapping or raw_owned)
    uint64_t stored_bytes = 0;
    std::vector<uint8_t> raw_owned;  // the result of a load transform (Weight.transform), before conversion
  };
  std::string dir_;
  std::vector<SafetensorsFile> files_;  // keeps the mappings alive
  std::vector<Entry> entries_;
  uint64_t copied_bytes_ = 0;
};

// Element conversions, exposed for tests.
float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);

}  // namespace smelt::runtime
