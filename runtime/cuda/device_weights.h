// The plan's weights on the GPU: one allocation, each weight at a 256-byte aligned offset, holding the stored
// bytes (after the plan's transform). Float weights stay in their stored dtype (F32 / BF16; F16 and F64 become
// F32), quantized weights stay raw (F8_E4M3, F8_E8M0, I8 = packed FP4), integers become I32. Or, with a seed,
// synthetic values valid for each dtype, generated on the GPU without reading the checkpoint.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cuda/driver.h"
#include "runtime/cuda/launch.h"
#include "runtime/plan.h"

namespace smelt::runtime::cuda {

class CudaBackend;

class DeviceWeights {
 public:
  DeviceWeights() = default;
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;
  ~DeviceWeights();
  void release() noexcept;  // frees the device memory (before the context goes)

  // Sizes every weight (device dtype and bytes) from the plan; allocates nothing.
  void plan_layout(const Plan& plan);
  uint64_t bytes() const { return total_; }
  // Allocates and fills from the checkpoint (`model_dir` "" = the plan's) or, with `seed`, synthetically
  // (kernels of the plan's "backend" family, launched by `backend`).
  // Weights marked by set_tiled are repacked into tile order on the GPU (kernels/linear/gemv.cuh wtile_off) by
  // `backend`; synthetic weights are random codes in any order, so they are not. Weights marked by set_fp4_pairs
  // are rewritten in pair order (kernels/cuda/common.cuh fp4_pair_order) in place, synthetic ones too.
  void upload(const Plan& plan, const std::string& model_dir, CudaBackend& backend);
  void synthesize(const Plan& plan, uint64_t seed, CudaBackend& backend);

  const DeviceWeight& operator[](int id) const { return w_[size_t(id)]; }
  uint64_t weight_bytes(int id) const { return bytes_[size_t(id)]; }
  // After plan_layout: weight `id` (FP8 E4M3 [.., N, K] or packed FP4 I8 [.., N, K/2]) is kept in tile order.
  void set_tiled(int id);
  // After plan_layout: weight `id` (packed FP4 I8, not tiled) holds its codes in pair order.
  void set_fp4_pairs(int id);
  size_t size() const { return w_.size(); }

 private:
  std::vector<DeviceWeight> w_;
  std::vector<uint64_t> bytes_, offset_;
  uint64_t total_ = 0;
  CUdeviceptr base_ = 0;
  void allocate();
  void write_fp4_pairs(CudaBackend& backend);  // every set_fp4_pairs weight: row-major -> pair order, in place
};

// Bytes per element of a dtype on the device (I8 packed FP4: 1 byte = 2 values).
uint64_t device_elem_bytes(smelt::plan::DType d);

}  // namespace smelt::runtime::cuda
