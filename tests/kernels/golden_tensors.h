// One golden safetensors file with tensors by name, as float32 (F32 or BF16): shared by the kernel-level
// V4.1 golden tests (v41_golden_test.cc) and the DSpark drafter (dspark_drafter.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontends/safetensors.h"
#include "kernels/quant/reference.h"

namespace smelt::kernels::golden {

struct Tensors {
  SafetensorsFile file;
  explicit Tensors(const std::string& path) : file(SafetensorsFile::open(path)) {}

  const TensorInfo& info(const std::string& name) const {
    for (const auto& t : file.tensors())
      if (t.name == name) return t;
    throw std::runtime_error("golden tensor missing: " + name);
  }
  const uint8_t* raw(const std::string& name) const { return file.mapping()->data() + info(name).offset; }
  // F32 or BF16 tensor as float32.
  std::vector<float> floats(const std::string& name) const {
    const TensorInfo& t = info(name);
    const uint8_t* b = raw(name);
    std::vector<float> v(size_t(t.numel()));
    if (t.dtype == DType::F32) {
      std::memcpy(v.data(), b, 4 * v.size());
    } else if (t.dtype == DType::BF16) {
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        v[i] = quant::bf16_to_f32(h);
      }
    } else {
      throw std::runtime_error("not a float tensor: " + name);
    }
    return v;
  }
};

}  // namespace smelt::kernels::golden
