#include "runtime/cuda/device_weights.h"

#include <algorithm>
#include <cstring>

#include "runtime/cuda/backend.h"
#include "runtime/weights.h"

namespace smelt::runtime::cuda {

namespace fb = smelt::plan;

namespace {

// The dtype a stored weight has on the device (see the header).
fb::DType device_dtype(const Plan& plan, int id) {
  fb::DType d = plan.fb().weights()->Get(id)->dtype();
  switch (d) {
    case fb::DType::F32:
    case fb::DType::BF16:
    case fb::DType::F8_E4M3:
    case fb::DType::F8_E8M0:
    case fb::DType::I8:
    case fb::DType::I32:
      return d;
    case fb::DType::F16:
    case fb::DType::F64:
      return fb::DType::F32;
    case fb::DType::I64:
      return fb::DType::I32;
    default:
      throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + plan.weight_name(id) + "): dtype " +
                  std::string(plan_dtype_name(d)) + " is not supported by the cuda backend");
  }
}

uint64_t mix(uint64_t z) {  // splitmix64 finaliser: one independent stream per weight
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t device_elem_bytes(fb::DType d) {
  switch (d) {
    case fb::DType::F32:
    case fb::DType::I32:
      return 4;
    case fb::DType::BF16:
      return 2;
    default:
      return 1;  // F8_E4M3, F8_E8M0, I8 (two FP4 values per byte; the shape counts bytes)
  }
}

DeviceWeights::~DeviceWeights() { release(); }

void DeviceWeights::release() noexcept {
  if (base_) driver().cuMemFree(base_);
  base_ = 0;
  for (auto& w : w_) w.ptr = 0;
}

void DeviceWeights::plan_layout(const Plan& plan) {
  int n = plan.fb().weights() ? int(plan.fb().weights()->size()) : 0;
  w_.assign(size_t(n), {});
  bytes_.assign(size_t(n), 0);
  offset_.assign(size_t(n), 0);
  total_ = 0;
  for (int id = 0; id < n; ++id) {
    DeviceWeight& w = w_[size_t(id)];
    w.id = id;
    w.dtype = device_dtype(plan, id);
    w.shape = plan.weight_shape(id);
    uint64_t elems = 1;
    for (int64_t s : w.shape) elems *= uint64_t(s);
    bytes_[size_t(id)] = elems * device_elem_bytes(w.dtype);
    offset_[size_t(id)] = total_;
    total_ += (bytes_[size_t(id)] + 255) / 256 * 256;
  }
}

void DeviceWeights::allocate() {
  check(driver().cuMemAlloc(&base_, std::max<uint64_t>(total_, 256)), "allocating the weights");
  for (size_t id = 0; id < w_.size(); ++id) w_[id].ptr = base_ + offset_[id];
}

void DeviceWeights::set_tiled(int id) {
  DeviceWeight& w = w_.at(size_t(id));
  if (w.tiled) return;
  const bool ok = (w.dtype == fb::DType::F8_E4M3 || w.dtype == fb::DType::I8) && w.shape.size() >= 2 &&
                  w.shape.back() % (w.dtype == fb::DType::I8 ? 16 : 32) == 0;
  if (!ok)
    throw Error("weight " + std::to_string(id) +
                ": act-quant weights must be FP8 [N, K] or FP4 [N, K/2] with K % 32 == 0");
  w.tiled = true;
}

void DeviceWeights::set_fp4_pairs(int id) {
  DeviceWeight& w = w_.at(size_t(id));
  if (w.fp4_pairs) return;
  if (w.dtype != fb::DType::I8 || w.tiled || bytes_[size_t(id)] % 4)
    throw Error("weight " + std::to_string(id) + ": FP4 pair order needs a row-major packed FP4 weight of whole words");
  w.fp4_pairs = true;
}

void DeviceWeights::write_fp4_pairs(CudaBackend& backend) {
  const int sms = std::max(backend.device().sms, 1);
  for (size_t id = 0; id < w_.size(); ++id) {
    if (!w_[id].fp4_pairs || !bytes_[id]) continue;
    unsigned long long p = w_[id].ptr, words = bytes_[id] / 4;
    void* args[] = {&p, &words};
    backend.launch_own("smelt_fp4_pair_order",
                       unsigned(std::min<uint64_t>((words + 255) / 256, uint64_t(sms) * 32)), 256, args);
  }
  check(driver().cuStreamSynchronize(backend.stream()), "writing the FP4 experts in pair order");
}

void DeviceWeights::upload(const Plan& plan, const std::string& model_dir, CudaBackend& backend) {
  Weights host = Weights::load(plan, model_dir, /*host_copies=*/false);
  allocate();
  const Driver& d = driver();
  std::vector<uint8_t> converted;
  // Tiled weights go to a staging buffer, then smelt_tile_weight writes them into place.
  uint64_t staging_bytes = 0;
  for (size_t id = 0; id < w_.size(); ++id)
    if (w_[id].tiled) staging_bytes = std::max(staging_bytes, bytes_[id]);
  struct Staging {
    CUdeviceptr p = 0;
    ~Staging() {
      if (p) driver().cuMemFree(p);
    }
  } stage;
  if (staging_bytes) check(d.cuMemAlloc(&stage.p, staging_bytes), "allocating the weight staging buffer");
  const CUdeviceptr staging = stage.p;
  for (size_t id = 0; id < w_.size(); ++id) {
    std::span<const uint8_t> src = host.stored(int(id));
    fb::DType stored = plan.fb().weights()->Get(flatbuffers::uoffset_t(id))->dtype();
    const uint8_t* p = src.data();
    uint64_t n = bytes_[id] / device_elem_bytes(w_[id].dtype);
    if (stored != w_[id].dtype) {  // F16 / F64 -> F32, I64 -> I32, element by element
      converted.resize(bytes_[id]);
      for (uint64_t k = 0; k < n; ++k) {
        if (stored == fb::DType::I64) {
          int64_t v;
          std::memcpy(&v, p + 8 * k, 8);
          if (v < INT32_MIN || v > INT32_MAX)
            throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + plan.weight_name(int(id)) +
                        "): element " + std::to_string(k) + " = " + std::to_string(v) + " does not fit in I32");
          int32_t x = int32_t(v);
          std::memcpy(converted.data() + 4 * k, &x, 4);
        } else {
          float x;
          if (stored == fb::DType::F64) {
            double v;
            std::memcpy(&v, p + 8 * k, 8);
            x = float(v);
          } else {
            uint16_t h;
            std::memcpy(&h, p + 2 * k, 2);
            x = f16_to_f32(h);
          }
          std::memcpy(converted.data() + 4 * k, &x, 4);
        }
      }
      p = converted.data();
    } else if (src.size() != bytes_[id]) {
      throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + plan.weight_name(int(id)) + "): " +
                  std::to_string(src.size()) + " stored bytes, the plan's shape needs " + std::to_string(bytes_[id]));
    }
    if (!bytes_[id]) continue;
    if (!w_[id].tiled) {
      backend.copy_to_device(w_[id].ptr, p, bytes_[id], "uploading the weights");
      continue;
    }
    // On the stream smelt_tile_weight runs on, complete before it reads (backend.cc copy_to_device).
    backend.copy_to_device(staging, p, bytes_[id], "uploading the weights");
    // [.., N, RB] bytes: every matrix of the leading dims tiled on its own (BB: bytes of a 32-block).
    const std::vector<int64_t>& s = w_[id].shape;
    unsigned long long from = staging, to = w_[id].ptr, N = uint64_t(s[s.size() - 2]), RB = uint64_t(s.back());
    unsigned long long rows = bytes_[id] / RB;
    unsigned BB = w_[id].dtype == fb::DType::I8 ? 16u : 32u;
    void* args[] = {&from, &to, &rows, &N, &RB, &BB};
    const unsigned grid = unsigned(std::min<uint64_t>((bytes_[id] / 16 + 255) / 256, 4096));
    backend.launch_own("smelt_tile_weight", grid, 256, args);
    check(d.cuStreamSynchronize(backend.stream()), "repacking the weights");  // the staging buffer is reused
  }
  write_fp4_pairs(backend);
}

