#include "runtime/weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include "runtime/transform.h"

namespace smelt::runtime {

namespace fb = smelt::plan;

float bf16_to_f32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float mag;
  if (exp == 0) mag = std::ldexp(float(mant), -24);  // zero and subnormals
  else if (exp == 31) mag = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else mag = std::ldexp(float(mant | 0x400), int(exp) - 25);
  uint32_t u;
  std::memcpy(&u, &mag, 4);
  u |= sign;
  std::memcpy(&mag, &u, 4);
  return mag;
}

namespace {

std::string resolve_dir(const Plan& plan, const std::string& override_dir) {
  if (!override_dir.empty()) return override_dir;
  std::string dir = plan.option("model_dir");
  if (dir.empty()) plan.fail("records no model directory; pass --model DIR");
  return dir;
}

template <typename T>
T load_as(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

Weights Weights::load(const Plan& plan, const std::string& model_dir, bool host_copies) {
  namespace fs = std::filesystem;
  Weights w;
  w.dir_ = resolve_dir(plan, model_dir);
  const fb::Plan& p = plan.fb();
  const std::string mismatch = "checkpoint " + w.dir_ + " does not match the plan: ";

  // The files: present, same size, same header (= same tensor names, dtypes, shapes and offsets).
  int n_files = p.checkpoint_files() ? int(p.checkpoint_files()->size()) : 0;
  for (int i = 0; i < n_files; ++i) {
    const fb::CheckpointFile& cf = *p.checkpoint_files()->Get(i);
    std::string rel = cf.path() ? cf.path()->str() : "", path = (fs::path(w.dir_) / rel).string();
    std::error_code ec;
    uint64_t size = fs::file_size(path, ec);
    if (ec) throw Error(mismatch + rel + " is missing");
    if (size != cf.size())
      throw Error(mismatch + rel + " changed (size " + std::to_string(size) + " bytes, the plan expects " +
                  std::to_string(cf.size()) + ")");
    SafetensorsFile f = SafetensorsFile::open(path, uint32_t(i));
    if (f.header_hash() != cf.header_hash()) throw Error(mismatch + rel + " changed (header hash differs)");
    w.files_.push_back(std::move(f));
  }

  std::vector<std::unordered_map<std::string_view, const TensorInfo*>> by_name(w.files_.size());
  for (size_t f = 0; f < w.files_.size(); ++f)
    for (const TensorInfo& t : w.files_[f].tensors()) by_name[f][t.name] = &t;

  int n_weights = p.weights() ? int(p.weights()->size()) : 0;
  w.entries_.resize(n_weights);
  for (int id = 0; id < n_weights; ++id) {
    const fb::Weight& pw = *p.weights()->Get(id);
    const SafetensorsFile& file = w.files_[pw.file()];
    std::string name = pw.name() ? pw.name()->str() : "";
    std::string source = pw.source_name() ? pw.source_name()->str() : name;
    auto bad = [&](const std::string& msg) {
      throw Error(plan.path() + ": weight " + std::to_string(id) + " (" + name + "): " + msg);
    };
    // The header hash matched, so this is the header the compiler read; a disagreement is a broken plan.
    // A weight is the whole source tensor or a view into it (one expert of a fused expert tensor).
    auto found = by_name[pw.file()].find(source);
    const TensorInfo* t = found == by_name[pw.file()].end() ? nullptr : found->second;
    if (!t) bad("tensor '" + source + "' is not in " + file.path());
    // The source tensor the transform reads (plan-validated: the transform turns source_shape into shape).
    std::vector<int64_t> source_shape = plan.weight_source_shape(id);
    int64_t n = 1, n_src = 1;
    for (int64_t d : plan.weight_shape(id)) n *= d;
    for (int64_t d : source_shape) n_src *= d;
    uint64_t nbytes = uint64_t(n_src) * dtype_size(t->dtype);
    if (int(t->dtype) != int(pw.dtype()))
      bad("the plan says dtype " + std::string(plan_dtype_name(pw.dtype())) + " but tensor '" + source + "' in " +
          file.path() + " is " + std::string(dtype_name(t->dtype)));
    if (pw.offset() < t->offset || nbytes > t->nbytes || pw.offset() - t->offset > t->nbytes - nbytes)
      bad("its bytes [" + std::to_string(pw.offset()) + ", " + std::to_string(pw.offset() + nbytes) +
          ") lie outside tensor '" + source + "' in " + file.path());

    Entry& e = w.entries_[id];
    const uint8_t* src = file.mapping()->data() + pw.offset();
    const std::vector<TransformStep>& steps = plan.weight_transform(id);
    int64_t first_row = 0;
    if (contiguous_rows(steps, &first_row)) {  // a plain slice: read it in place
      uint64_t row_bytes = dtype_size(t->dtype);
      for (size_t d = 1; d < source_shape.size(); ++d) row_bytes *= uint64_t(source_shape[d]);
      src += uint64_t(first_row) * row_bytes;
    } else if (!steps.empty()) {
      // E8M0 scales pad with 127 (2^0 = 1.0) so that a zero block stays finite; every other dtype with 0.
      uint8_t fill = pw.dtype() == fb::DType::F8_E8M0 ? 127 : 0;
      e.raw_owned = apply_transform(steps, src, source_shape, dtype_size(t->dtype), fill);
      src = e.raw_owned.data();
      w.copied_bytes_ += e.raw_owned.size();
    }
    e.stored = src;
    e.stored_bytes = uint64_t(n) * dtype_size(t->dtype);
    if (!host_copies) continue;  // the cuda backend uploads the stored bytes itself
    switch (pw.dtype()) {
      case fb::DType::F32:
        if (reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
          e.f = reinterpret_cast<const float*>(src);
          break;
        }
        e.f_owned.resize(n);
        std::memcpy(e.f_owned.data(), src, n * 4);
        break;
      case fb::DType::BF16:
        e.f_owned.resize(n);
        for (int64_t k = 0; k < n; ++k) e.f_owned[k] = bf16_to_f32(load_as<uint16_t>(src + 2 * k));
        break;
      case fb::DType::F16:
        e.f_owned.resize(n);
        for (int64_t k = 0; k < n; ++k) e.f_owned[k] = f16_to_f32(load_as<uint16_t>(src + 2 * k));
        break;
      case fb::DType::F64:
        e.f_owned.resize(n);
        for (int64_t k = 0; k < n; ++k) e.f_owned[k] = float(load_as<double>(src + 8 * k));
        break;
      case fb::DType::I32:
        e.i_owned.resize(n);
        std::memcpy(e.i_owned.data(), src, n * 4);
        break;
      case fb::DType::I64:
        e.i_owned.resize(n);
        for (int64_t k = 0; k < n; ++k) {
          int64_t v = load_as<int64_t>(src + 8 * k);
          if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
            bad("element " + std::to_string(k) + " = " + std::to_string(v) + " does not fit in I32");
          e.i_owned[k] = int32_t(v);
        }
        break;
      case fb::DType::F8_E4M3:
      case fb::DType::F8_E8M0:
      case fb::DType::I8:
        e.raw = src;  // bytes as stored; validated against the op's format when the backend prepares it
        break;
      default:
        bad("dtype " + std::string(plan_dtype_name(pw.dtype())) + " is not supported by the cpu backend yet");
    }
    if (!e.f && !e.f_owned.empty()) e.f = e.f_owned.data();
    if (!e.i_owned.empty()) e.i = e.i_owned.data();
    w.copied_bytes_ += 4 * (e.f_owned.size() + e.i_owned.size());
  }
  return w;
}

}  // namespace smelt::runtime
