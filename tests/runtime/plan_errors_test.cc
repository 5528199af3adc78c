// Every way a plan or its checkpoint can be wrong gets one sentence that names the file and the place.
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/plan.h"
#include "runtime/session.h"
#include "tests/runtime/plan_builder.h"

namespace smelt::runtime {
namespace {

using testing::F;
using testing::I;
using testing::S;
using testing::TempDir;
using testing::TinyModel;

// The message of the smelt::Error `f` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  return error_of([&] { Plan::from_bytes(bytes, "bad.smelt"); });
}

// Builds the tiny model after `edit` changed it; returns the load error.
template <typename Edit>
std::string tiny_error(Edit edit) {
  TempDir dir;
  TinyModel m;
  edit(m.b);
  return load_error(m.b.file(dir.str()));
}

TEST(PlanErrors, ValidPlanLoads) {
  TempDir dir;
  TinyModel m;
  Plan p = Plan::from_bytes(m.b.file(dir.str()), "tiny.smelt");
  EXPECT_EQ(p.ops().size(), 3u);
  EXPECT_EQ(p.vocab(), TinyModel::V);
  EXPECT_EQ(p.option("model_dir"), dir.str());
  EXPECT_EQ(p.ops()[1].f("eps"), 1e-6);
  EXPECT_EQ(p.ops()[1].i("groups"), 1);  // default filled in
}

TEST(PlanErrors, Header) {
  TempDir dir;
  TinyModel m;
  std::vector<uint8_t> payload = m.b.payload(dir.str()), good = plan_file::wrap(payload);

  std::vector<uint8_t> truncated(good.begin(), good.end() - 10);
  EXPECT_EQ(load_error(truncated), "bad.smelt: is truncated or padded: header says " + std::to_string(payload.size()) +
                                       " payload bytes, file has " + std::to_string(payload.size() - 10));
  EXPECT_EQ(load_error({good.begin(), good.begin() + 20}),
            "bad.smelt: is not a smelt plan: 20 bytes is shorter than the 32-byte header");

  std::vector<uint8_t> magic = good;
  magic[0] = 'X';
  EXPECT_EQ(load_error(magic), "bad.smelt: is not a smelt plan (wrong magic bytes)");

  EXPECT_EQ(load_error(plan_file::wrap(payload, 2, 0)),
            "bad.smelt: has plan format version 2.0 but this runtime reads major version 1 only; recompile the plan");
  EXPECT_EQ(load_error(plan_file::wrap(payload, 1, 7)),
            "bad.smelt: has plan format version 1.7, newer than this runtime's 1.2; update smelt-run");

  std::vector<uint8_t> corrupt = good;
  corrupt[plan_file::kHeaderSize + payload.size() / 2] ^= 0x40;
  EXPECT_EQ(load_error(corrupt), "bad.smelt: is corrupt: payload hash mismatch");

  // A payload whose hash matches but which is not a plan flatbuffer.
  std::vector<uint8_t> junk(64, 0xab);
  EXPECT_EQ(load_error(plan_file::wrap(junk)), "bad.smelt: is corrupt: the plan flatbuffer does not verify");

  EXPECT_EQ(error_of([] { Plan::load("/nonexistent/dir/x.smelt"); }), "/nonexistent/dir/x.smelt: cannot open plan file");
}

TEST(PlanErrors, OpsAndIds) {
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[2].inputs = {99}; }),
            "bad.smelt: op 2 (smelt.linear, layer -1): input 0 (x) is 99, out of range [0, 4)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].weights = {-7}; }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): weight 0 (weight) is -7, out of range [0, 3)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[0].weights = {-1}; }),
            "bad.smelt: op 0 (smelt.embedding, layer -1): weight 0 (embed) is -1, out of range [0, 3)");
  EXPECT_EQ(tiny_error([](auto& b) {
              b.ops[1].name = "smelt.frobnicate";
              b.ops[1].layer = 4;
            }),
            "bad.smelt: op 1 (smelt.frobnicate, layer 4): unknown op 'smelt.frobnicate' (not in docs/ops.md, or newer "
            "than this runtime)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[2].outputs = {}; }),
            "bad.smelt: op 2 (smelt.linear, layer -1): has 0 outputs, expected 1");
  EXPECT_EQ(tiny_error([](auto& b) { b.logits = 12; }), "bad.smelt: logits is buffer 12 but the plan has 4");
  EXPECT_EQ(tiny_error([](auto& b) { b.token_ids = 1; }), "bad.smelt: token_ids buffer 1 is not I32");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[0].inputs = {1}; }),
            "bad.smelt: op 0 (smelt.embedding, layer -1): input 0 (ids) is buffer 1 of dtype F32, expected I32");
  EXPECT_EQ(tiny_error([](auto& b) { b.max_rows = 0; }), "bad.smelt: max_rows 0 is outside [1, 1048576]");
  EXPECT_EQ(tiny_error([](auto& b) { b.arena_bytes -= 40; }).substr(0, 34), "bad.smelt: buffer 3 (logits) ends ");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops.clear(); }), "bad.smelt: has no ops");
  EXPECT_EQ(tiny_error([](auto& b) { b.recorded_path = "../model.safetensors"; }),
            "bad.smelt: checkpoint file 0 has path '../model.safetensors'; it must be relative to the model directory");
}