void DeviceWeights::synthesize(const Plan& plan, uint64_t seed, CudaBackend& backend) {
  allocate();
  // Integer weights are routing tables (moe_route's tid2eid): values must be expert ids, so their range is
  // the gate's row count; any other integer weight is filled with zeros.
  std::vector<uint32_t> range(w_.size(), 0);
  for (const OpRef& op : plan.ops())
    if (op.name == "smelt.moe_route" && op.weights.size() > 2 && op.weights[2] >= 0 && op.weights[0] >= 0)
      range[size_t(op.weights[2])] = uint32_t(plan.weight_shape(op.weights[0])[0]);
  const float amp = 0.02f * 1.7320508f;  // uniform with standard deviation 0.02
  const unsigned block = 256;
  const int sms = std::max(backend.device().sms, 1);
  for (size_t id = 0; id < w_.size(); ++id) {
    unsigned long long p = w_[id].ptr, s = mix(seed * 0x100000001B3ull + id + 1);
    unsigned long long n = bytes_[id] / device_elem_bytes(w_[id].dtype);
    if (n == 0) continue;
    unsigned grid = unsigned(std::min<uint64_t>((n + block - 1) / block, uint64_t(sms) * 32));
    float a = amp;
    unsigned lo = 117, hi = 123;  // E8M0 scales 2^-10 .. 2^-4
    unsigned r = range[id];
    switch (w_[id].dtype) {
      case fb::DType::F32: {
        void* args[] = {&p, &n, &s, &a};
        backend.launch_own("smelt_synth_f32", grid, block, args);
        break;
      }
      case fb::DType::BF16: {
        void* args[] = {&p, &n, &s, &a};
        backend.launch_own("smelt_synth_bf16", grid, block, args);
        break;
      }
      case fb::DType::F8_E4M3: {
        void* args[] = {&p, &n, &s};
        backend.launch_own("smelt_synth_e4m3", grid, block, args);
        break;
      }
      case fb::DType::F8_E8M0: {
        void* args[] = {&p, &n, &s, &lo, &hi};
        backend.launch_own("smelt_synth_e8m0", grid, block, args);
        break;
      }
      case fb::DType::I32: {
        void* args[] = {&p, &n, &s, &r};
        backend.launch_own("smelt_synth_i32", grid, block, args);
        break;
      }
      default: {  // I8: packed FP4, every nibble valid
        void* args[] = {&p, &n, &s};
        backend.launch_own("smelt_synth_bytes", grid, block, args);
        break;
      }
    }
  }
  check(driver().cuStreamSynchronize(backend.stream()), "synthesizing the weights");
  write_fp4_pairs(backend);  // random codes either way: the same kernels and launches as real weights
}

}  // namespace smelt::runtime::cuda
