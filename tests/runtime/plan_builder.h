// Builds small plans for the runtime tests the way the compiler would: a temporary safetensors checkpoint
// (written with frontends/safetensors_writer.h) plus a plan flatbuffer that points into it.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "frontends/safetensors.h"
#include "frontends/safetensors_writer.h"
#include "schemas/plan_file.h"
#include "schemas/plan_generated.h"

namespace smelt::runtime::testing {

struct AttrArg {
  std::string name;
  char kind = 'i';  // i, f, s or n (ints): the field the value is written to
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
};
inline AttrArg I(const std::string& n, int64_t v) { return {n, 'i', v, 0.0, {}, {}}; }
inline AttrArg F(const std::string& n, double v) { return {n, 'f', 0, v, {}, {}}; }
inline AttrArg S(const std::string& n, const std::string& v) { return {n, 's', 0, 0.0, v, {}}; }
inline AttrArg N(const std::string& n, std::vector<int64_t> v) { return {n, 'n', 0, 0.0, {}, std::move(v)}; }

struct OpArg {
  std::string name;
  int layer = -1;
  std::vector<int> inputs, outputs, weights, states;
  std::vector<AttrArg> attrs;
};

// A further entry point (plan format 1.1), e.g. dspark_draft.
struct ProgramArg {
  std::string name;
  std::vector<OpArg> ops;
  std::vector<int> inputs, outputs;
};

// A fresh directory under the system temp dir, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("smelt_rt_") + (info ? info->name() : "x") + "_" + std::to_string(::getpid()) +
                       "_" + std::to_string(counter++);
    path = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string str(const std::string& file = "") const { return file.empty() ? path.string() : (path / file).string(); }
};

// Deterministic uniform numbers (own arithmetic, so every platform draws the same values).
struct Uniform {
  std::mt19937_64 gen;
  explicit Uniform(uint64_t seed) : gen(seed) {}
  double next() { return double(gen() >> 11) * 0x1.0p-53; }
  std::vector<float> vec(size_t n, double lo, double hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(lo + (hi - lo) * next());
    return v;
  }
};

class PlanBuilder {
 public:
  int64_t max_rows = 8, max_seq_len = 64;
  int token_ids = -1, logits = -1;
  std::map<std::string, std::string> options;
  bool record_model_dir = true;
  std::string checkpoint_name = "model.safetensors";
  std::string recorded_path;  // the checkpoint path written into the plan, when not checkpoint_name
  std::vector<OpArg> ops;
  std::vector<ProgramArg> programs;
  std::string model_config_json = R"({"vocab_size": 0})";
  uint64_t arena_bytes = 0;  // grows with every buffer; tests may shrink it

