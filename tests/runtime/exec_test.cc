// The cpu backend runs plans correctly: logits against float64 forwards written in the tests, and the
// same logits whatever the prefill is cut into (state carried across chunks exactly).
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/session.h"
#include "tests/runtime/plan_builder.h"
#include "tests/runtime/v4_tiny.h"

namespace smelt::runtime {
namespace {

using testing::TempDir;
using testing::TinyModel;
using testing::V4Tiny;
using testing::Vd;

// Each element within `tol` of the expected value relative to the larger of its magnitude and the RMS of
// its row (float32 arithmetic against float64: absolute error scales with the row, not the element).
void expect_close(const float* got, const Vd& want, double tol, const std::string& what) {
  double ms = 0;
  for (double w : want) ms += w * w;
  double rms = std::sqrt(ms / double(want.size())), worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]) / std::max(std::fabs(want[i]), rms);
    if (!(err <= worst)) worst = err, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}

std::unique_ptr<Session> open(testing::PlanBuilder& b, const TempDir& dir) {
  return std::make_unique<Session>(Plan::from_bytes(b.file(dir.str()), dir.str("test.smelt")));
}

std::vector<int32_t> prompt(int len, int vocab, int salt = 0) {
  std::vector<int32_t> ids(len);
  for (int i = 0; i < len; ++i) ids[i] = (i * 7 + 3 + salt * 5 + (i * i) % 5) % vocab;
  return ids;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CpuExec, TinyModelMatchesFloat64) {
  TempDir dir;
  TinyModel m;
  auto s = open(m.b, dir);
  std::vector<int32_t> ids = {0, 5, 10, 3, 3, 7, 1, 9, 2, 4, 6, 8, 0};  // 13 > max_rows 8: two chunks
  std::vector<float> logits = s->prefill(ids);
  ASSERT_EQ(logits.size(), ids.size() * TinyModel::V);
  for (size_t p = 0; p < ids.size(); ++p)
    expect_close(logits.data() + p * TinyModel::V, m.expected(ids[p]), 1e-5, "position " + std::to_string(p));
  std::vector<float> one = s->decode(7);
  expect_close(one.data(), m.expected(7), 1e-5, "decode");
  EXPECT_EQ(s->position(), 14);
}

TEST(CpuExec, WeightViewsIntoALargerTensor) {
  TempDir dir;
  TinyModel m(/*fused_head=*/true);
  auto s = open(m.b, dir);
  std::vector<int32_t> ids = {4, 8, 2};
  std::vector<float> logits = s->prefill(ids);
  for (size_t p = 0; p < ids.size(); ++p)
    expect_close(logits.data() + p * TinyModel::V, m.expected(ids[p]), 1e-5, "position " + std::to_string(p));
}

TEST(CpuExec, V4TinyMatchesFloat64) {
  TempDir dir;
  V4Tiny m;
  auto s = open(m.b, dir);
  std::vector<int32_t> ids = prompt(40, V4Tiny::V);
  std::vector<float> logits = s->prefill(ids);
  std::vector<Vd> want = m.forward(ids);
  for (size_t p = 0; p < ids.size(); ++p)
    expect_close(logits.data() + p * V4Tiny::V, want[p], 2e-4, "position " + std::to_string(p));
}

TEST(CpuExec, ChunkedPrefillIsBitIdentical) {
  TempDir dir;
  V4Tiny m;
  auto s = open(m.b, dir);
  std::vector<int32_t> ids = prompt(40, V4Tiny::V, 1);
  std::vector<float> whole = s->prefill(ids);  // one chunk of 40 rows (max_rows 48)
  for (int chunk : {1, 7, 33, 48, 1000}) {
    s->reset();
    EXPECT_TRUE(bit_identical(s->prefill(ids, chunk), whole)) << "chunk " << chunk;
  }
  // Prefill part, then decode the rest one token at a time.
  s->reset();
  std::vector<float> stepped = s->prefill(std::span<const int32_t>(ids).first(13), 5);
  for (size_t p = 13; p < ids.size(); ++p) {
    std::vector<float> l = s->decode(ids[p]);
    stepped.insert(stepped.end(), l.begin(), l.end());
  }
  EXPECT_TRUE(bit_identical(stepped, whole));
  EXPECT_EQ(s->position(), 40);
}

TEST(CpuExec, MaxRowsSplitsLongPrefills) {
  // The same model compiled for 16-row chunks gives the same logits for a 40-token prompt.
  TempDir d1, d2;
  V4Tiny big(48), small(16);
  auto a = open(big.b, d1), b = open(small.b, d2);
  std::vector<int32_t> ids = prompt(40, V4Tiny::V, 2);
  EXPECT_TRUE(bit_identical(a->prefill(ids), b->prefill(ids)));
}

TEST(CpuExec, ResetStartsAFreshSequence) {
  TempDir dir;
  V4Tiny m;
  auto s = open(m.b, dir);
  std::vector<int32_t> first = prompt(30, V4Tiny::V, 3), second = prompt(20, V4Tiny::V, 4);
  s->prefill(first);
  s->reset();
  std::vector<float> after_reset = s->prefill(second);
  TempDir dir2;
  auto fresh = open(m.b, dir2);
  EXPECT_TRUE(bit_identical(after_reset, fresh->prefill(second)));
  // Without reset the history matters (the state is really used).
  std::vector<float> continued = fresh->prefill(second);
  EXPECT_FALSE(bit_identical(continued, after_reset));
}

TEST(CpuExec, FullSequenceToMaxSeqLen) {
  TempDir dir;
  V4Tiny m(48, 64);
  auto s = open(m.b, dir);
  std::vector<int32_t> ids = prompt(64, V4Tiny::V, 5);
  std::vector<float> logits = s->prefill(ids, 48);
  std::vector<Vd> want = m.forward(ids);
  expect_close(logits.data() + 63 * V4Tiny::V, want[63], 2e-4, "last position");
  EXPECT_THROW(s->decode(1), Error);
}

// Regenerates tests/fuzz/seeds/plan/ (run with --gtest_also_run_disabled_tests and SMELT_PLAN_SEEDS=DIR).
TEST(CpuExec, DISABLED_WriteFuzzSeeds) {
  const char* out = std::getenv("SMELT_PLAN_SEEDS");
  ASSERT_NE(out, nullptr);
  TempDir dir;
  TinyModel tiny;
  V4Tiny v4(16, 32);
  tiny.b.record_model_dir = v4.b.record_model_dir = false;
  std::vector<uint8_t> a = tiny.b.file(dir.str()), b = v4.b.file(dir.str());
  testing::PlanBuilder::write_bytes(std::string(out) + "/tiny.smelt", a);
  testing::PlanBuilder::write_bytes(std::string(out) + "/v4_two_layers.smelt", b);
  testing::PlanBuilder::write_bytes(std::string(out) + "/truncated.smelt", std::vector<uint8_t>(a.begin(), a.begin() + a.size() / 2));
}

}  // namespace
}  // namespace smelt::runtime
