// The weights of a plan, mapped from the checkpoint files the plan lists and converted for the cpu
// backend: float weights (F32/BF16/F16/F64) to F32, integer weights (I64/I32) to I32. An F32 weight that
// is 4-byte aligned in its file is used in place (zero-copy); every other weight gets its own copy.
// Quantized storage (F8_E4M3, I8 = packed FP4, F8_E8M0 scales) stays raw bytes in the mapping: the
// kernels read the release formats directly.
#pragma once
#include <cstdint>
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
  static Weights load(const Plan& plan, const std::string& model_dir);

  const float* f32(int id) const { return entries_[id].f; }      // nullptr for integer weights
  const int32_t* i32(int id) const { return entries_[id].i; }    // nullptr for float weights
  const uint8_t* raw(int id) const { return entries_[id].raw; }   // F8_E4M3 / I8 / F8_E8M0 bytes, else nullptr
  const std::string& model_dir() const { return dir_; }
  uint64_t copied_bytes() const { return copied_bytes_; }        // memory taken by conversions

 private:
  struct Entry {
    const float* f = nullptr;
    const int32_t* i = nullptr;
    const uint8_t* raw = nullptr;
    std::vector<float> f_owned;
    std::vector<int32_t> i_owned;
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