TEST(PlanErrors, Attributes) {
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs = {}; }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): is missing required attribute 'eps'");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs = {I("eps", 1)}; }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): attribute 'eps' must be float (f)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(F("groups", 2.0)); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): attribute 'groups' must be integer (i)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(S("colour", "red")); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): has unknown attribute 'colour'");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(F("eps", 1.0)); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): has attribute 'eps' twice");
  // The scheduling attribute any op may carry (runtime/op_specs.h schedule_attrs).
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(I("stream", 2)); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): attribute stream = 2 must be 0 (main) or 1 (side)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(F("stream", 1.0)); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): attribute 'stream' must be integer (i)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[1].attrs.push_back(I("groups", 4)); }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): input row_elems 6 is not a multiple of groups 4");
}

TEST(PlanErrors, Widths) {
  // linear: x cols must equal weight shape[1], y cols weight shape[0].
  EXPECT_EQ(tiny_error([](auto& b) {
              int wide = b.weight("wide.weight", {TinyModel::V, 7}, std::vector<float>(TinyModel::V * 7, 0.f));
              b.ops[2].weights = {wide};
            }),
            "bad.smelt: op 2 (smelt.linear, layer -1): input 0 has row_elems 6, expected 7 (weight shape [N, K]: K)");
  EXPECT_EQ(tiny_error([](auto& b) {
              int narrow = b.weight("narrow.weight", {5, TinyModel::D}, std::vector<float>(5 * TinyModel::D, 0.f));
              b.ops[2].weights = {narrow};
            }),
            "bad.smelt: op 2 (smelt.linear, layer -1): output 0 has row_elems 11, expected 5 (weight shape [N, K]: N)");
  EXPECT_EQ(tiny_error([](auto& b) {
              int w = b.weight("short.weight", {4}, std::vector<float>(4, 1.f));
              b.ops[1].weights = {w};
            }),
            "bad.smelt: op 1 (smelt.rms_norm, layer -1): weight 0 (short.weight) has shape [4], expected [6]");
}

TEST(PlanErrors, Dataflow) {
  // Reading a buffer nobody wrote.
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[2].inputs = {b.buffer("spare", TinyModel::D)}; }),
            "bad.smelt: op 2 (smelt.linear, layer -1): input 0 reads buffer 4 (spare) before any op writes it, or after "
            "another buffer sharing its arena bytes was written");
  EXPECT_EQ(tiny_error([](auto& b) { std::swap(b.ops[1], b.ops[2]); }),
            "bad.smelt: op 1 (smelt.linear, layer -1): input 0 reads buffer 2 (h) before any op writes it, or after "
            "another buffer sharing its arena bytes was written");
  // A linear may not write over its own input (an rms_norm may, exactly in place).
  EXPECT_EQ(tiny_error([](auto& b) {
              int square = b.weight("sq.weight", {TinyModel::D, TinyModel::D}, std::vector<float>(36, 0.f));
              b.ops.insert(b.ops.begin() + 2, {"smelt.linear", 0, {2}, {2}, {square}, {}, {}});
            }),
            "bad.smelt: op 2 (smelt.linear, layer 0): output 0 (buffer 2) overlaps input 0 (buffer 2) in the arena");
  EXPECT_EQ(tiny_error([](auto& b) {  // rms_norm in place: fine
              b.ops[1].outputs = {1};
              b.ops[2].inputs = {1};
            }),
            "");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops[2].outputs = {2}; }),
            "bad.smelt: op 2 (smelt.linear, layer -1): output 0 has row_elems 6, expected 11 (weight shape [N, K]: N)");
  EXPECT_EQ(tiny_error([](auto& b) { b.ops.pop_back(); }), "bad.smelt: no op writes the logits buffer 3");
  // Buffers that share arena bytes (the memory planner's reuse): writing one ends the other's life.
  EXPECT_EQ(tiny_error([](auto& b) {
              int z = b.alias("z", TinyModel::D, 1);
              b.ops.insert(b.ops.begin() + 1, {"smelt.rms_norm", -1, {1}, {z}, {-1}, {}, {F("eps", 1e-6)}});
            }),
            "bad.smelt: op 2 (smelt.rms_norm, layer -1): input 0 reads buffer 1 (x) before any op writes it, or after "
            "another buffer sharing its arena bytes was written");
}