  // A float weight. BF16 weights keep the upper 16 bits of each value, so values() is exactly what the
  // runtime will see after its BF16 -> F32 conversion.
  int weight(const std::string& name, std::vector<int64_t> shape, std::vector<float> values, DType dtype = DType::F32) {
    W w{name, dtype, shape, {}, values, {}};
    if (dtype == DType::BF16) {
      for (float& v : w.values) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u &= 0xffff0000u;
        std::memcpy(&v, &u, 4);
        uint16_t hi = uint16_t(u >> 16);
        w.bytes.push_back(uint8_t(hi & 0xff));
        w.bytes.push_back(uint8_t(hi >> 8));
      }
    } else {
      w.bytes.resize(values.size() * 4);
      std::memcpy(w.bytes.data(), values.data(), w.bytes.size());
    }
    weights_.push_back(std::move(w));
    return int(weights_.size()) - 1;
  }
  // A weight stored as raw bytes (F8_E4M3, F8_E8M0, I8 packed FP4, ...), written to the checkpoint as is.
  int raw_weight(const std::string& name, std::vector<int64_t> shape, DType dtype, std::vector<uint8_t> bytes) {
    W w{name, dtype, shape, std::move(bytes), {}, {}};
    weights_.push_back(std::move(w));
    return int(weights_.size()) - 1;
  }
  int int_weight(const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> values) {
    W w{name, DType::I64, shape, {}, {}, values};
    w.bytes.resize(values.size() * 8);
    std::memcpy(w.bytes.data(), values.data(), w.bytes.size());
    weights_.push_back(std::move(w));
    return int(weights_.size()) - 1;
  }
  // A plan weight that is a view into another (F32) weight's tensor, starting at element `first`, like one
  // expert of a fused expert tensor. Not written to the checkpoint itself.
  int view(const std::string& name, int source, int64_t first, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const W& s = weights_[source];
    W w{name, s.dtype, shape, {}, {}, {}};
    for (int64_t k = 0; k < n && first + k < int64_t(s.values.size()); ++k) w.values.push_back(s.values[first + k]);
    w.view_of = source;
    w.view_first = first;
    weights_.push_back(std::move(w));
    return int(weights_.size()) - 1;
  }
  // A plan weight made from weight `source`'s stored tensor by a load transform (docs/plan.md "Weight
  // transforms", format 1.2): Weight.source_shape = the source's shape, `shape` = the result. Not written to
  // the checkpoint itself. `values` (optional) are the F32 values the test expects the runtime to make.
  int transformed(const std::string& name, int source, const std::string& transform, std::vector<int64_t> shape,
                  std::vector<float> values = {}) {
    const W& s = weights_[source];
    W w{name, s.dtype, shape, {}, std::move(values), {}};
    w.view_of = source;
    w.transform = transform;
    weights_.push_back(std::move(w));
    return int(weights_.size()) - 1;
  }
  const std::vector<float>& values(int id) const { return weights_[id].values; }
  const std::vector<int64_t>& int_values(int id) const { return weights_[id].ints; }

  // A buffer of its own arena bytes (no reuse: the tests do not depend on the memory planner).
  int buffer(const std::string& name, int64_t row_elems, plan::DType dtype = plan::DType::F32) {
    buffers_.push_back({name, dtype, row_elems, arena_bytes});
    arena_bytes += (uint64_t(max_rows) * row_elems * 4 + 63) / 64 * 64;
    return int(buffers_.size()) - 1;
  }
  // A buffer placed on the arena bytes of buffer `of` (what a memory planner does for disjoint lifetimes).
  int alias(const std::string& name, int64_t row_elems, int of, plan::DType dtype = plan::DType::F32) {
    buffers_.push_back({name, dtype, row_elems, buffers_[of].offset});
    return int(buffers_.size()) - 1;
  }
  int state(const std::string& name, const std::string& kind, int layer, std::vector<int64_t> shape) {
    states_.push_back({name, kind, layer, shape});
    return int(states_.size()) - 1;
  }
  void op(OpArg o) { ops.push_back(std::move(o)); }

  // Writes the checkpoint into `model_dir` and returns the plan flatbuffer that points into it.
  std::vector<uint8_t> payload(const std::string& model_dir) {
    std::string ckpt = model_dir + "/" + checkpoint_name;
    std::vector<WriteTensor> tensors;
    for (const W& w : weights_)
      if (w.view_of < 0) tensors.push_back({w.name, w.dtype, w.shape, w.bytes});
    write_safetensors(ckpt, tensors);
    SafetensorsFile file = SafetensorsFile::open(ckpt);
    std::map<std::string, uint64_t> offset;
    for (const TensorInfo& t : file.tensors()) offset[t.name] = t.offset;

    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<plan::KeyValue>> opts;
    auto all_options = options;
    if (record_model_dir) all_options["model_dir"] = model_dir;
    for (const auto& [k, v] : all_options) opts.push_back(plan::CreateKeyValueDirect(fbb, k.c_str(), v.c_str()));
    std::vector<flatbuffers::Offset<plan::CheckpointFile>> files = {
        plan::CreateCheckpointFileDirect(fbb, (recorded_path.empty() ? checkpoint_name : recorded_path).c_str(),
                                         file.file_size(), file.header_hash())};
    std::vector<flatbuffers::Offset<plan::Weight>> weights;
    for (const W& w : weights_) {
      const std::string& source = w.view_of < 0 ? w.name : weights_[w.view_of].name;
      uint64_t at = offset[source] + (w.view_of < 0 ? 0 : uint64_t(w.view_first) * dtype_size(w.dtype));
      const std::vector<int64_t>* source_shape = w.transform.empty() ? nullptr : &weights_[w.view_of].shape;
      weights.push_back(plan::CreateWeightDirect(fbb, w.name.c_str(), source.c_str(), 0, at, plan::DType(int(w.dtype)),
                                                 &w.shape, w.transform.c_str(), source_shape));
    }
    std::vector<flatbuffers::Offset<plan::Buffer>> buffers;
    for (const B& b : buffers_) buffers.push_back(plan::CreateBufferDirect(fbb, b.name.c_str(), b.dtype, b.row_elems, b.offset));
    std::vector<flatbuffers::Offset<plan::State>> states;
    for (const St& s : states_)
      states.push_back(plan::CreateStateDirect(fbb, s.name.c_str(), s.kind.c_str(), s.layer, plan::DType::F32, &s.shape));
    auto make_ops = [&](const std::vector<OpArg>& list) {
    std::vector<flatbuffers::Offset<plan::Op>> op_offsets;
    for (const OpArg& o : list) {
      std::vector<flatbuffers::Offset<plan::Attr>> attrs;
      for (const AttrArg& a : o.attrs) {
        auto name = fbb.CreateString(a.name);
        auto s = a.kind == 's' ? fbb.CreateString(a.s) : flatbuffers::Offset<flatbuffers::String>();
        auto ints = a.kind == 'n' ? fbb.CreateVector(a.ints) : flatbuffers::Offset<flatbuffers::Vector<int64_t>>();
        plan::AttrBuilder ab(fbb);
        ab.add_name(name);
        if (a.kind == 'i') ab.add_i(a.i);
        if (a.kind == 'f') ab.add_f(a.f);
        if (a.kind == 's') ab.add_s(s);
        if (a.kind == 'n') ab.add_ints(ints);
        attrs.push_back(ab.Finish());
      }
      std::string kernel = "cpu." + o.name.substr(o.name.find('.') + 1);
      op_offsets.push_back(plan::CreateOpDirect(fbb, o.name.c_str(), kernel.c_str(), o.layer, &o.inputs, &o.outputs,
                                                &o.weights, &o.states, &attrs));
    }
    return op_offsets;
    };
    std::vector<flatbuffers::Offset<plan::Op>> op_offsets = make_ops(ops);
    std::vector<flatbuffers::Offset<plan::Program>> program_offsets;
    for (const ProgramArg& pr : programs) {
      auto pops = make_ops(pr.ops);
      program_offsets.push_back(plan::CreateProgramDirect(fbb, pr.name.c_str(), &pops, &pr.inputs, &pr.outputs));
    }
    auto root = plan::CreatePlanDirect(fbb, "smelt-test 0.1", "deepseek_v4", model_config_json.c_str(), "cpu", "{}",
                                       "test-pipeline", &opts, &files, &weights, &buffers, &states, &op_offsets,
                                       token_ids, logits, max_rows, max_seq_len, arena_bytes, nullptr,
                                       programs.empty() ? nullptr : &program_offsets);
    plan::FinishPlanBuffer(fbb, root);
    return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }
  std::vector<uint8_t> file(const std::string& model_dir) {
    std::vector<uint8_t> p = payload(model_dir);
    // Like the compiler: format 1.1 only when the plan has programs, 1.2 with load transforms.
    bool transforms = false;
    for (const W& w : weights_) transforms = transforms || !w.transform.empty();
    return plan_file::wrap(p, plan_file::kVersionMajor, transforms ? 2 : programs.empty() ? 0 : 1);
  }
  // Writes model_dir/<checkpoint> and `plan_path`.
  void write(const std::string& plan_path, const std::string& model_dir) { write_bytes(plan_path, file(model_dir)); }

  static void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }

 private:
  struct W {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    std::vector<float> values;
    std::vector<int64_t> ints;
    int view_of = -1;
    int64_t view_first = 0;
    std::string transform = "";  // with view_of: a load transform of that tensor
  };
  struct B {
    std::string name;
    plan::DType dtype;
    int64_t row_elems;
    uint64_t offset;
  };
  struct St {
    std::string name, kind;
    int layer;
    std::vector<int64_t> shape;
  };
  std::vector<W> weights_;
  std::vector<B> buffers_;
  std::vector<St> states_;
};

