// Partitioned plans (format 1.2) on the cpu backend: hand-built TP / PP / TPxPP splits of a small model run
// as one thread per rank and match the unsplit plan and a float64 forward; every validation error of the
// ranks and their collectives is one line; a rank that fails at run time stops the others with its message.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/inspect.h"
#include "runtime/session.h"
#include "tests/runtime/ranks_util.h"

namespace smelt::runtime {
namespace {

using testing::Mlp;
using testing::PlanBuilder;
using testing::RankArg;
using testing::TempDir;

using Split = testing::MlpSplit;

std::string load_error(const std::vector<uint8_t>& file) {
  try {
    Plan::from_bytes(file, "part.smelt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

std::vector<int32_t> ids() { return {0, 5, 10, 3, 3, 7, 1, 9, 2, 4, 6, 8, 0}; }  // 13 > max_rows 8: two chunks

// Every element within `tol` relative to the row's largest magnitude.
void expect_close(const float* got, const std::vector<double>& want, double tol, const std::string& what) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / scale);
  EXPECT_LE(worst, tol) << what;
}

std::vector<float> run(const std::vector<uint8_t>& file, const TempDir& dir) {
  Session s(Plan::from_bytes(file, dir.str("part.smelt")));
  std::vector<float> out = s.prefill(ids());
  std::vector<float> one = s.decode(2);
  out.insert(out.end(), one.begin(), one.end());
  return out;
}

TEST(Ranks, TensorParallelMatchesUnsplitAndFloat64) {
  TempDir dir;
  PlanBuilder single;
  Mlp::single(single);
  std::vector<float> want = run(single.file(dir.str()), dir);
  // Even and uneven splits of F (row-parallel w2) and V (vocab-split head).
  struct Case {
    int tp;
    std::vector<int> f, v;
  } cases[] = {{2, {0, 5, 10}, {0, 6, 11}}, {2, {0, 7, 10}, {0, 2, 11}}, {3, {0, 4, 7, 10}, {0, 3, 4, 11}}};
  for (const Case& c : cases) {
    Split split(c.tp, 1, c.f, c.v);
    std::vector<float> got = run(testing::partitioned_file(split.ranks, c.tp, 1, dir.str()), dir);
    ASSERT_EQ(got.size(), want.size());
    std::vector<int32_t> all = ids();
    all.push_back(2);
    for (size_t p = 0; p < all.size(); ++p) {
      std::string what = "tp " + std::to_string(c.tp) + " position " + std::to_string(p);
      // Only the summation order of w2 differs from the unsplit plan: a few float32 roundings.
      expect_close(got.data() + p * Mlp::V, std::vector<double>(want.begin() + p * Mlp::V, want.begin() + (p + 1) * Mlp::V),
                   1e-6, what + " vs unsplit");
      expect_close(got.data() + p * Mlp::V, Mlp::expected(all[p]), 1e-5, what + " vs float64");
    }
  }
}

TEST(Ranks, EveryMemberHoldsTheSameBits) {
  TempDir dir;
  Split split(3, 1, {0, 4, 7, 10}, {0, 3, 4, 11});
  Session s(Plan::from_bytes(testing::partitioned_file(split.ranks, 3, 1, dir.str()), dir.str("part.smelt")));
  std::vector<float> first = s.prefill(ids());
  ASSERT_EQ(s.n_ranks(), 3u);
  for (size_t r = 1; r < 3; ++r)
    EXPECT_EQ(std::memcmp(s.rank_backend(0).logits(), s.rank_backend(r).logits(), 5 * Mlp::V * sizeof(float)), 0)
        << "rank " << r;
  for (int again = 0; again < 5; ++again) {  // run to run: sums in group order, not arrival order
    s.reset();
    std::vector<float> l = s.prefill(ids());
    EXPECT_EQ(std::memcmp(l.data(), first.data(), l.size() * sizeof(float)), 0);
  }
}

TEST(Ranks, AnEmptyShardContributesZeros) {
  // Rank 1 of 3 holds no units of h (docs/ops.md: all_reduce's x is -1): the sum is that of ranks 0 and 2.
  TempDir dir;
  Split split(3, 1, {0, 4, 7, 10}, {0, 3, 4, 11});
  PlanBuilder& r1 = *split.builders[1];
  r1.ops.erase(r1.ops.begin() + 1, r1.ops.begin() + 3);  // its w1 / w2 linears
  r1.ops[1].inputs = {-1};
  Session s(Plan::from_bytes(testing::partitioned_file(split.ranks, 3, 1, dir.str()), dir.str("part.smelt")));
  std::vector<int32_t> all = ids();
  std::vector<float> got = s.prefill(all);
  for (size_t p = 0; p < all.size(); ++p)
    expect_close(got.data() + p * Mlp::V, Mlp::expected(all[p], 4, 7), 1e-5, "position " + std::to_string(p));
  // The change is visible: the full model differs.
  std::vector<double> full = Mlp::expected(all[0]), part = Mlp::expected(all[0], 4, 7);
  double diff = 0;
  for (int v = 0; v < Mlp::V; ++v) diff = std::max(diff, std::fabs(full[size_t(v)] - part[size_t(v)]));
  EXPECT_GT(diff, 1e-3);
}

TEST(Ranks, PipelineAndTensorParallel) {
  TempDir dir;
  PlanBuilder single;
  Mlp::single(single);
  std::vector<float> want = run(single.file(dir.str()), dir);
  for (int tp : {1, 2}) {
    Split split(tp, 2, tp == 1 ? std::vector<int>{0, 10} : std::vector<int>{0, 3, 10},
                tp == 1 ? std::vector<int>{0, 11} : std::vector<int>{0, 8, 11});
    Plan plan = Plan::from_bytes(testing::partitioned_file(split.ranks, tp, 2, dir.str()), dir.str("part.smelt"));
    EXPECT_EQ(plan.output_rank(), tp);  // last stage, TP rank 0
    EXPECT_EQ(plan.vocab(), Mlp::V);
    std::vector<float> got = run(testing::partitioned_file(split.ranks, tp, 2, dir.str()), dir);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    EXPECT_LE(worst, tp == 1 ? 0.0 : 1e-6) << "tp " << tp << " x pp 2";  // PP alone changes no sum
  }
}

TEST(Ranks, AFailingRankStopsTheOthers) {
  TempDir dir;
  // Token id 11 is outside the embedding, which only stage 0 holds: stage 0 fails while stage 1 waits in its
  // recv (and, with TP 2, a stage-0 member may wait in the all_reduce). The run must end with the failing
  // rank's message, never hang, and the session must work afterwards.
  for (int tp : {1, 2}) {
    Split split(tp, 2, tp == 1 ? std::vector<int>{0, 10} : std::vector<int>{0, 5, 10},
                tp == 1 ? std::vector<int>{0, 11} : std::vector<int>{0, 6, 11});
    Session s(Plan::from_bytes(testing::partitioned_file(split.ranks, tp, 2, dir.str()), dir.str("part.smelt")));
    for (int attempt = 0; attempt < 3; ++attempt) {
      try {
        s.prefill(std::vector<int32_t>{1, 11});
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        std::string m = e.what();
        auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
        EXPECT_TRUE(has("part.smelt rank 0: op 0 (smelt.embedding, layer -1): token id 11 is outside [0, 11)") ||
                    (tp == 2 && has("part.smelt rank 1: op 0 (smelt.embedding, layer -1): token id 11")))
            << m;
      }
      EXPECT_EQ(s.position(), 0);
    }
    std::vector<float> l = s.prefill(ids());
    expect_close(l.data(), Mlp::expected(0), 1e-5, "after the failures");
  }
}

TEST(Ranks, InspectShowsEveryRank) {
  TempDir dir;
  Split split(2, 2, {0, 3, 10}, {0, 8, 11});
  Plan plan = Plan::from_bytes(testing::partitioned_file(split.ranks, 2, 2, dir.str()), dir.str("part.smelt"));
  auto j = inspect_json(plan);
  EXPECT_EQ(j["tp"], 2);
  EXPECT_EQ(j["pp"], 2);
  ASSERT_EQ(j["ranks"].size(), 4u);
  auto r0 = j["ranks"][0], r3 = j["ranks"][3];
  EXPECT_EQ(r0["stage"], 0);
  EXPECT_EQ(r3["stage"], 1);
  EXPECT_EQ(r3["tp_rank"], 1);
  EXPECT_EQ(r0["layers"], "0");
  EXPECT_EQ(r0["embedding"], true);
  EXPECT_EQ(r0["head"], false);
  EXPECT_EQ(r3["head"], true);
  // Per decode step: stage 0 all-reduces one row of D floats and sends one; stage 1 receives one and gathers V.
  EXPECT_EQ(r0["collectives_per_decode_step"]["smelt.all_reduce"]["count"], 1);
  EXPECT_EQ(r0["collectives_per_decode_step"]["smelt.all_reduce"]["bytes"], 4 * Mlp::D);
  EXPECT_EQ(r0["collectives_per_decode_step"]["smelt.send"]["bytes"], 4 * Mlp::D);
  EXPECT_EQ(r3["collectives_per_decode_step"]["smelt.recv"]["count"], 1);
  EXPECT_EQ(r3["collectives_per_decode_step"]["smelt.all_gather"]["bytes"], 4 * Mlp::V);
  // Rank 1 holds rows 3:10 of w1 and cols 3:10 of w2 (7 x 6 floats each) besides the base tensors.
  uint64_t base = 4 * (2 * Mlp::V * Mlp::D + 2 * Mlp::F * Mlp::D);
  EXPECT_EQ(j["ranks"][1]["weight_bytes"], base + 4 * 2 * 7 * Mlp::D);
  std::string text = inspect_text(plan);
  EXPECT_NE(text.find("rank 3: stage 1, tp_rank 1, arch cpu, share 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("collectives per decode step: smelt.all_reduce x1 (24 bytes), smelt.send x1 (24 bytes)"),
            std::string::npos) << text;
}

// ---- validation errors ----------------------------------------------------------------------------------------

TEST(RankErrors, RanksAndStages) {
  TempDir dir;
  Split split(2, 1, {0, 5, 10}, {0, 6, 11});
  auto file = [&](std::vector<RankArg> r, int tp, int pp) { return testing::partitioned_file(r, tp, pp, dir.str()); };
  EXPECT_EQ(load_error(file(split.ranks, 2, 2)), "part.smelt: has 2 ranks, but tp 2 x pp 2 = 4");
  auto explicit_ranks = split.ranks;
  for (size_t k = 0; k < 2; ++k) explicit_ranks[k] = {split.ranks[k].plan, int(k), 0, int(k), 0.5};
  EXPECT_EQ(load_error(file(explicit_ranks, 0, 1)), "part.smelt: has tp 0 and pp 1; each must lie in [1, 1024]");
  auto twice = split.ranks;
  twice[1].index = 0;
  EXPECT_EQ(load_error(file(twice, 2, 1)), "part.smelt: has rank 0 twice");
  auto stage = split.ranks;
  stage[1].tp_rank = 0;
  EXPECT_EQ(load_error(file(stage, 2, 1)),
            "part.smelt: rank 1 has stage 0 and tp_rank 0, but index = stage * tp + tp_rank needs stage 0 and tp_rank 1");
  auto share = split.ranks;
  share[0].share = 1.5;
  EXPECT_EQ(load_error(file(share, 2, 1)), "part.smelt: rank 0 has share 1.500000, outside (0, 1]");
}

TEST(RankErrors, CollectivesOfOneRank) {
  TempDir dir;
  Split split(2, 1, {0, 5, 10}, {0, 6, 11});
  // Rank 1's all_reduce names a group without itself.
  split.builders[1]->ops[3].attrs = {testing::N("group", {0})};
  EXPECT_EQ(load_error(testing::partitioned_file(split.ranks, 2, 1, dir.str())),
            "part.smelt rank 1: op 3 (smelt.all_reduce, layer 0): attribute group [0] does not hold this rank 1");
  split.builders[1]->ops[3].attrs = {testing::N("group", {1, 2})};
  EXPECT_EQ(load_error(testing::partitioned_file(split.ranks, 2, 1, dir.str())),
            "part.smelt rank 1: op 3 (smelt.all_reduce, layer 0): attribute group holds rank 2, outside [0, 2)");
  split.builders[1]->ops[3].attrs = {testing::N("group", {0, 1})};
  // all_gather: this rank's entry of widths must be its input width.
  split.builders[1]->ops[6].attrs = {testing::N("group", {0, 1}), testing::N("widths", {6, 4})};
  EXPECT_EQ(load_error(testing::partitioned_file(split.ranks, 2, 1, dir.str())),
            "part.smelt rank 1: op 6 (smelt.all_gather, layer -1): input 0 has row_elems 5, expected 4 (this rank's "
            "entry of widths)");
}

TEST(RankErrors, MembersMustAgree) {
  TempDir dir;
  Split split(2, 1, {0, 5, 10}, {0, 6, 11});
  // Rank 1 gathers with other widths than rank 0 (its own entry still right).
  split.builders[1]->ops[6].attrs = {testing::N("group", {0, 1}), testing::N("widths", {5, 5})};
  split.builders[1]->ops[6].outputs = {split.builders[1]->buffer("logits10", 10)};
  split.builders[1]->logits = split.builders[1]->ops[6].outputs[0];
  EXPECT_EQ(load_error(testing::partitioned_file(split.ranks, 2, 1, dir.str())),
            "part.smelt rank 1: has logits of 10 columns, rank 0 of 11");
}

TEST(RankErrors, ExchangeOnPaper) {
  TempDir dir;
  auto plan = [&](Split& s, int tp, int pp) { return load_error(testing::partitioned_file(s.ranks, tp, pp, dir.str())); };
  {  // the second member runs a different collective on the same group
    Split s(2, 1, {0, 5, 10}, {0, 6, 11});
    auto& op = s.builders[1]->ops[3];
    int wide = s.builders[1]->buffer("y.wide", 2 * Mlp::D);
    op = {"smelt.all_gather", 0, {op.inputs[0]}, {wide}, {}, {}, {testing::N("group", {0, 1}), testing::N("widths", {6, 6})}};
    s.builders[1]->ops[4].inputs[1] = s.builders[1]->ops[0].outputs[0];  // keep the dataflow valid
    EXPECT_EQ(plan(s, 2, 1),
              "part.smelt: the forward: rank 1 op 3 (smelt.all_gather, layer 0) meets rank 0 op 3 (smelt.all_reduce, "
              "layer 0) on group [0, 1] but is smelt.all_gather (rank 0 op 3 (smelt.all_reduce, layer 0) is "
              "smelt.all_reduce of rows of 6)");
  }
  {  // a send that nobody receives, and a recv whose width differs from the send
    Split s(1, 2, {0, 10}, {0, 11});
    s.builders[0]->ops.push_back({"smelt.send", 0, {s.builders[0]->ops[4].outputs[0]}, {}, {}, {}, {testing::I("peer", 1), testing::I("tag", 9)}});
    EXPECT_EQ(plan(s, 1, 2), "part.smelt: the forward: rank 0 op 6 (smelt.send, layer 0) sends tag 9 to rank 1, which never receives it");
    s.builders[0]->ops.pop_back();
    int narrow = s.builders[1]->buffer("z4", 4);
    s.builders[1]->ops[0].outputs = {narrow};
    s.builders[1]->ops.insert(s.builders[1]->ops.begin() + 1,
                              {"smelt.linear", -1, {narrow}, {s.builders[1]->ops[1].inputs[0]}, {s.builders[1]->weight("pad", {Mlp::D, 4}, std::vector<float>(24, 0.f))}, {}, {}});
    EXPECT_EQ(plan(s, 1, 2),
              "part.smelt: rank 1 op 0 (smelt.recv, layer -1) receives rows of 4 from rank 0 tag 7, but the matching "
              "rank 0 op 5 (smelt.send, layer 0) sends rows of 6");
  }
  {  // stage 1 waits for a tag stage 0 never sends
    Split s(1, 2, {0, 10}, {0, 11});
    s.builders[1]->ops[0].attrs = {testing::I("peer", 0), testing::I("tag", 8)};
    std::string e = plan(s, 1, 2);
    EXPECT_EQ(e, "part.smelt: the forward would deadlock: rank 1 op 0 (smelt.recv, layer -1) waits for tag 8 from rank 0");
  }
}

TEST(RankErrors, HeadOnlyOnTheLastStage) {
  TempDir dir;
  Split s(1, 2, {0, 10}, {0, 11});
  s.builders[0]->logits = s.builders[0]->ops[4].outputs[0];
  EXPECT_EQ(load_error(testing::partitioned_file(s.ranks, 1, 2, dir.str())),
            "part.smelt rank 0: is a rank before the last pipeline stage but has logits buffer 1 (expected -1: the "
            "head lives on the last stage)");
}

TEST(RankErrors, SendToItselfAndPlainPlans) {
  TempDir dir;
  Split s(1, 2, {0, 10}, {0, 11});
  s.builders[0]->ops[5].attrs = {testing::I("peer", 0), testing::I("tag", 7)};
  EXPECT_EQ(load_error(testing::partitioned_file(s.ranks, 1, 2, dir.str())),
            "part.smelt rank 0: op 5 (smelt.send, layer 0): attribute peer = 0 is not another rank of [0, 2) (this is rank 0)");
  // A plain plan is rank 0 of 1: an all_reduce over [0] is a copy, a send has no peer.
  PlanBuilder b;
  Mlp::rank(b, 1, 1, 0, 0, {0, 10}, {0, 11});
  Session one(Plan::from_bytes(b.file(dir.str()), dir.str("one.smelt")));
  expect_close(one.prefill(std::vector<int32_t>{4}).data(), Mlp::expected(4), 1e-5, "tp 1 plan with collectives");
}

}  // namespace
}  // namespace smelt::runtime