TEST(CheckpointErrors, MissingChangedAndUnrecorded) {
  TempDir dir;
  TinyModel m;
  std::string plan_path = dir.str("tiny.smelt");
  m.b.write(plan_path, dir.str());
  EXPECT_EQ(error_of([&] { Session::open(plan_path); }), "");

  // Another checkpoint of the same size whose header differs (a renamed tensor).
  TinyModel other;
  other.b.checkpoint_name = "other.safetensors";
  TempDir dir2;
  other.b.payload(dir2.str());
  std::string text;
  {
    std::ifstream in(dir2.str("other.safetensors"), std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  size_t at = text.find("head.weight");
  ASSERT_NE(at, std::string::npos);
  text[at] = 'k';  // "keads.weight": same size, different header
  {
    std::ofstream out(dir.str("model.safetensors"), std::ios::binary | std::ios::trunc);
    out << text;
  }
  EXPECT_EQ(error_of([&] { Session::open(plan_path); }),
            "checkpoint " + dir.str() + " does not match the plan: model.safetensors changed (header hash differs)");

  {
    std::ofstream out(dir.str("model.safetensors"), std::ios::binary | std::ios::app);
    out << "more";
  }
  EXPECT_EQ(error_of([&] { Session::open(plan_path); }),
            "checkpoint " + dir.str() + " does not match the plan: model.safetensors changed (size " +
                std::to_string(text.size() + 4) + " bytes, the plan expects " + std::to_string(text.size()) + ")");

  std::filesystem::remove(dir.str("model.safetensors"));
  EXPECT_EQ(error_of([&] { Session::open(plan_path); }),
            "checkpoint " + dir.str() + " does not match the plan: model.safetensors is missing");
  // --model points elsewhere: the files are looked up there.
  EXPECT_EQ(error_of([&] { Session::open(plan_path, "/nonexistent"); }),
            "checkpoint /nonexistent does not match the plan: model.safetensors is missing");

  TinyModel unrecorded;
  unrecorded.b.record_model_dir = false;
  TempDir dir3;
  unrecorded.b.write(dir3.str("u.smelt"), dir3.str());
  EXPECT_EQ(error_of([&] { Session::open(dir3.str("u.smelt")); }),
            dir3.str("u.smelt") + ": records no model directory; pass --model DIR");
  EXPECT_EQ(error_of([&] { Session::open(dir3.str("u.smelt"), dir3.str()); }), "");
}

TEST(CheckpointErrors, WeightOutsideItsTensor) {
  TempDir dir;
  TinyModel m(/*fused_head=*/true, /*view_shift=*/1);  // one element past the end of fused.weight
  std::string plan_path = dir.str("tiny.smelt");
  m.b.write(plan_path, dir.str());
  std::string err = error_of([&] { Session::open(plan_path); });
  EXPECT_EQ(err.rfind(plan_path + ": weight 3 (head.weight): its bytes [", 0), 0u) << err;
  EXPECT_NE(err.find(") lie outside tensor 'fused.weight' in " + dir.str("model.safetensors")), std::string::npos) << err;
}

TEST(RunErrors, SequenceLengthAndTokenIds) {
  TempDir dir;
  TinyModel m;
  std::string plan_path = dir.str("tiny.smelt");
  m.b.write(plan_path, dir.str());
  auto s = Session::open(plan_path);
  std::vector<int32_t> ids(30, 1);
  s->prefill(ids);
  EXPECT_EQ(s->position(), 30);
  EXPECT_EQ(error_of([&] { s->prefill(std::vector<int32_t>(3, 1)); }),
            plan_path + ": the sequence would reach 33 tokens but the plan was compiled for max_seq_len 32");
  s->decode(2);
  s->decode(3);
  EXPECT_EQ(error_of([&] { s->decode(4); }),
            plan_path + ": the sequence would reach 33 tokens but the plan was compiled for max_seq_len 32");
  s->reset();
  EXPECT_EQ(s->position(), 0);
  EXPECT_EQ(error_of([&] { s->decode(TinyModel::V); }),
            plan_path + ": op 0 (smelt.embedding, layer -1): token id 11 is outside [0, 11)");
  EXPECT_EQ(error_of([&] { s->decode(-3); }),
            plan_path + ": op 0 (smelt.embedding, layer -1): token id -3 is outside [0, 11)");
  EXPECT_EQ(s->position(), 0);
}

}  // namespace
}  // namespace smelt::runtime