// One rank of a hand-built partitioned plan (format 1.2); the fields default to what `plan`'s position says.
struct RankArg {
  PlanBuilder* plan = nullptr;
  int index = -1, stage = -1, tp_rank = -1;
  double share = 0.0;
  std::string arch = "cpu";
};

// A partitioned plan file whose rank k runs ranks[k].plan. Every rank's builder writes its weights to the same
// checkpoint file (build them with identical base weights so that the bytes, and the header hash, agree).
inline std::vector<uint8_t> partitioned_file(std::vector<RankArg> ranks, int tp, int pp, const std::string& model_dir) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<plan::Rank>> offsets;
  for (size_t k = 0; k < ranks.size(); ++k) {
    RankArg& r = ranks[k];
    int index = r.index >= 0 ? r.index : int(k);
    std::vector<uint8_t> nested = r.plan->payload(model_dir);
    offsets.push_back(plan::CreateRankDirect(fbb, index, r.stage >= 0 ? r.stage : index / tp,
                                             r.tp_rank >= 0 ? r.tp_rank : index % tp, r.arch.c_str(),
                                             r.share > 0 ? r.share : 1.0 / tp, &nested));
  }
  std::vector<flatbuffers::Offset<plan::KeyValue>> opts = {
      plan::CreateKeyValueDirect(fbb, "model_dir", model_dir.c_str())};
  auto root = plan::CreatePlanDirect(fbb, "smelt-test 0.1", "deepseek_v4", R"({"vocab_size": 0})", "cpu", "{}",
                                     "test-pipeline", &opts, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 0, 0, 0,
                                     nullptr, nullptr, tp, pp, &offsets);
  plan::FinishPlanBuffer(fbb, root);
  std::vector<uint8_t> payload(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return plan_file::wrap(payload, plan_file::kVersionMajor, 2);
}

