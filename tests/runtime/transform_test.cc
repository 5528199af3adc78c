// Weight load transforms (docs/plan.md "Weight transforms"): each dtype against hand-computed results, the
// zero-copy row slice, and the one-line errors for transforms that do not fit their source.
#include <gtest/gtest.h>

#include "runtime/weights.h"
#include "tests/runtime/plan_builder.h"

namespace smelt::runtime {
namespace {

using testing::PlanBuilder;
using testing::TempDir;
using testing::TinyModel;

std::vector<float> iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = float(i);
  return v;
}

TEST(Transform, FloatRowsColsZerosAndRepeats) {
  TempDir dir;
  TinyModel m;
  // S = [[0 1 2] [3 4 5] [6 7 8] [9 10 11]]
  int s = m.b.weight("s", {4, 3}, iota(12));
  // rows(2:4,0:1,zero:1) -> [[6 7 8] [9 10 11] [0 1 2] [0 0 0]]; then cols(2:3,zero:2,0:1).
  int t = m.b.transformed("t", s, "rows(2:4,0:1,zero:1); cols(2:3,zero:2,0:1)", {4, 4});
  int dup = m.b.transformed("dup", s, "cols(1:2,1:2)", {4, 2});         // duplication
  int slice = m.b.transformed("slice", s, "rows(1:3)", {2, 3});        // contiguous: read in place
  int bf = m.b.weight("bf", {2, 3}, {1, 2, 3, 4, 5, 6}, DType::BF16);
  int bft = m.b.transformed("bft", bf, "cols(2:3,0:2)", {2, 3});
  int ints = m.b.int_weight("i", {3, 2}, {10, 11, 20, 21, 30, 31});
  int intt = m.b.transformed("it", ints, "rows(2:3,0:1)", {2, 2});
  Plan plan = Plan::from_bytes(m.b.file(dir.str()), dir.str("t.smelt"));
  Weights w = Weights::load(plan, "");
  auto f = [&](int id, size_t n) { return std::vector<float>(w.f32(id), w.f32(id) + n); };
  EXPECT_EQ(f(t, 16), (std::vector<float>{8, 0, 0, 6, 11, 0, 0, 9, 2, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(f(dup, 8), (std::vector<float>{1, 1, 4, 4, 7, 7, 10, 10}));
  EXPECT_EQ(f(slice, 6), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(w.f32(slice), w.f32(s) + 3) << "a contiguous row slice is a view of the mapping";
  EXPECT_EQ(f(bft, 6), (std::vector<float>{3, 1, 2, 6, 4, 5}));
  EXPECT_EQ(std::vector<int32_t>(w.i32(intt), w.i32(intt) + 4), (std::vector<int32_t>{30, 31, 10, 11}));
}

TEST(Transform, QuantizedBytes) {
  TempDir dir;
  TinyModel m;
  // F8_E4M3 [2, 4]: bytes 0x10..0x17; cols(2:4,zero:1) keeps bytes 2, 3 of each row and pads one zero byte.
  int e4 = m.b.raw_weight("e4", {2, 4}, DType::F8_E4M3, {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17});
  int e4t = m.b.transformed("e4t", e4, "cols(2:4,zero:1)", {2, 3});
  // Packed FP4 I8 [2, 3] (K = 6): cols are stored bytes (2 FP4 values each).
  int fp4 = m.b.raw_weight("fp4", {2, 3}, DType::I8, {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6});
  int fp4t = m.b.transformed("fp4t", fp4, "cols(1:3)", {2, 2});
  // F8_E8M0 scales [2, 2]: padded rows hold 127 (2^0 = 1.0), so a zeroed weight block stays finite.
  int sc = m.b.raw_weight("sc", {2, 2}, DType::F8_E8M0, {120, 121, 122, 123});
  int sct = m.b.transformed("sct", sc, "rows(1:2,zero:2);cols(zero:1,0:2)", {3, 3});
  Plan plan = Plan::from_bytes(m.b.file(dir.str()), dir.str("t.smelt"));
  Weights w = Weights::load(plan, "");
  auto bytes = [&](int id, size_t n) { return std::vector<uint8_t>(w.raw(id), w.raw(id) + n); };
  EXPECT_EQ(bytes(e4t, 6), (std::vector<uint8_t>{0x12, 0x13, 0x00, 0x16, 0x17, 0x00}));
  EXPECT_EQ(bytes(fp4t, 4), (std::vector<uint8_t>{0xb2, 0xc3, 0xe5, 0xf6}));
  EXPECT_EQ(bytes(sct, 9), (std::vector<uint8_t>{127, 122, 123, 127, 127, 127, 127, 127, 127}));
}

std::string load_error(PlanBuilder& b, const TempDir& dir) {
  try {
    Plan::from_bytes(b.file(dir.str()), "t.smelt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(Transform, Errors) {
  TempDir dir;
  auto error = [&](const std::string& transform, std::vector<int64_t> shape) {
    TinyModel m;
    int s = m.b.weight("s", {4, 3}, iota(12));
    m.b.transformed("t", s, transform, shape);
    return load_error(m.b, dir);
  };
  // Weights 0..2 are the tiny model's, 3 the source, 4 the transformed one.
  EXPECT_EQ(error("rows(0:5)", {5, 3}), "t.smelt: weight 4 (t) transform 'rows(0:5)': step 1 takes rows 0:5 of 4 (shape [4, 3])");
  EXPECT_EQ(error("cols(1:3)", {4, 3}),
            "t.smelt: weight 4 (t) transform 'cols(1:3)': makes shape [4, 2] from source_shape [4, 3], but the weight's "
            "shape is [4, 3]");
  EXPECT_EQ(error("rows(2:1)", {1, 3}),
            "t.smelt: weight 4 (t) transform 'rows(2:1)': range '2:1' is not a:b (a < b) or zero:n (n > 0)");
  EXPECT_EQ(error("slice(0:1)", {1, 3}),
            "t.smelt: weight 4 (t) transform 'slice(0:1)': step 'slice(0:1)' is not rows(...) or cols(...)");
  EXPECT_EQ(error("rows(0:1);cols(0:1", {1, 1}),
            "t.smelt: weight 4 (t) transform 'rows(0:1);cols(0:1': step 'cols(0:1' does not end with ')'");
  TinyModel m;
  int v = m.b.weight("v", {4}, iota(4));
  m.b.transformed("t", v, "cols(0:1)", {4});
  EXPECT_EQ(load_error(m.b, dir),
            "t.smelt: weight 4 (t) transform 'cols(0:1)': step 1 takes cols of the 1-d shape [4] (cols needs 2-d)");
}

}  // namespace
}  // namespace smelt::runtime