// The smallest useful model: embedding -> rms_norm -> linear head. V = 11, D = 6.
struct TinyModel {
  static constexpr int V = 11, D = 6;
  PlanBuilder b;
  int embed, norm, head;
  // fused_head: the head is the second half of a [2V, D] tensor (a weight view, like a fused expert).
  explicit TinyModel(bool fused_head = false, int64_t view_shift = 0) {
    Uniform u(7);
    b.max_rows = 8;
    b.max_seq_len = 32;
    embed = b.weight("embed.weight", {V, D}, u.vec(V * D, -1, 1), DType::BF16);
    norm = b.weight("norm.weight", {D}, u.vec(D, 0.5, 1.5));
    if (fused_head) {
      int fused = b.weight("fused.weight", {2 * V, D}, u.vec(2 * V * D, -0.5, 0.5));
      head = b.view("head.weight", fused, V * D + view_shift, {V, D});
    } else {
      head = b.weight("head.weight", {V, D}, u.vec(V * D, -0.5, 0.5));
    }
    b.token_ids = b.buffer("ids", 1, plan::DType::I32);
    int x = b.buffer("x", D), h = b.buffer("h", D);
    b.logits = b.buffer("logits", V);
    b.op({"smelt.embedding", -1, {b.token_ids}, {x}, {embed}, {}, {}});
    b.op({"smelt.rms_norm", -1, {x}, {h}, {norm}, {}, {F("eps", 1e-6)}});
    b.op({"smelt.linear", -1, {h}, {b.logits}, {head}, {}, {}});
  }
  // Float64 logits of one token (positions do not matter to this model).
  std::vector<double> expected(int id) const {
    const auto &E = b.values(embed), &W = b.values(norm), &H = b.values(head);
    double ms = 0;
    for (int d = 0; d < D; ++d) ms += double(E[id * D + d]) * E[id * D + d];
    double inv = 1.0 / std::sqrt(ms / D + 1e-6);
    std::vector<double> out(V, 0.0);
    for (int v = 0; v < V; ++v)
      for (int d = 0; d < D; ++d) out[v] += double(H[v * D + d]) * (E[id * D + d] * inv * W[d]);
    return out;
  }
};

}  // namespace smelt::runtime::testing
